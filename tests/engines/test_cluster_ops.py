"""Cluster operations on a real node: health as readiness (green ready, yellow a warning, red or no answer not ready)
and backups through the snapshot API (restored beside the live indices, checked, then switched to atomically)."""

from __future__ import annotations

import socket
import time

import pytest

from search.core.config import Settings
from search.core.errors import FlysiftError, NotFound
from search.core.models import Gene
from search.engines.cluster.engine import ClusterEngine
from search.engines.cluster.snapshots import ensure_repository, repository_name
from search.schema.sessions import Session, TraceEvent
from search.sessions.cluster_store import ClusterStore
from search.text.passages import split_passages

from helpers import PAPERS, ClusterNode, needs_extra

pytestmark = pytest.mark.cluster


def publish(engine: ClusterEngine, papers, allow_shrink: bool = False) -> str:
    build = engine.open_build(f"fixture-{len(papers)}", resume=False)
    for p in papers:
        build.add(p, split_passages(p))
    build.commit({})
    build.publish(allow_shrink=allow_shrink)
    return build.id


def test_health_green_is_ready_yellow_a_warning_red_not_ready(cluster_settings: Settings, cluster_node: ClusterNode):
    engine = ClusterEngine(cluster_settings)
    prefix = cluster_settings.cluster_index_prefix
    publish(engine, PAPERS)
    nodes = engine.t.data_nodes()
    cluster_node.call("GET", f"/_cluster/health/{prefix}-*?wait_for_status=green&timeout=60s")  # replicas copied
    h = engine.health()
    assert (h.status, h.cluster_status, h.ready) == ("ready", "green", True)
    # a replica more than the nodes can hold: yellow, still ready
    cluster_node.call("PUT", f"/{prefix}-yellow", {"settings": {"number_of_replicas": nodes}})
    h = engine.health()
    assert (h.status, h.cluster_status, h.ready) == ("warning", "yellow", True) and "replica" in h.message
    # a primary that no node may hold: red, not ready
    cluster_node.call("PUT", f"/{prefix}-red?wait_for_active_shards=0", {"settings": {
        "number_of_replicas": 0, "index.routing.allocation.require._name": "no-such-node"}})
    h = engine.health()
    assert (h.status, h.cluster_status, h.ready) == ("not_ready", "red", False) and h.details["unassigned_shards"]
    assert h.to_dict()["status"] == "not_ready"


@needs_extra("cluster")
def test_health_of_an_unreachable_cluster_is_not_ready(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine = ClusterEngine(Settings(data_dir=tmp_path, cluster_url=f"http://127.0.0.1:{port}", cluster_timeout_s=2))
    h = engine.health()
    assert (h.status, h.cluster_status) == ("not_ready", None) and "does not answer" in h.message


def _repo_or_skip(engine: ClusterEngine) -> None:
    try:
        ensure_repository(engine.t, engine.prefix)
    except FlysiftError as e:
        if e.code == "backup_refused":
            pytest.skip(f"the test node has no path.repo for snapshots (deploy/cluster-local sets one): {e.message}")
        raise


def test_snapshot_restores_beside_the_live_indices_then_switches(cluster_settings: Settings,
                                                                 cluster_node: ClusterNode):
    engine = ClusterEngine(cluster_settings)
    prefix = cluster_settings.cluster_index_prefix
    _repo_or_skip(engine)
    first = publish(engine, PAPERS)
    store = ClusterStore.from_settings(cluster_settings)
    store.create_session(Session(id="ses_s", team="t", gene=Gene(id="FBgn0000463", symbol="Dl"), max_papers=5,
                                 created_at=time.time()))
    store.commit_read("ses_s", store.reserve_read("ses_s", "PMC100001"),
                      TraceEvent(time=time.time(), tool="get_paper", latency_ms=1.0, status=200))

    snap = engine.create_snapshot()
    assert snap["state"] == "SUCCESS" and snap["snapshot"].startswith(f"{prefix}-")
    assert f"{prefix}-sessions-sessions" in snap["indices"] and f"{prefix}-papers-{first}" in snap["indices"]
    assert [s["snapshot"] for s in engine.list_snapshots()] == [snap["snapshot"]]

    # after the snapshot: one more read, and a smaller build published
    store.commit_read("ses_s", store.reserve_read("ses_s", "PMC100002"))
    publish(engine, PAPERS[:2], allow_shrink=True)
    assert engine.stats().papers == 2 and store.get_session("ses_s").budget_used == 2

    out = engine.restore_snapshot(snap["snapshot"])
    assert out["documents"] == snap["documents"]
    st = engine.stats()
    assert st.papers == len(PAPERS) and st.build == out["aliases"][f"{prefix}-papers"].split("-papers-")[1]
    assert st.build.startswith(first + "-r")            # the build record was renamed with its indices
    s = store.get_session("ses_s")                     # the running store reads the restored copy through aliases
    assert s.budget_used == 1 and s.papers_read == ["PMC100001"]
    assert [e.tool for e in store.trace("ses_s")] == ["get_paper"]
    store.commit_read("ses_s", store.reserve_read("ses_s", "PMC100003"))   # and writes to it
    assert ClusterStore.from_settings(cluster_settings).get_session("ses_s").budget_used == 2
    left = cluster_node.indices(f"{prefix}-*")
    assert all(i.endswith(out["indices"][0][-15:]) or "-yellow" in i for i in left), left   # the old ones are gone

    # the restored state builds and publishes as usual, and dropping old versions reaches restored ones
    engine.keep = 1
    publish(engine, PAPERS)
    assert not [i for i in cluster_node.indices(f"{prefix}-papers-*") if "-r" in i.rsplit("-papers-", 1)[1]]
    # a restore of a restored state works the same way
    again = engine.create_snapshot()
    time.sleep(1.1)   # restored names carry the second of the restore
    assert engine.restore_snapshot(again["snapshot"])["documents"] == again["documents"]
    assert engine.stats().papers == len(PAPERS)
    with pytest.raises(NotFound):
        engine.restore_snapshot("no-such-snapshot")
    store.drop()
    cluster_node.call("DELETE", f"/_snapshot/{repository_name(prefix)}/{snap['snapshot']}")
    cluster_node.call("DELETE", f"/_snapshot/{repository_name(prefix)}/{again['snapshot']}")
    cluster_node.call("DELETE", f"/_snapshot/{repository_name(prefix)}")


def test_a_repository_outside_path_repo_is_one_clear_refusal(cluster_settings: Settings):
    engine = ClusterEngine(cluster_settings)
    publish(engine, PAPERS[:1])
    with pytest.raises(FlysiftError) as err:
        engine.create_snapshot(location="/definitely/not/under/path.repo")
    assert err.value.code == "backup_refused" and "path.repo" in err.value.message
    assert "\n" not in err.value.message
