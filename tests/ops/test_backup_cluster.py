"""``flysift backup create|verify|restore`` in cluster mode, on a real node: the collection indexes and the cluster
session store go into a snapshot named in the backup's manifest; verify asks the cluster for it; restore brings them
back (refusing live indexes without ``--force``); a repository the nodes cannot use is one line naming the setting."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from search.cli.main import main
from search.core.config import Settings
from search.core.errors import FlysiftError
from search.core.models import Gene
from search.core.query import Clause, EngineQuery
from search.engines.cluster.engine import ClusterEngine
from search.engines.cluster.snapshots import ensure_repository, repository_name
from search.ops.backup import MANIFEST
from search.schema.sessions import Session, TraceEvent
from search.sessions.cluster_store import ClusterStore
from search.text.passages import split_passages

from helpers import PAPERS, ClusterNode

pytestmark = pytest.mark.cluster


def _env(settings: Settings, **more: str) -> dict[str, str]:
    return {"FLYSIFT_CLUSTER_URL": settings.cluster_url or "", "FLYSIFT_CLUSTER_FLAVOUR": settings.cluster_flavour,
            "FLYSIFT_CLUSTER_INDEX_PREFIX": settings.cluster_index_prefix, "FLYSIFT_SESSION_STORE": "cluster",
            **more}


def _state(settings: Settings) -> dict:
    """What a client of this deployment can see: stats, every paper, a search, sessions with budgets and traces."""
    engine, store = ClusterEngine(settings), ClusterStore.from_settings(settings)
    try:
        st = engine.stats()
        hits = engine.search_papers(EngineQuery(clauses=[Clause(text="Delta")]), limit=10)
        return {"papers": st.papers, "passages": st.passages,
                "paper": {p.pmcid: engine.get_paper(p.pmcid) for p in PAPERS},
                "hits": [(h.pmcid, round(h.score, 4)) for h in hits.hits], "total": hits.total,
                "sessions": {s.id: s.model_dump() for s in store.list_sessions("lab1")},
                "traces": {sid: [e.model_dump() for e in store.trace(sid)] for sid in ("ses_a", "ses_b")},
                "teams": store.list_teams()}
    finally:
        engine.close()
        store.close()


def _repo_or_skip(settings: Settings) -> None:
    engine = ClusterEngine(settings)
    try:
        ensure_repository(engine.t, engine.prefix)
    except FlysiftError as e:
        if e.code == "backup_refused":
            pytest.skip(f"the test node has no path.repo for snapshots (deploy/cluster-local sets one): {e.message}")
        raise
    finally:
        engine.close()


def test_cluster_backup_of_collection_and_sessions_restores_everything_equal(cluster_settings: Settings,
                                                                             cluster_node: ClusterNode,
                                                                             tmp_path: Path):
    settings = cluster_settings.model_copy(update={"session_store": "cluster"})
    prefix = settings.cluster_index_prefix
    _repo_or_skip(settings)
    engine = ClusterEngine(settings)
    build = engine.open_build("fixture", resume=False)
    for p in PAPERS:
        build.add(p, split_passages(p))
    build.commit({})
    build.publish()
    store = ClusterStore.from_settings(settings)
    store.create_team("lab1")
    for sid, reads in (("ses_a", ["PMC100001", "PMC100002"]), ("ses_b", ["PMC100003"])):
        store.create_session(Session(id=sid, team="lab1", gene=Gene(id="FBgn0000463", symbol="Dl"), max_papers=5,
                                     created_at=time.time()))
        for pmcid in reads:
            store.commit_read(sid, store.reserve_read(sid, pmcid),
                              TraceEvent(time=time.time(), tool="get_paper", latency_ms=1.0, status=200))
    store.close()
    engine.close()
    data = settings.data_dir
    data.mkdir(parents=True)
    (data / "cursor_secret").write_bytes(b"s" * 32)
    before = _state(settings)
    assert before["papers"] == len(PAPERS) and before["hits"] and len(before["sessions"]) == 2

    dest, env = tmp_path / "backup", _env(settings)
    r = CliRunner().invoke(main, ["backup", "create", str(dest), "--data-dir", str(data)], env=env)
    assert r.exit_code == 0, r.output
    manifest = json.loads((dest / MANIFEST).read_text())
    snap = manifest["snapshot"]
    assert manifest["not_included"] == [] and manifest["sessions"] == {"store": "cluster", "in_snapshot": True}
    assert snap["repository"] == repository_name(prefix) and snap["snapshot"].startswith(prefix)
    assert f"{prefix}-sessions-sessions" in snap["indices"] and any("-papers-" in i for i in snap["indices"])
    assert f"cluster snapshot {snap['snapshot']}" in r.output and "session store included" in r.output
    r = CliRunner().invoke(main, ["backup", "verify", str(dest)], env=env)
    assert r.exit_code == 0 and "SUCCESS" in r.output, r.output

    # verify names what the cluster lacks, and takes no name from the manifest into a request path unchecked
    for field, value, says in (("indices", [*snap["indices"], f"{prefix}-papers-gone"], "lacks 1 of the backup's"),
                               ("snapshot", "../_all", "is not a snapshot or index name")):
        (dest / MANIFEST).write_text(json.dumps({**manifest, "snapshot": {**snap, field: value}}))
        r = CliRunner().invoke(main, ["backup", "verify", str(dest)], env=env)
        assert r.exit_code != 0 and says in r.output, r.output
    (dest / MANIFEST).write_text(json.dumps(manifest))

    # the live indexes are not overwritten without --force
    r = CliRunner().invoke(main, ["backup", "restore", str(dest), "--data-dir", str(tmp_path / "new")], env=env)
    assert r.exit_code != 0 and "live indexes" in r.output and "--force" in r.output, r.output
    assert not (tmp_path / "new").exists() and _state(settings) == before

    # lose everything: the deployment's indexes (collection and session store) and the data dir
    cluster_node.cleanup(prefix)
    shutil.rmtree(data)
    assert cluster_node.indices(f"{prefix}-*") == []
    r = CliRunner().invoke(main, ["backup", "restore", str(dest), "--data-dir", str(data)], env=env)
    assert r.exit_code == 0, r.output
    assert f"cluster snapshot {snap['snapshot']}" in r.output and "serving now" in r.output
    assert _state(settings) == before
    assert (data / "cursor_secret").read_bytes() == b"s" * 32
    # the restored store takes writes
    store = ClusterStore.from_settings(settings)
    store.commit_read("ses_b", store.reserve_read("ses_b", "PMC100004"))
    assert ClusterStore.from_settings(settings).get_session("ses_b").budget_used == 2
    store.close()
    cluster_node.call("DELETE", f"/_snapshot/{repository_name(prefix)}/{snap['snapshot']}")
    # a snapshot gone from the repository fails verify, naming it
    r = CliRunner().invoke(main, ["backup", "verify", str(dest)], env=env)
    assert r.exit_code != 0 and f"No snapshot '{snap['snapshot']}'" in r.output, r.output


def test_a_repository_the_nodes_cannot_use_is_one_line_naming_the_setting(cluster_settings: Settings,
                                                                          tmp_path: Path):
    settings = cluster_settings
    engine = ClusterEngine(settings)
    store = ClusterStore.from_settings(settings.model_copy(update={"session_store": "cluster"}))
    store.create_team("lab1")   # something to back up
    store.close()
    engine.close()
    settings.data_dir.mkdir(parents=True)
    outside = tmp_path / "not-under-path-repo"
    r = CliRunner().invoke(main, ["backup", "create", str(tmp_path / "b"), "--data-dir", str(settings.data_dir)],
                           env=_env(settings, FLYSIFT_CLUSTER_SNAPSHOT_LOCATION=str(outside)))
    assert r.exit_code != 0
    errors = [line for line in r.output.splitlines() if not line.startswith("  ")]   # (progress lines are indented)
    assert len(errors) == 1 and "Traceback" not in r.output, r.output
    assert "backup_refused" in errors[0] and "FLYSIFT_CLUSTER_SNAPSHOT_LOCATION" in errors[0]
    assert "path.repo" in errors[0] and str(outside) in errors[0]
    assert not (tmp_path / "b").exists() and not list(tmp_path.glob(".b.partial-*"))   # no half backup left


def _build(engine: ClusterEngine, papers: list, *, shrink: bool = False) -> None:
    build = engine.open_build("fixture-" + "-".join(p.pmcid for p in papers), resume=False)
    for p in papers:
        build.add(p, split_passages(p))
    build.commit({})
    build.publish(allow_shrink=shrink)


def _answer(engine: ClusterEngine) -> tuple[int, tuple[str, ...]]:
    """What a client sees: the published papers and a search's hits (two requests: a switch may fall between)."""
    hits = engine.search_papers(EngineQuery(clauses=[Clause(text="wing")]), limit=10)
    return engine.stats().papers, tuple(sorted(h.pmcid for h in hits.hits))


