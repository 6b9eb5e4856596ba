"""Backups of a flysift deployment on the cluster: the snapshot API over every index of its prefix.

- **Repository**: a shared-filesystem repository (``type: fs``) registered once under ``<prefix>-backups``; its
  location must lie under the ``path.repo`` of every node (deploy/cluster-local sets ``HOME/snapshots``), a relative
  location is taken under it. The cluster refuses another location; that refusal is one line naming ``path.repo``.
- **Snapshot**: every index ``<prefix>-*`` (papers, passages and vectors of every collection and build, term indices,
  builds, the session store), named by UTC time (``<prefix>-20250102-120000``), with the aliases and document counts
  of each index recorded in the snapshot's metadata.
- **Restore into a new name, then switch**: the snapshot's indices are restored beside the live ones, renamed
  ``<index>-r<UTC time>`` (an earlier restore's suffix replaced), the live service untouched; once every restored
  index is active and holds the recorded number of documents, one atomic ``_aliases`` request moves each alias of
  the snapshot (papers, passages, terms, vectors) to its restored index and replaces each plain index (builds, the
  session store) by an alias of the same name over its restored copy (each such plain index is first cloned to
  ``<index>-replaced-r<UTC time>``, under a write block for that moment, since an alias cannot take the name of an
  index that stays). A service that keeps running searches through the aliases, so it answers from the live indices
  during the restore and from the restored ones right after the switch. Indices made after the snapshot that an
  alias still names (a collection created since) keep serving.
- **Replaced indices are kept, closed**: every index of the prefix from before the restore that no alias names any
  more (the replaced versions, builds of the old state, the clones) is closed, not deleted: it holds disk but no
  memory and answers nothing, and is the way back (open it, point its aliases at it again: docs/operations.md) until
  ``drop_replaced`` (``flysift backup replaced --drop``) deletes it. flysift closes no index otherwise, so the
  closed indices of the prefix are exactly what restores kept. ``keep_replaced=False`` deletes them at once.
- **Failure**: a restore that fails before the switch deletes what it restored (and the clones, and lifts the write
  blocks) and leaves the live indices serving. Build records are renamed with their indices, so later builds clean
  up restored versions as their own.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from search.core.errors import FlysiftError, InvalidRequest, NotFound
from search.engines.cluster.transport import ClusterRequestError, Transport

#: the suffix of a restored index: ``-r`` and the UTC time of the restore, 14 digits
RESTORED = re.compile(r"-r[0-9]{14}$")
#: the end of a versioned index's name (papers, passages, vectors, terms: ``mappings.new_version``); other indices
#: (builds, the session store) are named as they are used
VERSIONED = re.compile(r"-[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")
POLL_S = 0.5
#: seconds a restore keeps trying to close the indices it replaced (``_close_replaced``)
CLOSE_PATIENCE_S = 300.0
#: a snapshot or index name as flysift makes them; a name read from a backup's manifest goes into request paths
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,254}")


def repository_name(prefix: str) -> str:
    return f"{prefix}-backups"


def ensure_repository(t: Transport, prefix: str, location: str | None = None) -> dict[str, Any]:
    """The prefix's repository, registered on first use at ``location`` (default: the folder ``<prefix>`` under the
    nodes' ``path.repo``); an existing registration is kept as it is. Returns its type and settings."""
    name = repository_name(prefix)
    try:
        known = t.request("GET", f"/_snapshot/{name}", what="reading the snapshot repository")[name]
        if location is None or known.get("settings", {}).get("location") == location:
            return known
    except ClusterRequestError as e:
        if e.http_status != 404:
            raise
    where = location or prefix
    body: dict[str, Any] = {"type": "fs", "settings": {"location": where, "compress": True}}
    try:
        t.request("PUT", f"/_snapshot/{name}", body, what="registering the snapshot repository")
    except ClusterRequestError as e:
        if "path.repo" in e.message or e.error_type == "repository_exception":
            raise FlysiftError(f"The cluster refused the snapshot repository at {where[:200]!r} "
                               "(FLYSIFT_CLUSTER_SNAPSHOT_LOCATION): every node must list a folder containing it in "
                               "path.repo (deploy/cluster-local: HOME/snapshots); give a location under it, or a "
                               "relative one.",
                               code="backup_refused", status=409,
                               details={"location": where}) from None
        raise
    return body


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime())


