"""Dense and hybrid search on the cluster against the embedded FAISS index, side by side in one run, on the BEIR-format
IR collections (MED, NFCorpus, Cranfield), and the cluster's k-NN against its exact search.

For each collection two services run in this process, one on the embedded engine and one on the cluster engine
(``--cluster-url``, an index prefix of its own), each indexes the collection, builds its dense index through
``POST /v1/collections/{c}/dense`` (the same encoder, windows and batches, so the same vectors: the FAISS flat index
against Lucene HNSW in the cluster) and is scored by ``eval/ir.py`` in modes bm25, dense and hybrid (nDCG@10,
Recall@100). Then, on the cluster, every judged query is embedded once and asked of the k-NN query (k = 10, and
k = 100 cut to 10) and of an exact ``knn_score`` script query over the same vectors: recall@10 against exact, and
the latency of each. CPU seconds are this process's (the services, the encoder) and, with ``--cluster-home``, the
cluster's JVMs'.

usage: python bench/bench_cluster_dense.py --cluster-url URL[,URL...] [--cluster-home DIR] [--data ../shared/data/ir]
           [--collections med,cranfield,nfcorpus-test] [--out bench-work/cluster-dense/result.json]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import psutil  # noqa: E402

from bench.bench_ir import local_service  # noqa: E402
from bench.common import latency_summary, machine, markdown_table  # noqa: E402
from eval.ir import evaluate_collection, load_beir, service_collection_name  # noqa: E402
from search.core.config import Settings  # noqa: E402
from search.engines.cluster.knn import ClusterVectors  # noqa: E402
from search.retrieval.vectors import EngineDenseIndex  # noqa: E402
from search.services import Services  # noqa: E402

MODES = ("bm25", "dense", "hybrid")
METRICS = ("ndcg@10", "recall@100")


def cpu_now() -> float:
    t = psutil.Process().cpu_times()
    return t.user + t.system


def jvm_cpu(home: Path | None) -> float:
    if home is None:
        return 0.0
    total = 0.0
    for row in (home / "nodes").read_text().splitlines():
        try:
            t = psutil.Process(int(row.split()[2])).cpu_times()
            total += t.user + t.system
        except (psutil.Error, IndexError, ValueError):
            pass
    return total


def evaluate(settings: Settings, directory: Path, log: Any) -> tuple[dict[str, Any], float, float]:
    from search.client import Client

    t0, c0 = time.perf_counter(), cpu_now()
    with local_service(settings) as url, Client(url, timeout=600) as client:
        result = evaluate_collection(client, directory, MODES, log=log)
    return result, time.perf_counter() - t0, cpu_now() - c0


def knn_against_exact(settings: Settings, directory: Path, repeats: int = 1) -> dict[str, Any]:
    """Recall@10 of the k-NN query (k 10; k 100 cut to 10) against exact search, and latencies, on the cluster."""
    coll = load_beir(directory)
    name = service_collection_name(coll.name)
    dense = Services.open(settings).search.dense(name)
    assert isinstance(dense, EngineDenseIndex), "the cluster engine keeps its own vectors"
    store = dense.store
    assert isinstance(store, ClusterVectors)
    _, index = store._current()
    url = (settings.cluster_url or "").split(",")[0]
    rec10, rec100, ms10, ms100, ms_exact = [], [], [], [], []
    with httpx.Client(timeout=120) as http:
        for qid in coll.judged_queries:
            vec = [float(x) for x in dense._query_vector(coll.queries[qid])]
            t = time.perf_counter()
            exact = http.post(f"{url}/{index}/_search", json={"size": 10, "docvalue_fields": ["id"], "query": {
                "script_score": {"query": {"match_all": {}}, "script": {
                    "source": "knn_score", "lang": "knn",
                    "params": {"field": "vector", "query_value": vec, "space_type": "cosinesimil"}}}}}).json()
            ms_exact.append((time.perf_counter() - t) * 1000)
            truth = {h["fields"]["id"][0] for h in exact["hits"]["hits"]}
            t = time.perf_counter()
            top10 = {pid for pid, _, _ in store.search(vec, 10)}
            ms10.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            top100 = {pid for pid, _, _ in store.search(vec, 100)[:10]}
            ms100.append((time.perf_counter() - t) * 1000)
            if truth:
                rec10.append(len(top10 & truth) / len(truth))
                rec100.append(len(top100 & truth) / len(truth))
        size = primary_bytes(http, url, index)
        # merging drops the copy of each document's source kept for recovery (_recovery_source: the vector as
        # JSON), which merges made in time do too
        http.post(f"{url}/{index}/_forcemerge", params={"max_num_segments": "1"}, timeout=600)
        merged = primary_bytes(http, url, index)
    vectors = store.meta().get("count") or 0
    return {"queries": len(rec10), "vectors": vectors, "index_bytes": size,
            "bytes_per_vector": round(size / max(1, vectors)),
            "bytes_per_vector_merged": round(merged / max(1, vectors)),
            "recall@10_k10": round(sum(rec10) / len(rec10), 4), "recall@10_k100": round(sum(rec100) / len(rec100), 4),
            "latency_knn_k10": latency_summary(ms10), "latency_knn_k100": latency_summary(ms100),
            "latency_exact": latency_summary(ms_exact)}


def primary_bytes(http: httpx.Client, url: str, index: str) -> int:
    http.post(f"{url}/{index}/_refresh")
    return int(http.get(f"{url}/{index}/_stats/store").json()["indices"][index]["primaries"]["store"]["size_in_bytes"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster-url", required=True)
    ap.add_argument("--cluster-home", type=Path, help="FLYSIFT_NODE_HOME of deploy/cluster-local: JVM CPU time")
    ap.add_argument("--data", type=Path, default=Path("../shared/data/ir"))
    ap.add_argument("--collections", default="med,cranfield,nfcorpus-test")
    ap.add_argument("--out", type=Path, default=Path("bench-work/cluster-dense/result.json"))
    args = ap.parse_args()

    prefix = f"benchdense{int(time.time())}"
    res: dict[str, Any] = {"machine": machine(), "cluster_url": args.cluster_url, "collections": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.collections.split(","):
            log = functools.partial(lambda c, m: print(f"[{c}] {m}", file=sys.stderr, flush=True), name)
            directory = args.data / name
            embedded = Settings(data_dir=Path(tmp) / "embedded", engine="embedded")
            cluster = Settings(data_dir=Path(tmp) / "cluster", cluster_url=args.cluster_url,
                               cluster_index_prefix=prefix)
            out: dict[str, Any] = {}
            log("embedded engine (FAISS)")
            r_e, s_e, c_e = evaluate(embedded, directory, log)
            log("cluster engine (k-NN)")
            j0 = jvm_cpu(args.cluster_home)
            r_c, s_c, c_c = evaluate(cluster, directory, log)
            out["seconds"] = {"embedded": round(s_e, 1), "cluster": round(s_c, 1)}
            out["cpu_seconds"] = {"embedded": round(c_e, 1), "cluster_client": round(c_c, 1),
                                  "cluster_jvms": round(jvm_cpu(args.cluster_home) - j0, 1)}
            out["runs"] = {}
            for mode in MODES:
                run = f"flysift-{mode}"
                e, c = r_e["runs"].get(run, {}), r_c["runs"].get(run, {})
                out["runs"][mode] = {m: {"embedded": e.get(m), "cluster": c.get(m),
                                         "delta": round(c[m] - e[m], 4) if m in c and m in e else None}
                                     for m in METRICS}
                if "error" in e or "error" in c:
                    out["runs"][mode]["error"] = e.get("error") or c.get("error")
            log("k-NN against exact search on the cluster")
            out["knn"] = knn_against_exact(cluster, directory)
            res["collections"][name] = out
            print(json.dumps({name: out}, indent=1), file=sys.stderr)
    with contextlib.suppress(Exception):   # the run's indices go
        first = args.cluster_url.split(",")[0]
        names = httpx.get(f"{first}/{prefix}-*/_settings/index.uuid", timeout=30).json()
        if names:
            httpx.delete(f"{first}/{','.join(sorted(names))}", timeout=120)
    rows = [[c, mode, *(f"{v['embedded']:.4f} / {v['cluster']:.4f} ({v['delta']:+.4f})" if v.get("delta") is not None
                        else "-" for v in (o["runs"][mode][m] for m in METRICS))]
            for c, o in res["collections"].items() for mode in MODES]
    res["table"] = markdown_table(["collection", "mode", "nDCG@10 embedded / cluster (Δ)",
                                   "Recall@100 embedded / cluster (Δ)"], rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(res["table"])
    print(json.dumps({c: o["knn"] for c, o in res["collections"].items()}, indent=1))


if __name__ == "__main__":
    main()
