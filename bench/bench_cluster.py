"""Cluster engine (OpenSearch/Elasticsearch) and embedded engine side by side on one generated corpus.

What it measures, for both engines in one run:

* indexing: the real pipeline (``indexer.pipeline.index_corpus``: read, validate, split passages, bulk/commit,
  publish) — papers/s, input MB/s and CPU seconds (this process and its children, and the node's JVM, read with
  psutil: wall time is noisy on a shared machine) — and the index size (embedded: bytes on disk; cluster: primary
  store size of the papers and passages indices), per paper; the cluster once per ``--bulk-concurrency`` value
  (``_bulk`` requests in flight; ``default`` is the engine's choice from the node count), in one run;
* search: planned gene queries (the embedded benchmark's) through ``search_papers`` (top 10) with 1, 8 and 32
  concurrent clients (threads) — p50/p99 latency and queries/s — without snippets, as the embedded benchmark, and
  with one client also with snippets (highlighting dominates the cost of both engines);
* parity: mean top-10 overlap of the two engines over the same queries.

Without ``--cluster-url`` it starts the one-JVM OpenSearch node of ``deploy/cluster-local`` (heap ``--heap``) and
stops it at the end. Usage::

    python bench/bench_cluster.py --papers 2000 --words 8300                  # what docs/benchmarks.md reports
    python bench/bench_cluster.py --papers 300 --words 1500 --work /tmp/bc   # smoke run
    python bench/bench_cluster.py --corpus /tmp/c --bulk-concurrency 1,default --index-only   # bulk in flight
    python bench/bench_cluster.py --corpus /tmp/c --index-only --snapshot \
        --cluster-url $(FLYSIFT_NODES=3 deploy/cluster-local/start.sh) --cluster-home deploy/cluster-local/.node
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_embedded import ensure_corpus, gene_queries  # noqa: E402
from bench.common import REPO, fmt_bytes, free_port, latency_summary, machine, markdown_table, write_json  # noqa: E402

K = 10
CLIENTS = (1, 8, 32)


def start_node(work: Path, heap: str) -> tuple[str, Callable[[], None], int]:
    """The deploy/cluster-local node on a free port; returns its URL, a stop function and the JVM's pid."""
    env = {**os.environ, "FLYSIFT_NODE_HOME": str(work / "node"), "FLYSIFT_NODE_HEAP": heap}
    t0 = time.perf_counter()
    url = subprocess.run(["bash", str(REPO / "deploy/cluster-local/start.sh"), str(free_port())], env=env,
                         check=True, capture_output=True, text=True).stdout.strip()
    print(f"node {url} green after {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    pid = int((work / "node" / "node.pid").read_text())

    def stop() -> None:
        subprocess.run(["bash", str(REPO / "deploy/cluster-local/stop.sh"), "--clean"], env=env, check=False)
    return url, stop, pid


def cpu_seconds() -> float:
    """CPU of this process and of its children that have ended (e.g. indexer worker processes)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def node_cpu_seconds(pid: int | list[int] | None) -> float | None:
    """CPU the node's JVM (or the JVMs of several nodes) used so far (every thread: indexing, merges, GC), or None
    without a pid."""
    if not pid:
        return None
    import psutil

    total = 0.0
    for p in pid if isinstance(pid, list) else [pid]:
        t = psutil.Process(p).cpu_times()
        total += t.user + t.system
    return total


def home_pids(home: Path) -> list[int]:
    """The JVM pids of every node deploy/cluster-local started under ``home`` (its ``nodes`` file)."""
    return [int(row.split()[2]) for row in (home / "nodes").read_text().splitlines() if row.strip()]


def snapshot_round_trip(engine) -> dict:
    """A snapshot of every index of the prefix and its restore beside the live indices with the switch (the
    cluster's ``flysift backup``): seconds of each, and what was restored."""
    snap = engine.create_snapshot()
    restored = engine.restore_snapshot(snap["snapshot"])   # the replaced indices kept, closed, as by default
    out = {"snapshot_seconds": snap["seconds"], "restore_seconds": restored["seconds"],
           "indices": len(snap["indices"]), "documents": snap["documents"], "shards": snap["shards"],
           "papers_after_restore": engine.stats().papers, "replaced_kept": len(restored["replaced"])}
    engine.drop_replaced()   # (their disk, for the rest of the run)
    return out


def index(settings, corpus: Path, node_pid: int | list[int] | None = None) -> dict:
    from indexer.pipeline import index_corpus
    from search.services import Services

    cpu0, node0, t0 = cpu_seconds(), node_cpu_seconds(node_pid), time.perf_counter()
    summary = index_corpus([corpus], Services.open(settings), resume=False)
    seconds = time.perf_counter() - t0
    cpu, node1 = cpu_seconds() - cpu0, node_cpu_seconds(node_pid)
    mb = corpus.stat().st_size / 1e6
    out = {"seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1), "papers": summary.indexed,
           "passages": summary.passages, "papers_per_s": round(summary.indexed / seconds, 1),
           "mb_per_s": round(mb / seconds, 2), "rejected": summary.rejected}
    if node0 is not None and node1 is not None:
        out["node_cpu_seconds"] = round(node1 - node0, 1)
        out["papers_per_cpu_s"] = round(summary.indexed / (cpu + node1 - node0), 1)
    else:
        out["papers_per_cpu_s"] = round(summary.indexed / cpu, 1)
    return out


def load(search: Callable[[str], object], texts: list[str], clients: int, total: int) -> dict:
    """``total`` searches spread over ``clients`` threads; latency per search and overall queries/s."""
    counter, times, errors = itertools.count(), [], []

    def worker() -> None:
        while (i := next(counter)) < total:
            t0 = time.perf_counter()
            try:
                search(texts[i % len(texts)])
            except Exception as e:  # a timeout under overload is a result too: counted, not fatal
                errors.append(f"{type(e).__name__}: {e}"[:200])
                continue
            times.append((time.perf_counter() - t0) * 1000)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    summary = latency_summary(times) if times else {"n": 0, "p50_ms": None, "p99_ms": None}
    return {**summary, "qps": round(len(times) / wall, 1), "errors": len(errors),
            "first_error": errors[0] if errors else None}


def measure_search(engines: dict, texts: list[str], per_client: int, results: dict) -> None:
    """Parity (top-10 overlap) and search latency and throughput at each client count, into ``results``."""
    from search.retrieval.planner import plan

    tops: dict[str, list[set[str]]] = {}
    for name, eng in engines.items():
        tops[name] = [{h.pmcid for h in eng.search_papers(plan(t), limit=K).hits} for t in texts]  # warm-up
    overlaps = [len(a & b) / max(len(a), len(b)) if a or b else 1.0
                for a, b in zip(tops["embedded"], tops["cluster"], strict=True)]
    results["parity"] = {"queries": len(texts), "mean_top10_overlap": round(sum(overlaps) / len(overlaps), 4)}

    results["search"] = {}
    for name, eng in engines.items():
        for snippets, levels in ((False, CLIENTS), (True, CLIENTS[:1])):
            def one(text: str, eng=eng, snippets=snippets) -> object:
                return eng.search_papers(plan(text), limit=K, snippets=snippets)
            for c in levels:
                print(f"search {name} × {c} clients, snippets {snippets}…", file=sys.stderr)
                key = f"{name}/{c}" + ("/snippets" if snippets else "")
                results["search"][key] = load(one, texts, c, max(len(texts), c * per_client))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--papers", type=int, default=2000)
    ap.add_argument("--words", type=int, default=8300)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--per-client", type=int, default=25, help="searches per client at each concurrency level")
    ap.add_argument("--work", type=Path, default=Path("bench-work/cluster"))
    ap.add_argument("--cluster-url", default=os.environ.get("FLYSIFT_CLUSTER_URL"))
    ap.add_argument("--flavour", default=os.environ.get("FLYSIFT_CLUSTER_FLAVOUR", "opensearch"))
    ap.add_argument("--heap", default="1g", help="heap of the local node started when no --cluster-url is given")
    ap.add_argument("--node-pid", type=int, help="pid of the --cluster-url node's JVM, to measure its CPU (the "
                    "node started here is measured anyway)")
    ap.add_argument("--cluster-home", type=Path, help="FLYSIFT_NODE_HOME of a deploy/cluster-local cluster given with "
                    "--cluster-url: the CPU and memory of all its nodes are measured")
    ap.add_argument("--snapshot", action="store_true", help="also time a snapshot of the cluster's indices and its "
                    "restore (needs path.repo on the nodes, as deploy/cluster-local sets)")
    ap.add_argument("--bulk-concurrency", default="default",
                    help="comma-separated _bulk requests in flight to index the cluster with, one run each, e.g. "
                         "1,default; searches use the last run's index")
    ap.add_argument("--corpus", type=Path, help="an existing `python -m indexer.synthetic` output directory to use "
                    "instead of generating one (--papers/--words/--seed then only label it)")
    ap.add_argument("--index-only", action="store_true", help="measure indexing only (no searches, no parity)")
    ap.add_argument("--out", type=Path, help="Also write the results JSON here")
    ap.add_argument("--search-only", action="store_true",
                    help="Reuse the indices and indexing results of the last run in --work; measure search again")
    args = ap.parse_args()

    import psutil

    from search.core.config import Settings
    from search.engines import Engine
    from search.engines.cluster.engine import ClusterEngine
    from search.engines.embedded.engine import EmbeddedEngine

    args.work.mkdir(parents=True, exist_ok=True)
    bulk_levels = [None if x.strip() == "default" else int(x) for x in args.bulk_concurrency.split(",")]
    if args.corpus:
        corpus_dir = args.corpus
        corpus_info = {"params": {"papers": args.papers, "words": args.words, "seed": args.seed},
                       "dir": str(corpus_dir)}
    else:
        corpus_dir = args.work / "corpus"
        corpus_info = ensure_corpus(args, corpus_dir)
    corpus = corpus_dir / "corpus.jsonl"
    queries = gene_queries(corpus_dir / "genes.tsv", json.loads((corpus_dir / "answer_key.json").read_text()),
                           args.queries)
    texts = [q["query"] for q in queries]

    stop, pid = None, home_pids(args.cluster_home) if args.cluster_home else args.node_pid
    url = args.cluster_url
    if not url:
        url, stop, pid = start_node(args.work, args.heap)
    try:
        emb_dir = args.work / "embedded"
        emb_settings = Settings(data_dir=emb_dir)
        clu_settings = Settings(data_dir=args.work / "cluster-data", cluster_url=url, cluster_flavour=args.flavour,
                                cluster_index_prefix="flysift-bench")
        results: dict = {"machine": machine(), "corpus": {**corpus_info, "bytes": corpus.stat().st_size},
                         "cluster": {"url": url, "flavour": args.flavour, "heap": args.heap if stop else None}}
        if url:
            probe = ClusterEngine(clu_settings)
            results["cluster"].update(data_nodes=probe.t.data_nodes(), replicas=probe.replicas,
                                      shards=probe.shards)
            probe.close()
        if args.search_only:
            last = json.loads((args.work / "results.json").read_text())
            results["embedded_index"], results["cluster_index"] = last["embedded_index"], last["cluster_index"]
        else:
            shutil.rmtree(emb_dir, ignore_errors=True)
            print("indexing (embedded)…", file=sys.stderr)
            results["embedded_index"] = index(emb_settings, corpus)
            runs = []
            for level in bulk_levels:
                run_settings = clu_settings.model_copy(update={"cluster_bulk_concurrency": level})
                probe = ClusterEngine(run_settings)
                concurrency = probe.bulk_concurrency()
                probe.close()
                print(f"indexing (cluster, {concurrency} bulk requests in flight)…", file=sys.stderr)
                runs.append({"bulk_concurrency": concurrency, "default": level is None,
                             **index(run_settings, corpus, pid)})
            results["cluster_runs"], results["cluster_index"] = runs, dict(runs[-1])
        embedded, cluster = EmbeddedEngine(emb_dir), ClusterEngine(clu_settings)
        e_stats, c_stats = embedded.stats(), cluster.stats()
        n = max(e_stats.papers, 1)
        results["embedded_index"].update(index_bytes=e_stats.index_bytes, bytes_per_paper=e_stats.index_bytes // n)
        results["cluster_index"].update(index_bytes=c_stats.index_bytes, bytes_per_paper=c_stats.index_bytes // n)
        engines: dict[str, Engine] = {"embedded": embedded, "cluster": cluster}
        results["parity"], results["search"] = None, {}
        if not args.index_only:
            measure_search(engines, texts, args.per_client, results)
        if args.snapshot:
            print("snapshot and restore…", file=sys.stderr)
            results["snapshot"] = snapshot_round_trip(cluster)
        if pid:
            results["cluster"]["node_rss"] = sum(psutil.Process(p).memory_info().rss
                                                 for p in (pid if isinstance(pid, list) else [pid]))
    finally:
        if stop:
            stop()

    write_json(args.work / "results.json", results)
    if args.out:
        write_json(args.out, results)
    md = report(results)
    (args.work / "results.md").write_text(md)
    print(md)


def report(r: dict) -> str:
    c = r["corpus"]
    out = [f"Corpus: {c['params']['papers']:,} papers × ~{c['params']['words']:,} words "
           f"({fmt_bytes(c['bytes'])} JSONL), seed {c['params']['seed']}. Machine: {r['machine']['cores']} cores, "
           f"{r['machine']['ram_gib']} GiB, load {r['machine']['load_avg_1m']}. Cluster: {r['cluster']['flavour']} "
           f"at {r['cluster']['url']}" + (f", heap {r['cluster']['heap']}" if r["cluster"].get("heap") else "")
           + (f", node RSS {fmt_bytes(r['cluster']['node_rss'])}" if r["cluster"].get("node_rss") else "")
           + (f", {r['cluster']['data_nodes']} data node(s), {r['cluster']['shards']} shard(s) and "
              f"{r['cluster']['replicas']} replica(s) per index" if "data_nodes" in r["cluster"] else "") + ".\n"]
    rows = []
    for name in ("embedded", "cluster"):
        i = r[f"{name}_index"]
        rows.append([name, f"{i['seconds']} s", i["papers_per_s"], i["mb_per_s"], f"{i['passages']:,}",
                     fmt_bytes(i["index_bytes"]), fmt_bytes(i["bytes_per_paper"])])
    out.append(markdown_table(["engine", "index time", "papers/s", "MB/s (input)", "passages", "index size",
                               "per paper"], rows))
    rows = []
    e = r["embedded_index"]
    runs = [("embedded", e)] + [(f"cluster, {run['bulk_concurrency']} in flight"
                                 + (" (default)" if run["default"] else ""), run) for run in r.get("cluster_runs", [])]
    for name, i in runs:
        node = i.get("node_cpu_seconds")
        total = i.get("cpu_seconds", 0) + (node or 0)
        rows.append([name, f"{i['seconds']} s", i["papers_per_s"], f"{i.get('cpu_seconds', '-')} s",
                     "-" if node is None else f"{node} s", f"{round(total, 1)} s", i.get("papers_per_cpu_s", "-")])
    out.append("\nIndexing CPU (client: this process and its children; node: the JVM):\n")
    out.append(markdown_table(["build", "wall", "papers/s", "client CPU", "node CPU", "total CPU", "papers/CPU-s"],
                              rows))
    rows = []
    for key, s in r["search"].items():
        name, clients, *snip = key.split("/")
        rows.append([name, clients, "yes" if snip else "no", s["n"], s["p50_ms"], s["p99_ms"], s["qps"], s["errors"]])
    if rows:
        out.append("\n" + markdown_table(["engine", "clients", "snippets", "searches", "p50 ms", "p99 ms",
                                          "queries/s", "errors"], rows))
    if sn := r.get("snapshot"):
        out.append(f"\nSnapshot of {sn['indices']} indices ({sn['documents']:,} documents, {sn['shards']} shards): "
                   f"{sn['snapshot_seconds']} s; restore beside the live indices and switch: "
                   f"{sn['restore_seconds']} s ({sn['papers_after_restore']:,} papers after it).\n")
    if p := r["parity"]:
        out.append(f"\nParity over the {p['queries']} benchmark queries: mean top-10 overlap "
                   f"{p['mean_top10_overlap']}.\n")
    return "\n".join(out)


if __name__ == "__main__":
    main()
