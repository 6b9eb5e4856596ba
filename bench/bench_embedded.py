"""Embedded engine vs FlyAOC's own retrieval (rank_bm25), side by side on one generated corpus.

What it measures (the foundation issue's targets in brackets):

* flysift: ``flysift index corpus`` run as a child process — wall time and peak RSS [≤ 3 min, ≤ 4 GB] — and index
  size on disk; paper search for gene queries in-process (``EmbeddedEngine`` + planner) [p50 ≤ 2 ms] and over HTTP
  against ``flysift serve`` [p50 ≤ 10 ms];
* rank_bm25: ``BM25Okapi`` over lower-cased whitespace tokens of title + abstract + INTRO/RESULTS/DISCUSS/CONCL
  (FlyAOC indexes no METHODS; flyaoc-compat.md §2.1), built in a child process so its peak RSS is its own;
  ``get_scores`` + top 16 in-process [flysift's median ≥ 100× lower];
* recall@16 of every query against the generator's answer key [flysift higher on gene-symbol queries]. Genes have
  hundreds of papers each, so recall is capped: |top16 ∩ relevant| / min(16, |relevant|).

Usage::

    python bench/bench_embedded.py                       # full size: 16,898 papers × 8,300 words, 200 queries
    python bench/bench_embedded.py --papers 500 --words 1500 --work /tmp/bench-small   # smoke run

Everything lands in ``--work`` (corpus, index, results.json, results.md); a corpus already there with the same
parameters is reused (the generator is deterministic). ``--out`` also writes the JSON elsewhere.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402

from bench.common import (  # noqa: E402
    ChildRun,
    dir_bytes,
    flysift_command,
    fmt_bytes,
    free_port,
    latency_summary,
    machine,
    markdown_table,
    percentile,
    run_measured,
    served,
    write_json,
)

K = 16
FLYAOC_SECTIONS = ("INTRO", "RESULTS", "DISCUSS", "CONCL")
#: queries shown one by one in the report: case collisions, brackets, a one-letter symbol, an ordinary word
HARD_CASES = ("dl", "Dl", "N", "Su(H)", "E(spl)m8-HLH", "l(2)gl", "α-Cat", "alpha-Cat", "arm", "en")


# ---------------------------------------------------------------------------------------------------------- queries

def gene_queries(genes_tsv: Path, answer_key: dict[str, list[str]], n: int) -> list[dict]:
    """``n`` gene queries: every symbol first, then full names, then older symbols and full names, in that order
    (repeating the list when ``n`` is larger). Each carries the gene's papers as its relevant set."""
    from indexer.synthetic import read_genes_tsv

    genes = read_genes_tsv(genes_tsv)
    pools = [[("symbol", g.symbol, g.id) for g in genes],
             [("fullname", g.fullname, g.id) for g in genes if g.fullname],
             [("synonym", s, g.id) for g in genes for s in (*g.symbol_synonyms, *g.fullname_synonyms)]]
    distinct = [q for pool in pools for q in pool]
    picked = [distinct[i % len(distinct)] for i in range(n)]
    return [{"kind": kind, "query": text, "gene": gid, "relevant": answer_key.get(gid, [])}
            for kind, text, gid in picked]


def recall_at_k(hits: list[str], relevant: list[str], k: int = K) -> float:
    """|top-k ∩ relevant| / min(k, |relevant|): 1.0 when the first k hits are all relevant (or all are found)."""
    if not relevant:
        return 0.0
    return len(set(hits[:k]) & set(relevant)) / min(k, len(relevant))


def quality(queries: list[dict], hits: list[list[str]]) -> dict[str, dict[str, float]]:
    """Mean recall@16 per query kind and overall, over distinct (query text, gene) pairs."""
    seen: dict[tuple[str, str], tuple[str, float]] = {}
    for q, h in zip(queries, hits, strict=True):
        seen[q["query"], q["gene"]] = (q["kind"], recall_at_k(h, q["relevant"]))
    out: dict = {}
    for kind in ("symbol", "fullname", "synonym", "all"):
        vals = [r for k, r in seen.values() if kind in ("all", k)]
        if vals:
            out[kind] = {"queries": len(vals), "recall@16": round(sum(vals) / len(vals), 4)}
    out["per_query"] = {f"{text} ({gene})": round(r, 4) for (text, gene), (_, r) in seen.items()}
    return out


# --------------------------------------------------------------------------------------------------------- corpus

