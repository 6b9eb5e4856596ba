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