def _live_indices(t: Transport, prefix: str) -> dict[str, dict[str, Any]]:
    """Every open index of the prefix with its aliases and document count (closed ones: what restores kept,
    ``replaced_indices``)."""
    aliases = t.request("GET", f"/{prefix}-*/_alias", params={"allow_no_indices": "true", "expand_wildcards": "open"},
                        what="reading aliases")
    if not aliases:
        return {}
    counts = t.request("GET", f"/{prefix}-*/_stats/docs", params={"allow_no_indices": "true",
                                                                   "expand_wildcards": "open"},
                       what="counting documents")["indices"]
    return {i: {"aliases": sorted(a.get("aliases", {})), "docs": counts.get(i, {}).get("primaries", {})
                .get("docs", {}).get("count", 0)} for i, a in aliases.items()}


def create_snapshot(t: Transport, prefix: str, location: str | None = None,
                    wait: Callable[[float], None] = time.sleep, timeout_s: float = 3600) -> dict[str, Any]:
    """Snapshot every index of the prefix (refreshed first, so the recorded counts are what is stored) and wait for
    it; returns its name, indices, shards, state and seconds."""
    repo = repository_name(prefix)
    ensure_repository(t, prefix, location)
    t.request("POST", f"/{prefix}-*/_refresh", params={"allow_no_indices": "true"}, what="refreshing")
    live = _live_indices(t, prefix)
    if not live:
        raise NotFound(f"Nothing to back up: the cluster holds no index of prefix {prefix!r}.",
                       details={"prefix": prefix})
    name = f"{prefix}-{_stamp()}"
    if _snapshot_info(t, repo, name) is not None:
        name += f"-{uuid.uuid4().hex[:4]}"
    t0 = time.monotonic()
    t.request("PUT", f"/_snapshot/{repo}/{name}", {
        "indices": ",".join(sorted(live)), "include_global_state": False, "ignore_unavailable": False,
        "metadata": {"flysift": 1, "prefix": prefix, "indices": live}}, what="starting a snapshot")
    while True:
        info = _snapshot_info(t, repo, name)
        state = info.get("state") if info else None
        if state in ("SUCCESS", "FAILED", "PARTIAL", "INCOMPATIBLE"):
            break
        if time.monotonic() - t0 > timeout_s:
            raise FlysiftError(f"Snapshot {name} did not finish in {timeout_s:g} s (state {state}); it goes on in "
                               f"the cluster: GET /_snapshot/{repo}/{name}.", code="backup_failed", status=504)
        wait(POLL_S)
    if state != "SUCCESS":
        raise FlysiftError(f"Snapshot {name} ended {state}: {info.get('failures') if info else ''}"[:500],
                           code="backup_failed", status=500, details={"snapshot": name, "state": state})
    shards = info.get("shards", {}) if info else {}
    return {"snapshot": name, "repository": repo, "indices": sorted(live), "state": state,
            "shards": shards.get("successful"), "seconds": round(time.monotonic() - t0, 3),
            "documents": sum(v["docs"] for v in live.values())}


def check_snapshot(t: Transport, prefix: str, name: str, indices: list[str]) -> dict[str, Any]:
    """Snapshot ``name`` of the prefix's repository, checked: it exists, ended SUCCESS with no failed shard, and holds
    every index of ``indices``. Returns its name, state, indices and shards."""
    repo = repository_name(prefix)
    info = _snapshot_info(t, repo, name)
    if info is None:
        valid = [s["snapshot"] for s in list_snapshots(t, prefix)]
        raise NotFound(f"No snapshot {name[:100]!r} in repository {repo} (deleted, or another repository location: "
                       "FLYSIFT_CLUSTER_SNAPSHOT_LOCATION).", details={"snapshot": name[:100], "valid": valid[-20:]})
    shards = info.get("shards") or {}
    if info.get("state") != "SUCCESS" or shards.get("failed"):
        raise FlysiftError(f"Snapshot {name} is {info.get('state')} with {shards.get('failed', 0)} failed shards: "
                           "it cannot be restored whole.", code="backup_damaged", status=409,
                           details={"snapshot": name, "state": info.get("state")})
    missing = sorted(set(indices) - set(info.get("indices") or []))
    if missing:
        raise FlysiftError(f"Snapshot {name} lacks {len(missing)} of the backup's indices ({', '.join(missing[:3])}"
                           f"{'…' if len(missing) > 3 else ''}).", code="backup_damaged", status=409,
                           details={"snapshot": name, "missing": missing[:20]})
    return {"snapshot": name, "repository": repo, "state": "SUCCESS", "indices": sorted(info.get("indices") or []),
            "shards": shards.get("successful")}