def ensure_corpus(args, corpus_dir: Path) -> dict:
    """Generate the corpus as a child process (so its memory is measured too), unless the same one is there."""
    params = {"papers": args.papers, "words": args.words, "seed": args.seed}
    stamp = corpus_dir / "params.json"
    if stamp.exists() and json.loads(stamp.read_text())["params"] == params and (corpus_dir / "corpus.jsonl").exists():
        return json.loads(stamp.read_text())
    run = run_measured([sys.executable, "-m", "indexer.synthetic", "--papers", str(args.papers), "--words",
                        str(args.words), "--seed", str(args.seed), "--out", str(corpus_dir)],
                       cwd=Path(__file__).resolve().parents[1]).check()
    info = {"params": params, "summary": json.loads(run.stdout.strip().splitlines()[-1]),
            "seconds": round(run.seconds, 1), "cpu_seconds": round(run.cpu_seconds, 1), "peak_rss": run.peak_rss}
    write_json(stamp, info)
    return info


# -------------------------------------------------------------------------------------------------------- flysift

def flysift_build(corpus: Path, data_dir: Path) -> dict:
    """The real CLI, as an operator would run it; a fresh data dir so nothing is resumed."""
    import shutil

    if data_dir.exists():
        shutil.rmtree(data_dir)
    run: ChildRun = run_measured([*flysift_command(), "index", "corpus", str(corpus), "--data-dir", str(data_dir),
                                  "--json", "--no-resume"]).check()
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    return {"seconds": round(run.seconds, 1), "cpu_seconds": round(run.cpu_seconds, 1), "peak_rss": run.peak_rss,
            "index_bytes": dir_bytes(data_dir), "summary": summary}


def flysift_in_process(data_dir: Path, queries: list[dict]) -> tuple[dict, list[list[str]]]:
    """Planner + engine, as the service calls them, timed per query after one warm-up pass."""
    from search.engines.embedded.engine import EmbeddedEngine
    from search.retrieval.planner import plan

    engine = EmbeddedEngine(data_dir)

    def one(text: str) -> list[str]:
        res = engine.search_papers(plan(text), limit=K, snippets=False)
        return [h.pmcid for h in res.hits]

    hits = [one(q["query"]) for q in queries]            # warm-up (opens the index, fills the page cache)
    times, cpu = timed(one, queries)
    engine.close()
    return dict(latency_summary(times), cpu_p50_ms=round(percentile(cpu, 50), 3)), hits


def timed(one, queries: list[dict]) -> tuple[list[float], list[float]]:
    """Wall and CPU milliseconds of ``one(query)`` per query. The CPU time of this thread (tantivy and numpy run
    their search in the calling thread) hardly depends on what else the machine is doing; the wall time does."""
    wall, cpu = [], []
    for q in queries:
        t0, c0 = time.perf_counter(), time.thread_time()
        one(q["query"])
        cpu.append((time.thread_time() - c0) * 1000)
        wall.append((time.perf_counter() - t0) * 1000)
    return wall, cpu


def flysift_http(data_dir: Path, queries: list[dict]) -> tuple[dict, list[list[str]]]:
    """``flysift serve`` on loopback, one keep-alive client, POST /v1/papers/search; after one warm-up pass."""
    import httpx

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with served([*flysift_command(), "serve", "--data-dir", str(data_dir), "--port", str(port)],
                f"{base}/v1/health") as server, httpx.Client(base_url=base, timeout=30.0) as client:
        def one(text: str) -> list[str]:
            r = client.post("/v1/papers/search", json={"query": text, "limit": K})
            r.raise_for_status()
            return [h["pmcid"] for h in r.json()["hits"]]

        hits = [one(q["query"]) for q in queries]
        proc = psutil.Process(server.pid)
        c0 = sum(proc.cpu_times()[:2])
        times, _ = timed(one, queries)
        server_cpu = sum(proc.cpu_times()[:2]) - c0
    return dict(latency_summary(times), server_cpu_mean_ms=round(server_cpu * 1000 / len(queries), 3)), hits


# ------------------------------------------------------------------------------------------------------ rank_bm25

def flyaoc_tokens(rec: dict) -> list[str]:
    """FlyAOC's document text and tokenizer: title, abstract and the four indexed section types, lower-cased and
    split on whitespace (punctuation stays attached, so ``Su(H),`` ≠ ``su(h)``)."""
    parts = [rec.get("title") or "", rec.get("abstract") or ""]
    sections = rec.get("sections") or {}
    for name in FLYAOC_SECTIONS:
        v = sections.get(name)
        parts += v if isinstance(v, list) else [v or ""]
    return " ".join(parts).lower().split()