def _backed_up_then_changed(settings: Settings, tmp_path: Path) -> tuple[Path, ClusterEngine, tuple]:
    """A deployment of every paper and one session, backed up; then rebuilt with two papers and a new session (what
    a restore must undo). Returns the backup, the engine that served all along (opened first, never reopened) and
    what it answered when the backup was made."""
    engine = ClusterEngine(settings)
    _build(engine, PAPERS)
    full = _answer(engine)
    store = ClusterStore.from_settings(settings)
    store.create_team("lab1")
    store.create_session(Session(id="ses_a", team="lab1", gene=Gene(id="FBgn0000463", symbol="Dl"), max_papers=5,
                                 created_at=time.time()))
    store.close()
    settings.data_dir.mkdir(parents=True)
    dest = tmp_path / "backup"
    r = CliRunner().invoke(main, ["backup", "create", str(dest), "--data-dir", str(settings.data_dir)],
                           env=_env(settings))
    assert r.exit_code == 0, r.output
    _build(engine, PAPERS[:2], shrink=True)
    store = ClusterStore.from_settings(settings)
    store.create_session(Session(id="ses_new", team="lab1", gene=Gene(id="FBgn0000463", symbol="Dl"),
                                 max_papers=5, created_at=time.time()))
    store.close()
    return dest, engine, full


