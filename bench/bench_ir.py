"""Run the BEIR-format IR collections through the search service and print our BM25 next to published figures.

Each collection is indexed under its own service collection (``beir-<name>``), every judged query asks for 100 hits,
and ranx scores the run (eval/ir.py). A second run, FlyAOC's reference retrieval (rank_bm25 BM25Okapi over
lower-cased whitespace tokens, spec §2.1), is scored beside it with paired t-tests. Without ``--url`` a service is
started on a free loopback port over a temporary data directory.

usage: python bench/bench_ir.py [--data DIR] [--url URL] [--out DIR] [--collections med,cranfield,nfcorpus-test]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from eval.ir import Collection, evaluate_collection, load_beir, write_trec_run
from eval.report import write_ir_report

#: Published BM25 figures quoted in data/ir/README.md (NFCorpus: BEIR's version, 3,633 raw docs; ours: the
#: 3,162-doc preprocessed test split) and the README's own self-measured checks where nothing was published.
PUBLISHED = {
    "nfcorpus-test": [
        {"source": "BEIR paper, BM25 (Elasticsearch)", "ndcg@10": 0.325},
        {"source": "Pyserini BEIR bm25-flat (k1 0.9, b 0.4)", "ndcg@10": 0.3218, "recall@100": 0.2457},
        {"source": "PyTerrier BM25", "ndcg@10": 0.3282},
        {"source": "README self-measured BM25 k1 1.2 b 0.75 (not published)", "ndcg@10": 0.336, "recall@100": 0.257},
    ],
    "med": [{"source": "README self-measured BM25 k1 1.2 b 0.75 (not published; none found)", "ndcg@10": 0.683,
             "recall@100": 0.784, "map": 0.522}],
    "cranfield": [{"source": "README self-measured BM25 k1 1.2 b 0.75 (not published; none found)", "ndcg@10": 0.368,
                   "recall@100": 0.737, "map": 0.307}],
}


def flyaoc_style_run(coll: Collection, depth: int = 100) -> dict[str, dict[str, float]]:
    """FlyAOC's own search_corpus ranking (rank_bm25 BM25Okapi, k1 1.5, b 0.75, whitespace tokens, positive scores)."""
    from rank_bm25 import BM25Okapi

    ids = [d["_id"] for d in coll.docs]
    bm25 = BM25Okapi([f"{d.get('title') or ''} {d['text']}".lower().split() for d in coll.docs], k1=1.5, b=0.75)
    run = {}
    for qid in coll.judged_queries:
        scores = bm25.get_scores(coll.queries[qid].lower().split())
        top = sorted((i for i in range(len(ids)) if scores[i] > 0), key=lambda i: (-scores[i], ids[i]))[:depth]
        run[qid] = {ids[i]: float(scores[i]) for i in top}
    return run


@contextlib.contextmanager
def local_service(settings: Any = None):
    """A real service on a free loopback port over a throw-away data directory (or with ``settings``, over theirs)."""
    import uvicorn

    from search.api.app import create_app
    from search.core.config import Settings

    with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        server = uvicorn.Server(uvicorn.Config(create_app(settings or Settings(data_dir=Path(tmp))), host="127.0.0.1",
                                               port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            thread.join(timeout=10)


def _log(collection: str, message: str) -> None:
    print(f"[{collection}] {message}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("../shared/data/ir"))
    ap.add_argument("--url", default=None, help="A running service; default: start one locally")
    ap.add_argument("--out", type=Path, default=Path("bench/out/ir"))
    ap.add_argument("--collections", default="med,cranfield,nfcorpus-test")
    args = ap.parse_args()
    from search.client import Client

    rows = []
    with (contextlib.nullcontext(args.url) if args.url else local_service()) as url, Client(url) as client:
        for name in args.collections.split(","):
            out = args.out / name
            out.mkdir(parents=True, exist_ok=True)
            coll = load_beir(args.data / name)
            base = out / "flyaoc-rank_bm25.trec"
            write_trec_run(flyaoc_style_run(coll), base, "flyaoc-rank_bm25")
            t0 = time.perf_counter()
            result = evaluate_collection(client, args.data / name, ("bm25",), out_dir=out,
                                         baselines={"flyaoc-rank_bm25": base}, published=PUBLISHED.get(name, []),
                                         log=functools.partial(_log, name))
            result["seconds"] = time.perf_counter() - t0
            write_ir_report(result, out)
            rows.append(result)
    lines = ["| collection | docs | queries | run | nDCG@10 | Recall@100 | MAP | MRR |",
             "|---|---|---|---|---|---|---|---|"]
    fmt = lambda v: "–" if v is None else f"{v:.4f}"  # noqa: E731
    for r in rows:
        for run, m in r["runs"].items():
            lines.append(f"| {r['collection']} | {r['n_docs']} | {r['n_queries']} | {run} | "
                         + " | ".join(fmt(m.get(k)) for k in ("ndcg@10", "recall@100", "map", "mrr")) + " |")
        for p in r["published"]:
            lines.append(f"| {r['collection']} | | | {p['source']} | "
                         + " | ".join(fmt(p.get(k)) for k in ("ndcg@10", "recall@100", "map", "mrr")) + " |")
    table = "\n".join(lines)
    print(table)
    for r in rows:
        for s in r["significance"]:
            print(f"{r['collection']}: {s['metric']} {s['b']} − {s['a']} = {s['delta']:+.4f}, p {s['p_value']:.3g}")
    (args.out / "table.md").write_text(table + "\n")
    (args.out / "results.json").write_text(json.dumps([{k: v for k, v in r.items() if k != "per_query"}
                                                       for r in rows], indent=1))


if __name__ == "__main__":
    main()