def _snapshot_info(t: Transport, repo: str, name: str) -> dict[str, Any] | None:
    try:
        res = t.request("GET", f"/_snapshot/{repo}/{name}", what="reading a snapshot")
    except ClusterRequestError as e:
        if e.http_status == 404:
            return None
        raise
    snaps = res.get("snapshots") or []
    return snaps[0] if snaps else None


def list_snapshots(t: Transport, prefix: str) -> list[dict[str, Any]]:
    """The prefix's snapshots, oldest first: name, state, start time, indices (none before the repository)."""
    repo = repository_name(prefix)
    try:
        res = t.request("GET", f"/_snapshot/{repo}/_all", what="listing snapshots")
    except ClusterRequestError as e:
        if e.http_status == 404:
            return []
        raise
    return [{"snapshot": s["snapshot"], "state": s.get("state"), "start_time": s.get("start_time"),
             "indices": len(s.get("indices", []))} for s in res.get("snapshots", [])]


def restore_snapshot(t: Transport, prefix: str, snapshot: str, *, replicas: int, keep_replaced: bool = True,
                     wait: Callable[[float], None] = time.sleep, timeout_s: float = 3600) -> dict[str, Any]:
    """Restore ``snapshot`` beside the live indices, check it, then switch to it atomically (module docstring).
    ``replicas``: the copies the restored indices get on this cluster; ``keep_replaced``: close the replaced indices
    (the way back) rather than delete them. Returns what was restored and switched, and ``replaced``: each index no
    alias names any more with the aliases it served (its name, for a plain index's clone)."""
    repo = repository_name(prefix)
    info = _snapshot_info(t, repo, snapshot)
    if info is None:
        valid = [s["snapshot"] for s in list_snapshots(t, prefix)]
        raise NotFound(f"No snapshot {snapshot!r} in repository {repo}.",
                       details={"snapshot": snapshot[:100], "valid": valid})
    meta = (info.get("metadata") or {})
    recorded: dict[str, dict[str, Any]] = meta.get("indices") or {}
    if meta.get("prefix") != prefix or not recorded:
        raise InvalidRequest(f"Snapshot {snapshot!r} was not made by flysift for prefix {prefix!r}.",
                             details={"snapshot": snapshot[:100]})
    suffix = "-r" + time.strftime("%Y%m%d%H%M%S", time.gmtime())
    restored = {index: RESTORED.sub("", index) + suffix for index in recorded}
    clash = [n for n in restored.values() if _exists(t, n)]
    if clash:
        raise FlysiftError(f"A restore into {clash[0]} exists already; wait a second and retry.", code="busy",
                           status=409)
    before = _live_indices(t, prefix)
    t0 = time.monotonic()
    t.request("POST", f"/_snapshot/{repo}/{snapshot}/_restore", {
        "indices": ",".join(sorted(recorded)), "include_global_state": False, "include_aliases": False,
        "rename_pattern": "^(.+?)(-r[0-9]{14})?$", "rename_replacement": "$1" + suffix,
        "index_settings": {"index.number_of_replicas": replicas}}, what="starting a restore")
    clones: dict[str, str] = {}
    try:
        _await_restored(t, restored, recorded, wait, timeout_s, t0)
        builds = _rename_builds(t, prefix, restored, suffix)
        if keep_replaced:
            _clone_plain(t, _plain_replaced(t, recorded, restored), suffix, clones, wait, timeout_s, t0)
        switched = _switch(t, recorded, restored)
    except BaseException:
        t.request("DELETE", "/" + ",".join(sorted([*restored.values(), *clones.values()])),
                  params={"ignore_unavailable": "true"}, what="removing a failed restore")
        if clones:
            t.request("PUT", "/" + ",".join(sorted(clones)) + "/_settings", {"index.blocks.write": None},
                      params={"ignore_unavailable": "true"}, what="lifting the write block")
        raise
    named = _alias_targets_of_prefix(t, prefix)
    plain = set(switched["plain"])   # names that are aliases now
    old = sorted((set(before) | set(switched["replaced"]) | set(clones.values())) - named - set(restored.values())
                 - plain)
    open_left: list[str] = []
    if old and keep_replaced:
        open_left = _close_replaced(t, old, wait, min(timeout_s, CLOSE_PATIENCE_S))
    elif old:
        t.request("DELETE", "/" + ",".join(old), params={"ignore_unavailable": "true"}, what="dropping replaced")
    served = {**{i: v["aliases"] for i, v in before.items()}, **{c: [p] for p, c in clones.items()}}
    return {"snapshot": snapshot, "indices": sorted(restored.values()), "aliases": switched["aliases"],
            "replaced": {i: served.get(i, []) for i in old}, "kept": keep_replaced, "not_closed": open_left,
            "builds_renamed": builds,
            "seconds": round(time.monotonic() - t0, 3),
            "documents": sum(v.get("docs", 0) for v in recorded.values())}