def bm25_worker(corpus: Path, queries_file: Path, result_file: Path, max_papers: int | None) -> None:
    """Child process: build BM25Okapi from the corpus file, answer the queries, write ids and timings as JSON."""
    import numpy as np
    from rank_bm25 import BM25Okapi

    ids: list[str] = []

    def docs():
        with open(corpus, encoding="utf-8") as fh:
            for line in fh:
                if max_papers is not None and len(ids) >= max_papers:
                    return
                rec = json.loads(line)
                ids.append(rec["pmcid"])
                yield flyaoc_tokens(rec)

    t0 = time.perf_counter()
    bm25 = BM25Okapi(docs())           # consumes the generator once: memory is the index, not the token lists
    build_s = time.perf_counter() - t0
    gc.collect()
    queries = json.loads(queries_file.read_text())

    def one(text: str) -> list[str]:
        scores = bm25.get_scores(text.lower().split())
        top = np.argpartition(-scores, min(K, len(scores) - 1))[:K]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [ids[i] for i in top if scores[i] > 0]

    hits = [one(q["query"]) for q in queries]
    times, cpu = timed(one, queries)
    write_json(result_file, {"build_seconds": build_s, "papers": len(ids), "hits": hits, "times_ms": times,
                             "cpu_ms": cpu, "pmcids": ids})


def rank_bm25_side(corpus: Path, queries: list[dict], work: Path, max_papers: int | None) -> dict:
    qfile, rfile = work / "bm25_queries.json", work / "bm25_result.json"
    write_json(qfile, queries)
    cmd = [sys.executable, __file__, "--bm25-worker", "--corpus", str(corpus), "--queries-file", str(qfile),
           "--result-file", str(rfile)] + (["--bm25-max-papers", str(max_papers)] if max_papers else [])
    run = run_measured(cmd).check()
    res = json.loads(rfile.read_text())
    return {"seconds": round(run.seconds, 1), "cpu_seconds": round(run.cpu_seconds, 1),
            "build_seconds": round(res["build_seconds"], 1),
            "peak_rss": run.peak_rss, "papers": res["papers"],
            "latency": dict(latency_summary(res["times_ms"]), cpu_p50_ms=round(percentile(res["cpu_ms"], 50), 3)),
            "hits": res["hits"], "pmcids": res["pmcids"]}


# ------------------------------------------------------------------------------------------------------- report