def test_a_running_engine_answers_through_the_restore_and_from_the_restored_data_right_after(
        cluster_settings: Settings, cluster_node: ClusterNode, tmp_path: Path):
    """Restore into new names, then switch, as an operator runs it beside a service that keeps running: the open
    engine answers every search during the restore (the live data until the switch), and the restored data right
    after it, with no restart; the replaced indices are kept, closed, as the way back, until an explicit drop."""
    import threading

    from search.ops import backup

    settings = cluster_settings.model_copy(update={"session_store": "cluster"})
    prefix = settings.cluster_index_prefix
    _repo_or_skip(settings)
    dest, engine, full = _backed_up_then_changed(settings, tmp_path)
    changed = _answer(engine)
    assert full[0] == len(PAPERS) and changed[0] == 2 and changed != full
    replaced_papers = engine._live_index("papers")
    live_store = ClusterStore.from_settings(settings)   # a store that stays open too

    done: dict = {}

    def run() -> None:
        try:
            done["result"] = backup.restore(dest, tmp_path / "restored", force=True, settings=settings)
        except BaseException as e:   # (reported below)
            done["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    answers, errors = [], []
    while thread.is_alive():
        try:
            answers.append(_answer(engine))
            live_store.get_session("ses_a")
        except FlysiftError as e:
            errors.append(e)
        time.sleep(0.05)
    thread.join()
    assert "error" not in done, done.get("error")
    assert errors == [] and answers, errors[:3]
    # each answer from the live data, or (after the switch) from the restored data, never a mix or an error
    assert {a[0] for a in answers} <= {changed[0], full[0]} and {a[1] for a in answers} <= {changed[1], full[1]}
    # right after the switch, the same engine and store answer from the restored data
    assert _answer(engine) == full
    assert engine.get_paper(PAPERS[3].pmcid) is not None
    assert live_store.get_session("ses_a").id == "ses_a"
    assert live_store.get_session("ses_new") is None   # made after the backup: the restore took it back
    live_store.create_session(Session(id="ses_after", team="lab1", gene=Gene(id="FBgn0000463", symbol="Dl"),
                                      max_papers=5, created_at=time.time()))   # the restored store takes writes
    live_store.close()

    # the replaced indices are kept, closed, with the aliases they served, and listed
    snap = done["result"]["restored_snapshot"]
    assert snap["not_closed"] == [] and snap["replaced"][replaced_papers] == [f"{prefix}-papers"]
    assert snap["replaced"][f"{prefix}-sessions-sessions-replaced{snap['indices'][0][-16:]}"] == [
        f"{prefix}-sessions-sessions"]   # the plain session index, cloned before its name became an alias
    env = _env(settings)
    r = CliRunner().invoke(main, ["backup", "replaced"], env=env)
    assert r.exit_code == 0, r.output
    listed = [line.split("\t")[0] for line in r.stdout.splitlines()]
    assert sorted(listed) == sorted(snap["replaced"]) and replaced_papers in listed
    assert engine.live_indexes() and not set(listed) & set(engine.live_indexes())
    assert engine.health().status in ("ready", "warning")   # /v1/ready: the kept indices do not count
    assert cluster_node.call("GET", f"/_cluster/health/{prefix}-*?expand_wildcards=all")["status"] != "red"
    # a backup after the restore takes the serving indices and leaves the kept ones alone
    r = CliRunner().invoke(main, ["backup", "create", str(tmp_path / "again"), "--data-dir",
                                  str(tmp_path / "restored")], env=env)
    assert r.exit_code == 0, r.output
    again = json.loads((tmp_path / "again" / MANIFEST).read_text())["snapshot"]["indices"]
    assert not set(again) & set(listed)

    # the way back (docs/operations.md): open the kept papers and passages, point their aliases at them again
    old_passages = next(i for i, a in snap["replaced"].items() if a == [f"{prefix}-passages"])
    cluster_node.call("POST", f"/{replaced_papers},{old_passages}/_open?wait_for_active_shards=1")
    cluster_node.call("POST", "/_aliases", {"actions": [
        {"remove": {"index": f"{prefix}-*", "alias": f"{prefix}-papers"}},
        {"remove": {"index": f"{prefix}-*", "alias": f"{prefix}-passages"}},
        {"add": {"index": replaced_papers, "alias": f"{prefix}-papers"}},
        {"add": {"index": old_passages, "alias": f"{prefix}-passages"}}]})
    assert _answer(engine) == changed
    # an explicit drop deletes what is still kept (closed), nothing that serves
    r = CliRunner().invoke(main, ["backup", "replaced", "--drop"], env=env)
    assert r.exit_code == 0 and "deleted" in r.output, r.output
    assert sorted(line.split("\t")[0] for line in r.stdout.splitlines()) == sorted(
        set(listed) - {replaced_papers, old_passages})
    assert CliRunner().invoke(main, ["backup", "replaced"], env=env).stdout == ""
    assert _answer(engine) == changed
    engine.close()


@pytest.mark.parametrize("fails", ["switch", "second clone"])
def test_a_restore_that_fails_before_the_switch_leaves_the_live_data_serving(
        cluster_settings: Settings, cluster_node: ClusterNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        fails: str):
    from search.engines.cluster import snapshots
    from search.engines.cluster.transport import Transport
    from search.ops import backup

    settings = cluster_settings.model_copy(update={"session_store": "cluster"})
    prefix = settings.cluster_index_prefix
    _repo_or_skip(settings)
    dest, engine, _ = _backed_up_then_changed(settings, tmp_path)
    changed = _answer(engine)
    live = engine.live_indexes()

    def broken_switch(*args: object) -> None:   # the cluster refusing the switch, after the restore and the clones
        raise FlysiftError("the switch failed", code="restore_failed", status=500)

    if fails == "switch":
        monkeypatch.setattr(snapshots, "_switch", broken_switch)
    else:   # the cluster refusing the second clone of a plain index, the first one made (and write-blocked)
        request, clones = Transport.request, []

        def refusing(self: Transport, method: str, path: str, *args: object, **kw: object) -> object:
            if "/_clone/" in path:
                clones.append(path)
                if len(clones) == 2:
                    broken_switch()
            return request(self, method, path, *args, **kw)

        monkeypatch.setattr(Transport, "request", refusing)
    with pytest.raises(FlysiftError, match="the switch failed"):
        backup.restore(dest, tmp_path / "restored", force=True, settings=settings)
    monkeypatch.undo()
    assert not (tmp_path / "restored").exists()
    assert _answer(engine) == changed and engine.live_indexes() == live   # nothing restored or cloned is left
    assert cluster_node.indices(f"{prefix}-*") == live and engine.replaced_indexes() == []
    blocked = cluster_node.call("GET", f"/{prefix}-*/_settings/index.blocks.write?flat_settings=true")
    assert {i: v["settings"] for i, v in blocked.items() if v["settings"]} in ({}, {
        i: {"index.blocks.write": "false"} for i, v in blocked.items() if v["settings"]})   # every block lifted
    store = ClusterStore.from_settings(settings)   # the session index takes writes again (its write block lifted)
    store.create_session(Session(id="ses_after", team="lab1", gene=Gene(id="FBgn0000463", symbol="Dl"),
                                 max_papers=5, created_at=time.time()))
    assert store.get_session("ses_new").id == "ses_new"
    store.close()
    engine.close()


def test_a_running_engines_dense_search_follows_the_switch(cluster_settings: Settings, tmp_path: Path):
    """The vectors' index is read once per ``knn.META_TTL_S``: a k-NN search right after a restore (run by another
    process: here another engine) must not go to the replaced index, which the restore closed."""
    from search.core.errors import DenseUnavailable
    from search.ops import backup

    settings = cluster_settings.model_copy(update={"session_store": "cluster"})
    _repo_or_skip(settings)
    engine = ClusterEngine(settings)
    try:
        engine.vector_store().check_plugin()
    except DenseUnavailable as e:
        pytest.skip(f"the test node has no k-NN plugin: {e.message}")

    def with_vectors(papers: list) -> None:
        _build(engine, papers, shrink=True)
        writer = engine.vector_store().writer({"model": "m", "dim": 4, "backend": "torch", "dtype": "float32"},
                                              resume=False)
        passages = [q for p in papers for q in split_passages(p)]
        writer.write([(q.id, q.pmcid, q.section_type, q.year, [q.section_type]) for q in passages],
                     [[1.0, float(i % 3), 0.5, float(int(q.pmcid[-1]))] for i, q in enumerate(passages)])
        writer.checkpoint(len(passages))
        writer.publish({"count": len(passages)})

    with_vectors(PAPERS)
    settings.data_dir.mkdir(parents=True)
    dest = tmp_path / "backup"
    assert backup.create(settings, dest)["snapshot"]
    with_vectors(PAPERS[:2])
    store = engine.vector_store()
    assert {pmcid for _, pmcid, _ in store.search([1.0, 0.0, 0.5, 4.0], 500)} == {"PMC100001", "PMC100002"}
    backup.restore(dest, tmp_path / "restored", force=True, settings=settings)   # (its own engine)
    found = {pmcid for _, pmcid, _ in store.search([1.0, 0.0, 0.5, 4.0], 500)}   # at once, the same store
    assert found == {p.pmcid for p in PAPERS}
    engine.close()