def _close_replaced(t: Transport, names: list[str], wait: Callable[[float], None], patience_s: float) -> list[str]:
    """Close the replaced indices and wait until their shards are allocated again (closing turns an index red for
    that moment), so the restore ends with the cluster as healthy as it began. The cluster refuses to close an index
    whose copies are still being recovered (a replica of a build published just before: each shard is verified
    first), so a refused close is tried again for up to ``patience_s``; what is still open then is returned, not
    raised: the switch is done, and an index no alias names serves nothing (close or drop it by hand)."""
    left, t1 = list(names), time.monotonic()
    while left:
        res = t.request("POST", "/" + ",".join(left) + "/_close", params={"ignore_unavailable": "true"},
                        what="closing replaced")
        states = res.get("indices") or {}
        left = [i for i in left if i in states and not states[i].get("closed")]
        if not left or time.monotonic() - t1 > patience_s:
            break
        wait(POLL_S)
    closed = [i for i in names if i not in left]
    while closed and t.request("GET", f"/_cluster/health/{','.join(closed)}", params={"expand_wildcards": "all"},
                               what="closing replaced").get("status") not in ("green", "yellow"):
        if time.monotonic() - t1 > patience_s:
            break
        wait(POLL_S)
    return left


def _plain_replaced(t: Transport, recorded: dict[str, dict[str, Any]], restored: dict[str, str]) -> list[str]:
    """The plain indices the switch replaces by an alias of their name (``_switch``'s ``remove_index``)."""
    plain: list[str] = []
    for index in restored:
        for alias in recorded[index].get("aliases") or ([] if VERSIONED.search(RESTORED.sub("", index))
                                                        else [RESTORED.sub("", index)]):
            if _targets(t, alias) is None:
                plain.append(alias)
    return sorted(plain)


def _clone_plain(t: Transport, plain: list[str], suffix: str, clones: dict[str, str],
                 wait: Callable[[float], None], timeout_s: float, t0: float) -> None:
    """Each plain index cloned to ``<index>-replaced<suffix>``, recorded in ``clones`` ({index: clone}) before any
    request, so a failure midway is undone whole (a clone needs a write block on its source: writes are refused from
    here to the switch, which is what replaces the index anyway)."""
    for index in plain:
        clones[index] = f"{index}-replaced{suffix}"
        t.request("PUT", f"/{index}/_settings", {"index.blocks.write": True}, what="blocking writes for a clone")
        t.request("POST", f"/{index}/_clone/{clones[index]}", {"settings": {"index.blocks.write": None}},
                  what="keeping a replaced index")
    if clones:
        names = ",".join(clones.values())
        while t.request("GET", f"/_cluster/health/{names}", what="cloning").get("status") not in ("green", "yellow"):
            if time.monotonic() - t0 > timeout_s:
                raise FlysiftError(f"Keeping {names} did not finish in {timeout_s:g} s.", code="restore_failed",
                                   status=504)
            wait(POLL_S)