def report(r: dict) -> str:
    fs, bm = r["flysift"], r.get("rank_bm25")
    b = fs["build"]
    rows = [
        ["index build, wall (from corpus file)", f"{b['seconds']:.1f} s", f"{bm['build_seconds']:.1f} s" if bm else "–",
         "≤ 180 s (flysift)"],
        ["index build, CPU (user + system)", f"{b['cpu_seconds']:.1f} s",
         f"{bm['cpu_seconds']:.1f} s (build + queries)" if bm else "–", ""],
        ["index build, peak RSS", fmt_bytes(b["peak_rss"]), fmt_bytes(bm["peak_rss"]) if bm else "–",
         "≤ 4 GiB (flysift)"],
        ["index size on disk", fmt_bytes(b["index_bytes"]), "– (memory only)", ""],
        ["paper search p50 / p99, in-process",
         f"{fs['in_process']['p50_ms']:.2f} / {fs['in_process']['p99_ms']:.2f} ms",
         f"{bm['latency']['p50_ms']:.1f} / {bm['latency']['p99_ms']:.1f} ms" if bm else "–", "p50 ≤ 2 ms"],
        ["paper search CPU p50, in-process", f"{fs['in_process']['cpu_p50_ms']:.2f} ms",
         f"{bm['latency']['cpu_p50_ms']:.1f} ms" if bm else "–", ""],
        ["paper search p50 / p99, HTTP", f"{fs['http']['p50_ms']:.2f} / {fs['http']['p99_ms']:.2f} ms", "–",
         "p50 ≤ 10 ms"],
        ["server CPU per HTTP search (mean)", f"{fs['http']['server_cpu_mean_ms']:.2f} ms", "–", ""],
    ]
    if bm:
        rows.append(["in-process median speed-up (wall; CPU)",
                     f"{bm['latency']['p50_ms'] / fs['in_process']['p50_ms']:.1f}×; "
                     f"{bm['latency']['cpu_p50_ms'] / fs['in_process']['cpu_p50_ms']:.1f}×", "1×", "≥ 100×"])
    for kind in ("symbol", "fullname", "synonym", "all"):
        f = fs["quality"].get(kind)
        if f:
            o = bm["quality"].get(kind) if bm else None
            rows.append([f"recall@16, {kind} queries ({f['queries']})", f"{f['recall@16']:.3f}",
                         f"{o['recall@16']:.3f}" if o else "–",
                         "flysift > rank_bm25 (symbol)" if kind == "symbol" else ""])
    if bm:
        fq, oq = fs["quality"]["per_query"], bm["quality"]["per_query"]
        for name in HARD_CASES:
            for q in (q for q in fq if q.startswith(name + " (")):
                rows.append([f"recall@16, `{name}`", f"{fq[q]:.3f}", f"{oq[q]:.3f}", ""])
    table = markdown_table(["measure", "flysift embedded", "rank_bm25 (FlyAOC)", "target"], rows)
    c = r["corpus"]["summary"]
    head = (f"Corpus: {c['papers']:,} papers, {c['words']:,} words ({fmt_bytes(c['bytes'])} JSONL), seed {c['seed']}; "
            f"{r['queries']} queries. Machine: {r['machine']['cpu']}, {r['machine']['cores']} cores, "
            f"{r['machine']['ram_gib']} GiB RAM; load average {r['machine'].get('load_avg_1m', '?')} at the start, "
            f"{r.get('load_avg_1m_end', '?')} at the end (other jobs shared the machine when above ~0).")
    if bm and bm["papers"] != c["papers"]:
        head += f" rank_bm25 ran on the first {bm['papers']:,} papers only (memory)."
    return head + "\n\n" + table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--papers", type=int, default=16_898)
    ap.add_argument("--words", type=int, default=8_300)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--work", type=Path, default=Path("bench-work/embedded"),
                    help="Folder for the corpus, the index and results (reused between runs)")
    ap.add_argument("--out", type=Path, help="Also write the results JSON here")
    ap.add_argument("--skip-bm25", action="store_true", help="Measure flysift only")
    ap.add_argument("--bm25-max-papers", type=int, help="Give rank_bm25 only the first N papers (when memory is short)")
    ap.add_argument("--bm25-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--queries-file", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--result-file", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bm25_worker:
        bm25_worker(args.corpus, args.queries_file, args.result_file, args.bm25_max_papers)
        return

    work = args.work.resolve()
    corpus_dir, data_dir = work / "corpus", work / "index"
    log = lambda msg: print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    log(f"corpus: {args.papers} papers × {args.words} words → {corpus_dir}")
    corpus_info = ensure_corpus(args, corpus_dir)
    corpus = corpus_dir / "corpus.jsonl"
    key = json.loads((corpus_dir / "answer_key.json").read_text())
    queries = gene_queries(corpus_dir / "genes.tsv", key, args.queries)

    log("flysift: index build (flysift index corpus)")
    build = flysift_build(corpus, data_dir)
    log(f"  {build['seconds']} s, peak RSS {fmt_bytes(build['peak_rss'])}, index {fmt_bytes(build['index_bytes'])}")
    log("flysift: in-process search")
    in_proc, hits = flysift_in_process(data_dir, queries)
    log(f"  {in_proc}")
    log("flysift: HTTP search")
    http, http_hits = flysift_http(data_dir, queries)
    log(f"  {http}")
    results: dict = {"machine": machine(), "corpus": corpus_info, "queries": len(queries),
                     "command": " ".join(sys.argv),
                     "flysift": {"build": build, "in_process": in_proc, "http": http, "quality": quality(queries, hits),
                                 "http_same_hits": sum(a == b for a, b in zip(hits, http_hits, strict=True))}}
    if not args.skip_bm25:
        log("rank_bm25: build + search (child process)")
        bm = rank_bm25_side(corpus, queries, work, args.bm25_max_papers)
        in_subset = set(bm.pop("pmcids"))
        # with --bm25-max-papers, rank_bm25 is scored against the part of the answer key inside its subset (the
        # report says so): not the same task as flysift's, so compare the two only on full runs
        sub_queries = [dict(q, relevant=[p for p in q["relevant"] if p in in_subset]) for q in queries]
        bm["quality"] = quality(sub_queries, bm.pop("hits"))
        results["rank_bm25"] = bm
        log(f"  build {bm['build_seconds']} s, peak RSS {fmt_bytes(bm['peak_rss'])}, {bm['latency']}")
    results["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    (work / "results.md").write_text(report(results), encoding="utf-8")
    write_json(work / "results.json", results)
    if args.out:
        write_json(args.out, results)
    print(report(results))


if __name__ == "__main__":
    main()
