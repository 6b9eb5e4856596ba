"""Exports stream in bounded memory (issue #26 item 5): the Python memory an export of 1,000, 5,000 and 10,000
passage hits takes at its peak, streamed (``SearchService.export``, what the REST route and ``flysift passages
--format`` write from) beside the same hits collected into one answer first, on one generated corpus, on the
embedded engine and, with ``--cluster-url``, on an OpenSearch node; then the same 10,000 over HTTP (the client's
``iter_export`` against a served API, bytes received and time to the first byte).

usage: python bench/bench_exports.py [--papers 2000] [--words 700] [--cluster-url URL] [--out DIR]

Memory is tracemalloc's peak of this process's Python allocations while the export is consumed and written to
/dev/null (the service runs in this process); wall and CPU seconds beside it. The machine is shared, so times are
indicative only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_ir import local_service  # noqa: E402
from indexer.synthetic import SyntheticConfig, generate  # noqa: E402
from search.client import Client  # noqa: E402
from search.core.config import Settings  # noqa: E402
from search.retrieval.exports import Format  # noqa: E402
from search.retrieval.exports import passages as passage_rows  # noqa: E402
from search.retrieval.service import SearchService  # noqa: E402
from search.services import Services  # noqa: E402
from search.text.passages import split_passages  # noqa: E402

SIZES = (1_000, 5_000, 10_000)
#: a query most passages match (stop words are kept in a query of stop words only)
QUERY = "the OR of OR in"
FORMAT: Format = "csv"


def build(svc: SearchService, papers: int, words: int) -> int:
    build = svc.engine().open_build("bench-exports", resume=False)
    n = 0
    for p in generate(SyntheticConfig(n_papers=papers, words_per_paper=words, seed=11)):
        passages = split_passages(p)
        n += len(passages)
        build.add(p, passages)
    build.commit({})
    build.publish()
    return n


def measure(fn: Any) -> dict[str, float]:
    tracemalloc.start()
    w, c = time.perf_counter(), time.process_time()
    written = fn()
    out = {"wall_s": round(time.perf_counter() - w, 2), "cpu_s": round(time.process_time() - c, 2),
           "peak_MiB": round(tracemalloc.get_traced_memory()[1] / 2**20, 2), "bytes": written}
    tracemalloc.stop()
    return out


def streamed(svc: SearchService, n: int) -> int:
    written = 0
    with open(os.devnull, "w", encoding="utf-8") as sink:
        for piece in svc.export("passages", QUERY, FORMAT, limit=n, syntax="query"):
            written += len(piece)
            sink.write(piece)
    return written


def collected(svc: SearchService, n: int) -> int:
    """The same hits gathered into one list and one text before writing (what a non-streaming answer holds)."""
    eng = svc.engine()
    query = svc.build_query(QUERY, None, syntax="query", target="passages")
    hits = list(eng.export_passages(query, n))
    heads = eng.paper_heads(h.pmcid for h in hits)
    for h in hits:
        h.title = heads[h.pmcid].title if h.pmcid in heads else None
    text = "".join(passage_rows(hits, FORMAT))
    with open(os.devnull, "w", encoding="utf-8") as sink:
        sink.write(text)
    return len(text)


def over_http(settings: Settings, n: int) -> dict[str, float]:
    with local_service(settings) as url, Client(url, timeout=600) as client:
        w = time.perf_counter()
        first = None
        got = 0
        for chunk in client.iter_export("passages", QUERY, FORMAT, max_hits=n):
            first = first or time.perf_counter() - w
            got += len(chunk)
        return {"bytes": got, "wall_s": round(time.perf_counter() - w, 2),
                "first_byte_s": round(first or 0.0, 3), "rows": n}


def engine_rows(svc: SearchService, label: str, sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    rows = []
    total = svc.search_passages(QUERY, syntax="query", limit=1).total
    streamed(svc, 100)   # warm: the reader, the paper store's cache
    for n in sizes:
        if n > total:
            continue
        for how, fn in (("streamed", streamed), ("collected first", collected)):
            rows.append({"engine": label, "hits": n, "how": how, **measure(lambda f=fn, k=n: f(svc, k))})
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--papers", type=int, default=2000)
    ap.add_argument("--words", type=int, default=700)
    ap.add_argument("--cluster-url", default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/out/exports"))
    args = ap.parse_args()
    result: dict[str, Any] = {"query": QUERY, "format": FORMAT, "papers": args.papers, "words": args.words}
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp) / "emb", engine="embedded")
        emb = Services.open(settings).search
        result["passages indexed"] = build(emb, args.papers, args.words)
        result["matching passages"] = emb.search_passages(QUERY, syntax="query", limit=1).total
        print(result, flush=True)
        rows = engine_rows(emb, "embedded", SIZES)
        result["http (embedded)"] = over_http(settings, max(n for n in SIZES if n <= result["matching passages"]))
        if args.cluster_url:
            prefix = f"fsbench-{uuid.uuid4().hex[:8]}"
            clu = Services.open(Settings(data_dir=Path(tmp) / "clu", cluster_url=args.cluster_url,
                                         cluster_index_prefix=prefix)).search
            try:
                build(clu, args.papers, args.words)
                rows += engine_rows(clu, "cluster", SIZES)
            finally:
                t = clu.engine().t  # type: ignore[attr-defined]
                names = list(t.request("GET", f"/{prefix}-*", params={"expand_wildcards": "all"}))
                if names:
                    t.request("DELETE", "/" + ",".join(names))
                for tpl in t.request("GET", "/_index_template").get("index_templates", []):
                    if tpl["name"].startswith(prefix):
                        t.request("DELETE", f"/_index_template/{tpl['name']}")
    result["rows"] = rows
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=1))
    print("\n| engine | hits | how | peak MiB (Python) | wall s | CPU s | bytes |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['engine']} | {r['hits']:,} | {r['how']} | {r['peak_MiB']} | {r['wall_s']} | {r['cpu_s']} | "
              f"{r['bytes']:,} |")
    print(f"\nHTTP (embedded): {result['http (embedded)']}")


if __name__ == "__main__":
    main()