def replaced_indices(t: Transport, prefix: str) -> list[dict[str, Any]]:
    """The indices restores kept (the closed indices of the prefix: flysift closes no other), oldest first."""
    rows = t.request("GET", f"/_cat/indices/{prefix}-*", params={"format": "json", "expand_wildcards": "closed",
                                                                  "h": "index,status,creation.date.string"},
                     what="listing replaced indices")
    return sorted(({"index": r["index"], "created": r.get("creation.date.string")} for r in rows or []
                   if r.get("status") == "close"), key=lambda r: (str(r["created"]), r["index"]))


def drop_replaced(t: Transport, prefix: str) -> list[str]:
    """Delete the indices restores kept (``replaced_indices``); returns their names."""
    names = [r["index"] for r in replaced_indices(t, prefix)]
    if names:
        t.request("DELETE", "/" + ",".join(names), params={"expand_wildcards": "closed"},
                  what="dropping replaced indices")
    return names


def _exists(t: Transport, name: str) -> bool:
    try:   # opensearch-py answers a HEAD's 404 with False, the Elasticsearch client raises it
        return t.request("HEAD", f"/{name}", what="checking an index") is not False
    except ClusterRequestError as e:
        if e.http_status == 404:
            return False
        raise


def _await_restored(t: Transport, restored: dict[str, str], recorded: dict[str, dict[str, Any]],
                    wait: Callable[[float], None], timeout_s: float, t0: float) -> None:
    """Every primary of every restored index active, then its document count equal to the snapshot's record."""
    names = ",".join(sorted(restored.values()))
    while True:
        health = t.request("GET", f"/_cluster/health/{names}", what="restore progress")
        if health.get("status") in ("green", "yellow") and not health.get("initializing_shards"):
            break
        if time.monotonic() - t0 > timeout_s:
            raise FlysiftError(f"The restore did not finish in {timeout_s:g} s (health {health.get('status')}).",
                               code="restore_failed", status=504)
        wait(POLL_S)
    t.request("POST", f"/{names}/_refresh", what="refreshing restored indices")
    counts = t.request("GET", f"/{names}/_stats/docs", what="counting restored documents")["indices"]
    for index, name in restored.items():
        got = counts.get(name, {}).get("primaries", {}).get("docs", {}).get("count")
        if got != recorded[index].get("docs"):
            raise FlysiftError(f"Restored index {name} holds {got} documents, the snapshot recorded "
                               f"{recorded[index].get('docs')} for {index}: the live indices were left serving.",
                               code="restore_failed", status=500, details={"index": name})


def _rename_builds(t: Transport, prefix: str, restored: dict[str, str], suffix: str) -> int:
    """Build records carry their indices' version as id: give each restored record its restored version."""
    builds = restored.get(f"{prefix}-builds") or next((v for k, v in restored.items()
                                                       if RESTORED.sub("", k) == f"{prefix}-builds"), None)
    if builds is None:
        return 0
    hits = t.request("POST", f"/{builds}/_search", {"size": 10_000, "query": {"match_all": {}}},
                     what="reading build records")["hits"]["hits"]
    lines = []
    for h in hits:
        new_id = RESTORED.sub("", h["_id"]) + suffix
        lines += [json.dumps({"index": {"_index": builds, "_id": new_id}}), json.dumps(h["_source"]),
                  json.dumps({"delete": {"_index": builds, "_id": h["_id"]}})]
    if lines:
        res = t.request("POST", "/_bulk", "\n".join(lines) + "\n", params={"refresh": "true"}, ndjson=True,
                        what="renaming build records")
        if res.get("errors"):
            raise FlysiftError("Renaming the restored build records failed; the live indices were left serving.",
                               code="restore_failed", status=500)
    return len(hits)


