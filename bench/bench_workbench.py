"""The workbench pages' cost (issue #27): server CPU to render the search and paper pages beside the JSON routes for
the same query, on one generated corpus (default 2,000 papers), and the page weight (HTML + CSS + JS).

Requests are driven straight into the ASGI app in this process (no client, no socket), so the CPU measured is the
server's: routing, the service call, rendering or serialising. Per query, one warm-up call each, then ``--rounds``
rounds of the five requests interleaved (JSON search, search page, JSON paper, paper page with the query and gene
marked, paper page unmarked), CPU (``process_time``:
every thread of the process) and wall per request; medians per route, and the page/JSON ratio of the medians.

    .venv/bin/python bench/bench_workbench.py --papers 2000 --work bench-work/workbench
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine, markdown_table, write_json  # noqa: E402
from indexer.pipeline import index_corpus  # noqa: E402
from indexer.synthetic import SyntheticConfig, bundled_genes, write_corpus  # noqa: E402
from search.api.app import create_app  # noqa: E402
from search.core.config import Settings  # noqa: E402
from search.services import Services  # noqa: E402
from search.text.lexicon import Lexicon  # noqa: E402
from search.web import STATIC, static_file  # noqa: E402

#: the queries: gene symbols of the generated corpus, a gene with words, and plain words
WORD_QUERIES = ["wing disc development", "expression in the embryo", "mutant phenotype", "signalling pathway"]


async def call(app: Any, method: str, path: str, query: dict[str, Any] | None = None,
               body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    raw = json.dumps(body).encode() if body is not None else b""
    headers = [(b"host", b"bench"), (b"content-type", b"application/json")] if body is not None else [
        (b"host", b"bench")]
    if raw:
        headers.append((b"content-length", str(len(raw)).encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": urlencode(query or {}, doseq=True).encode(),
             "root_path": "", "headers": headers, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    sent = False
    status, chunks = 0, []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(msg: dict[str, Any]) -> None:
        nonlocal status
        if msg["type"] == "http.response.start":
            status = msg["status"]
        elif msg["type"] == "http.response.body":
            chunks.append(msg.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


def prepare(work: Path, papers: int, words: int) -> Settings:
    data = work / "data"
    if not (data / "bench_ready.json").exists() or json.loads((data / "bench_ready.json").read_text()) != \
            {"papers": papers, "words": words}:
        write_corpus(SyntheticConfig(n_papers=papers, words_per_paper=words), work / "corpus")
        settings = Settings(data_dir=data)
        index_corpus([work / "corpus" / "corpus.jsonl"], Services.open(settings))
        Lexicon(bundled_genes()).save(data / "lexicon.tsv")
        (data / "bench_ready.json").write_text(json.dumps({"papers": papers, "words": words}))
    return Settings(data_dir=data)


def routes(q: str, gene: str | None, pmcid: str) -> dict[str, tuple[str, str, dict | None, dict | None]]:
    body = {"query": q, "snippets": True, "limit": 10, **({"gene": gene} if gene else {})}
    page = {"q": q, **({"gene": gene} if gene else {})}
    return {"search_json": ("POST", "/v1/papers/search", None, body),
            "search_page": ("GET", "/", page, None),
            "paper_json": ("GET", f"/v1/papers/{pmcid}", None, None),
            "paper_page": ("GET", f"/papers/{pmcid}", page, None),
            "paper_page_plain": ("GET", f"/papers/{pmcid}", None, None)}


async def measure(app: Any, queries: list[tuple[str, str | None]], rounds: int) -> dict[str, Any]:
    cpu: dict[str, list[float]] = {}
    wall: dict[str, list[float]] = {}
    sizes: dict[str, list[int]] = {}
    for q, gene in queries:
        status, raw = await call(app, "POST", "/v1/papers/search", body={"query": q, "limit": 1})
        if status != 200 or not json.loads(raw)["hits"]:
            continue
        pmcid = json.loads(raw)["hits"][0]["pmcid"]
        plan = routes(q, gene, pmcid)
        for name, (method, path, query, body) in plan.items():   # warm-up (caches, lazy loads)
            status, out = await call(app, method, path, query, body)
            if status != 200:
                raise SystemExit(f"{name} {path} answered {status}: {out[:300]!r}")
        for _ in range(rounds):
            for name, (method, path, query, body) in plan.items():
                c0, w0 = time.process_time(), time.perf_counter()
                _, out = await call(app, method, path, query, body)
                cpu.setdefault(name, []).append((time.process_time() - c0) * 1000)
                wall.setdefault(name, []).append((time.perf_counter() - w0) * 1000)
                sizes.setdefault(name, []).append(len(out))
    return {name: {"cpu_ms_median": statistics.median(cpu[name]), "cpu_ms_mean": statistics.fmean(cpu[name]),
                   "wall_ms_median": statistics.median(wall[name]), "calls": len(cpu[name]),
                   "bytes_max": max(sizes[name]), "bytes_median": statistics.median(sizes[name])} for name in cpu}


async def paper_weights(data_dir: Path, query: str) -> dict[str, Any]:
    """Every paper page of an existing index (e.g. CRAFT's), unmarked and with ``query`` marked: the largest."""
    app = create_app(Settings(data_dir=data_dir))
    pmcids = sorted({p.pmcid for p, _ in app.state.search.engine().scan_passages()})
    sizes = []
    for pmcid in pmcids:
        plain = await call(app, "GET", f"/papers/{pmcid}")
        marked = await call(app, "GET", f"/papers/{pmcid}", {"q": query})
        sizes.append((max(len(plain[1]), len(marked[1])), pmcid))
    size, pmcid = max(sizes)
    return {"data_dir": str(data_dir), "papers": len(pmcids), "query": query, "largest_page_bytes": size,
            "largest_paper": pmcid, "median_page_bytes": statistics.median(s for s, _ in sizes)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--papers", type=int, default=2000)
    ap.add_argument("--words", type=int, default=1500, help="mean words per generated paper")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--work", type=Path, default=Path("bench-work/workbench"))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--weight-data-dir", type=Path, default=None,
                    help="also render every paper page of this existing index (e.g. CRAFT's) and report the largest")
    ap.add_argument("--weight-query", default="cell", help="the words marked in those pages")
    args = ap.parse_args(argv)
    settings = prepare(args.work, args.papers, args.words)
    app = create_app(settings)
    genes = [g for g in bundled_genes()[:8]]
    queries: list[tuple[str, str | None]] = [(g.symbol, None) for g in genes[:4]]
    queries += [(f"{g.symbol} expression", g.symbol) for g in genes[4:8]]
    queries += [(w, None) for w in WORD_QUERIES]
    res = asyncio.run(measure(app, queries, args.rounds))
    assets = sum(len(static_file(n)) for n in STATIC)
    ratio = {"search": res["search_page"]["cpu_ms_median"] / res["search_json"]["cpu_ms_median"],
             "paper": res["paper_page"]["cpu_ms_median"] / res["paper_json"]["cpu_ms_median"],
             "paper_plain": res["paper_page_plain"]["cpu_ms_median"] / res["paper_json"]["cpu_ms_median"]}
    weight = {"assets_bytes": assets, "search_page_max": res["search_page"]["bytes_max"] + assets,
              "paper_page_max": res["paper_page"]["bytes_max"] + assets}
    if args.weight_data_dir is not None:
        weight["index"] = asyncio.run(paper_weights(args.weight_data_dir, args.weight_query))
    out = {"papers": args.papers, "words": args.words, "rounds": args.rounds, "queries": len(queries),
           "routes": res, "cpu_ratio_page_to_json": ratio, "page_weight": weight, "machine": machine()}
    write_json(args.out or args.work / "results.json", out)
    rows = [[name, f"{r['cpu_ms_median']:.2f}", f"{r['wall_ms_median']:.2f}", r["calls"], f"{r['bytes_max']:,}"]
            for name, r in res.items()]
    print(markdown_table(["route", "CPU ms (median)", "wall ms (median)", "calls", "largest answer (bytes)"], rows))
    print(f"\npage/JSON CPU: search {ratio['search']:.2f}x, paper {ratio['paper']:.2f}x (marked), "
          f"{ratio['paper_plain']:.2f}x (unmarked); page weight with CSS+JS "
          f"({assets:,} bytes): search ≤ {weight['search_page_max']:,} bytes, paper ≤ {weight['paper_page_max']:,}")
    if "index" in weight:
        w = weight["index"]
        print(f"{w['data_dir']}: {w['papers']} paper pages, the largest {w['largest_page_bytes'] + assets:,} bytes "
              f"with "
              f"CSS+JS ({w['largest_paper']}, {w['query']!r} marked), median {w['median_page_bytes'] + assets:,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
