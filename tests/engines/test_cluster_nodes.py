"""The cluster engine on several nodes: the client knows every node and sends a failed request once more to the next
one, and indices get replicas by the number of data nodes (one where a node may be lost, none on a single node). On
a single test node the retry is shown with a node URL that refuses connections; CI also runs these files on the
three-node cluster, where the copies are real (and bench/chaos_cluster.py kills nodes under load)."""

from __future__ import annotations

import socket
import time

import pytest

from search.core.config import Settings
from search.core.errors import Unavailable
from search.core.models import Gene
from search.core.query import Filters
from search.engines.cluster.engine import ClusterEngine
from search.retrieval.planner import plan
from search.schema.sessions import Session
from search.sessions.cluster_store import ClusterStore
from search.text.passages import split_passages

from helpers import PAPERS, ClusterNode

pytestmark = pytest.mark.cluster


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _publish(engine: ClusterEngine) -> None:
    build = engine.open_build("nodes", resume=False)
    for p in PAPERS:
        build.add(p, split_passages(p))
    build.commit({})
    build.publish()


def test_a_search_sent_to_a_dead_node_is_answered_by_the_next(cluster_settings: Settings):
    _publish(ClusterEngine(cluster_settings))
    dead = _dead_url()
    # the dead node first: each search reaches it in turn until the client marks it dead, and is sent again
    urls = f"{dead},{cluster_settings.cluster_url}"
    engine = ClusterEngine(cluster_settings.model_copy(update={"cluster_url": urls}))
    query = plan("Dl wing margin", filters=Filters())
    for _ in range(6):
        assert engine.search_papers(query, limit=3).hits[0].pmcid == "PMC100001"
        assert engine.search_passages(query, limit=3).hits
        assert engine.get_paper("PMC100002") is not None
    # with no live node the answer is the documented 503 + Retry-After
    alone = ClusterEngine(cluster_settings.model_copy(update={"cluster_url": f"{dead},{_dead_url()}"}))
    with pytest.raises(Unavailable) as err:
        alone.search_papers(query)
    assert err.value.status == 503 and "Retry-After" in err.value.headers


def test_copies_follow_the_data_nodes(cluster_settings: Settings, cluster_node: ClusterNode):
    engine = ClusterEngine(cluster_settings)
    nodes = engine.t.data_nodes()
    assert nodes == cluster_node.node_count
    assert engine.replicas == (1 if nodes >= 2 else 0)
    _publish(engine)
    prefix = cluster_settings.cluster_index_prefix
    settings = cluster_node.call("GET", f"/{prefix}-papers,{prefix}-passages/_settings/index.number_of_replicas")
    assert {v["settings"]["index"]["number_of_replicas"] for v in settings.values()} == {str(engine.replicas)}
    store = ClusterStore.from_settings(cluster_settings)
    store.create_session(Session(id="ses_n", team="t", gene=Gene(id="FBgn0000463", symbol="Dl"), max_papers=2,
                                 created_at=time.time()))
    got = cluster_node.call("GET", f"/{prefix}-sessions-sessions/_settings/index.number_of_replicas")
    assert next(iter(got.values()))["settings"]["index"]["number_of_replicas"] == str(engine.replicas)
    health = cluster_node.call("GET", f"/_cluster/health/{prefix}-*?wait_for_status=green&timeout=60s")
    assert health["status"] == "green"    # every copy assigned: a replica only where a node can hold it
    explicit = ClusterEngine(cluster_settings.model_copy(update={"cluster_replicas": 0}))
    assert explicit.replicas == 0
    store.drop()