def _switch(t: Transport, recorded: dict[str, dict[str, Any]], restored: dict[str, str]) -> dict[str, Any]:
    """One ``_aliases`` request: every alias of the snapshot onto its restored index (off whatever it names now), and
    every plain index of the snapshot replaced by an alias of its name over its restored copy."""
    actions: list[dict[str, Any]] = []
    replaced: set[str] = set()
    made_aliases: list[str] = []
    aliases: dict[str, str] = {}
    for index, name in sorted(restored.items()):
        plain = RESTORED.sub("", index)
        names = recorded[index].get("aliases") or ([] if VERSIONED.search(plain) else [plain])
        for alias in names:
            current = _targets(t, alias)
            if current is None:   # a plain index by that name: replace it by the alias
                actions.append({"remove_index": {"index": alias}})
                replaced.add(alias)
                made_aliases.append(alias)
            else:
                actions += [{"remove": {"index": i, "alias": alias}} for i in current]
                replaced |= set(current)
            actions.append({"add": {"index": name, "alias": alias}})
            aliases[alias] = name
    t.request("POST", "/_aliases", {"actions": actions}, what="switching to the restored indices")
    return {"aliases": aliases, "replaced": sorted(replaced - set(restored.values())), "plain": sorted(made_aliases)}


def _alias_targets_of_prefix(t: Transport, prefix: str) -> set[str]:
    """Indices of the prefix that some alias names."""
    return {i for i, info in _live_indices(t, prefix).items() if info["aliases"]}


def _targets(t: Transport, name: str) -> list[str] | None:
    """The indices alias ``name`` points to; [] when nothing has the name; None when it is a plain index."""
    try:
        res = t.request("GET", f"/_alias/{name}", what="reading an alias")
        return sorted(res)
    except ClusterRequestError as e:
        if e.http_status != 404:
            raise
    return None if _exists(t, name) else []


class Snapshots:
    """The cluster engine's ``Snapshotting`` (mixed into ``ClusterEngine``): every index of its prefix, the session
    store's included, into the repository at ``snapshot_location`` (``Settings.cluster_snapshot_location``)."""

    t: Transport
    prefix: str
    snapshot_location: str | None
    _layout: Any

    if TYPE_CHECKING:   # the engine's (search.engines.cluster.engine.ClusterEngine.replicas)
        @property
        def replicas(self) -> int: ...

    def create_snapshot(self, location: str | None = None) -> dict[str, Any]:
        """Snapshot every index of the prefix into its repository (registered on first use at ``location``, else the
        configured one)."""
        return create_snapshot(self.t, self.prefix, location or self.snapshot_location)

    def list_snapshots(self) -> list[dict[str, Any]]:
        return list_snapshots(self.t, self.prefix)

    def check_snapshot(self, name: str, indices: list[str]) -> dict[str, Any]:
        _check_names([name, *indices])
        ensure_repository(self.t, self.prefix, self.snapshot_location)
        return check_snapshot(self.t, self.prefix, name, indices)

    def live_indexes(self) -> list[str]:
        return sorted(_live_indices(self.t, self.prefix))

    def restore_snapshot(self, name: str, keep_replaced: bool = True) -> dict[str, Any]:
        """Restore a snapshot beside the live indices, check it, switch to it (module docstring); the repository is
        registered first where it is not (a new cluster given the same location)."""
        _check_names([name])
        ensure_repository(self.t, self.prefix, self.snapshot_location)
        try:
            return restore_snapshot(self.t, self.prefix, name, replicas=self.replicas, keep_replaced=keep_replaced)
        finally:
            self._layout = None

    def replaced_indexes(self) -> list[dict[str, Any]]:
        """The indices earlier restores replaced and kept, closed (``replaced_indices``)."""
        return replaced_indices(self.t, self.prefix)

    def drop_replaced(self) -> list[str]:
        """Delete the indices earlier restores kept; returns their names."""
        return drop_replaced(self.t, self.prefix)


def _check_names(names: list[str]) -> None:
    bad = next((n for n in names if not NAME.fullmatch(n)), None)
    if bad is not None:
        raise InvalidRequest(f"{bad[:60]!r} is not a snapshot or index name flysift makes (a-z, 0-9, . _ -).",
                             details={"name": bad[:60]})
