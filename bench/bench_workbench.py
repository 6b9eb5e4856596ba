"""The workbench pages' cost (issue #27): server CPU to render the search and paper pages beside the JSON routes for
the same query, on one generated corpus (default 2,000 papers), and the page weight (HTML + CSS + JS).

Requests are driven straight into the ASGI app in this process (no client, no socket), so the CPU measured is the
server's: routing, the service call, rendering or serialising. The JSON search asks what the search page asks (the
query language, highlight fragments, facets by year and section). Per query, one warm-up call each, then ``--rounds``
rounds of the five requests interleaved (JSON search, search page, JSON paper, paper page with the query and gene
marked, paper page unmarked), CPU (``process_time``:
every thread of the process) and wall per request; medians and 10th percentiles per route, and the page/JSON ratio of
each (load from other processes adds to both routes and pulls a ratio of medians towards 1; the fast tenth carries
less of it). Then, for the queries with a gene, the parts of the marked paper page without the HTTP stack: the
service's view marked and unmarked, and the template rendering it.

    .venv/bin/python bench/bench_workbench.py --papers 2000 --work bench-work/workbench
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from functools import partial
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
    # the JSON search asks what the page asks: the query language, highlight fragments, facets by year and section
    body = {"query": q, "syntax": "query", "limit": 10, "facets": ["year", "section"],
            "highlight": {"fragment_size": 300, "number_of_fragments": 2}, **({"gene": gene} if gene else {})}
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
                   "cpu_ms_p10": statistics.quantiles(cpu[name], n=10)[0],
                   "wall_ms_median": statistics.median(wall[name]), "calls": len(cpu[name]),
                   "bytes_max": max(sizes[name]), "bytes_median": statistics.median(sizes[name])} for name in cpu}


async def paper_parts(app: Any, queries: list[tuple[str, str | None]], rounds: int) -> dict[str, Any]:
    """Where a marked paper page's time goes, without the HTTP stack: per query with a gene (``gene=``), on its top
    paper, the service's view marked (the query read, the passages split, the query's words and the gene's names
    marked) and unmarked, and the template rendering the marked view; CPU ms, interleaved like the routes."""
    from search.sessions.policy import expansion_names
    from search.web.reading import SearchForm
    from search.web.render import render

    search, sessions = app.state.search, app.state.sessions
    cpu: dict[str, list[float]] = {}
    for q, gene in queries:
        if not gene:
            continue
        status, raw = await call(app, "POST", "/v1/papers/search", body={"query": q, "limit": 1})
        if status != 200 or not json.loads(raw)["hits"]:
            continue
        pmcid = json.loads(raw)["hits"][0]["pmcid"]
        options = {"expansions": expansion_names("snapshot", sessions.lexicon().resolve(gene)), "syntax": "query",
                   "foldable": sessions.fold_set(), "compounds": sessions.compound_set()}
        form = SearchForm(q=q, gene=gene)
        page = {"auth": False, "caller": None, "csrf": "x" * 43, "csrf_field": "csrf", "path": f"/papers/{pmcid}",
                "runs_enabled": False, "form": form, "evidence": "", "mark_terms": False, "evidence_passage": None,
                "query_error": None, "terms_error": None, "title": q}
        view = search.paper_view(pmcid, query=q, **options)
        parts = {"view_marked": partial(search.paper_view, pmcid, query=q, **options),
                 "view_unmarked": partial(search.paper_view, pmcid),
                 "render_marked": partial(render, "paper.html", paper=view, **page)}
        for f in parts.values():   # warm-up
            f()
        for _ in range(rounds):
            for name, f in parts.items():
                c0 = time.process_time()
                f()
                cpu.setdefault(name, []).append((time.process_time() - c0) * 1000)
    return {name: {"cpu_ms_median": statistics.median(v), "cpu_ms_p10": statistics.quantiles(v, n=10)[0],
                   "calls": len(v)} for name, v in cpu.items()}


async def paper_weights(data_dir: Path, query: str, terms: bool = False) -> dict[str, Any]:
    """Every paper page of an existing index (e.g. CRAFT's): unmarked, with ``query`` marked and (``terms``) with its
    ontology terms marked too (the heaviest page); per variant the largest and the median page."""
    app = create_app(Settings(data_dir=data_dir))
    pmcids = sorted({p.pmcid for p, _ in app.state.search.engine().scan_passages()})
    variants: dict[str, dict[str, str]] = {"unmarked": {}, "query": {"q": query}}
    if terms:
        variants["query_and_terms"] = {"q": query, "terms": "1"}
    sizes: dict[str, list[tuple[int, str]]] = {name: [] for name in variants}
    for pmcid in pmcids:
        for name, params in variants.items():
            status, body = await call(app, "GET", f"/papers/{pmcid}", params)
            if status != 200:
                raise SystemExit(f"/papers/{pmcid} {params} answered {status}: {body[:300]!r}")
            sizes[name].append((len(body), pmcid))
    return {"data_dir": str(data_dir), "papers": len(pmcids), "query": query,
            "variants": {name: {"largest_page_bytes": max(v)[0], "largest_paper": max(v)[1],
                                "median_page_bytes": statistics.median(n for n, _ in v)}
                         for name, v in sizes.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--papers", type=int, default=2000)
    ap.add_argument("--words", type=int, default=1500, help="mean words per generated paper")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--part-rounds", type=int, default=100,
                    help="rounds of the marked paper page's parts (one call each is ~0.3-1 ms)")
    ap.add_argument("--work", type=Path, default=Path("bench-work/workbench"))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--weight-data-dir", type=Path, default=None,
                    help="also render every paper page of this existing index (e.g. CRAFT's) and report the largest")
    ap.add_argument("--weight-query", default="cell", help="the words marked in those pages")
    ap.add_argument("--weight-terms", action="store_true",
                    help="also weigh those pages with their ontology terms marked (needs an indexed ontology)")
    args = ap.parse_args(argv)
    settings = prepare(args.work, args.papers, args.words)
    app = create_app(settings)
    genes = [g for g in bundled_genes()[:8]]
    queries: list[tuple[str, str | None]] = [(g.symbol, None) for g in genes[:4]]
    queries += [(f"{g.symbol} expression", g.symbol) for g in genes[4:8]]
    queries += [(w, None) for w in WORD_QUERIES]
    res = asyncio.run(measure(app, queries, args.rounds))
    parts = asyncio.run(paper_parts(app, queries, args.part_rounds))
    assets = sum(len(static_file(n)) for n in STATIC)
    pairs = {"search": ("search_page", "search_json"), "paper": ("paper_page", "paper_json"),
             "paper_plain": ("paper_page_plain", "paper_json")}
    # medians, and the 10th percentiles: time other processes add to a request (a shared machine) is added to the page
    # and the JSON alike, which pulls a ratio of medians towards 1; the fast tenth of the calls carries less of it
    ratio = {k: res[a]["cpu_ms_median"] / res[b]["cpu_ms_median"] for k, (a, b) in pairs.items()}
    ratio_p10 = {k: res[a]["cpu_ms_p10"] / res[b]["cpu_ms_p10"] for k, (a, b) in pairs.items()}
    weight = {"assets_bytes": assets, "search_page_max": res["search_page"]["bytes_max"] + assets,
              "paper_page_max": res["paper_page"]["bytes_max"] + assets}
    if args.weight_data_dir is not None:
        weight["index"] = asyncio.run(paper_weights(args.weight_data_dir, args.weight_query, args.weight_terms))
    out = {"papers": args.papers, "words": args.words, "rounds": args.rounds, "queries": len(queries),
           "routes": res, "marked_paper_parts": parts, "cpu_ratio_page_to_json": ratio,
           "cpu_ratio_page_to_json_p10": ratio_p10,
           "page_weight": weight, "machine": machine()}
    write_json(args.out or args.work / "results.json", out)
    rows = [[name, f"{r['cpu_ms_median']:.2f}", f"{r['cpu_ms_p10']:.2f}", f"{r['wall_ms_median']:.2f}", r["calls"],
             f"{r['bytes_max']:,}"] for name, r in res.items()]
    print(markdown_table(["route", "CPU ms (median)", "CPU ms (p10)", "wall ms (median)", "calls",
                          "largest answer (bytes)"], rows))
    print(f"\npage/JSON CPU, medians (p10): search {ratio['search']:.2f}x ({ratio_p10['search']:.2f}x), paper "
          f"{ratio['paper']:.2f}x ({ratio_p10['paper']:.2f}x) marked, {ratio['paper_plain']:.2f}x "
          f"({ratio_p10['paper_plain']:.2f}x) unmarked; load average {out['machine']['load_avg_1m']}; page weight "
          f"with CSS+JS "
          f"({assets:,} bytes): search ≤ {weight['search_page_max']:,} bytes, paper ≤ {weight['paper_page_max']:,}")
    print("marked paper page, parts (queries with gene=, CPU ms median / p10): " + ", ".join(
        f"{name} {r['cpu_ms_median']:.2f} / {r['cpu_ms_p10']:.2f}" for name, r in parts.items()))
    if "index" in weight:
        w = weight["index"]
        for name, v in w["variants"].items():
            print(f"{w['data_dir']}: {w['papers']} paper pages, {name} ({w['query']!r}): the largest "
                  f"{v['largest_page_bytes'] + assets:,} bytes with CSS+JS ({v['largest_paper']}), median "
                  f"{v['median_page_bytes'] + assets:,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
