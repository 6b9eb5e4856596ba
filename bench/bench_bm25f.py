"""Would cross-field scoring (BM25F) close the older-gene-name gap to FlyAOC's rank_bm25? (issue #15)

The engines scored each paper field on its own until their one-field layout (tantivy: one IDF and one length norm per
field, the field scores summed with weights title 3, abstract 2, body 1). BM25F scores the weighted fields as one
document: one IDF (documents holding the term anywhere), one saturation over ``Σ w_f · tf_f / norm_f``. This script,
which chose the one-field layout the engines now have (the third scoring below), scores all three ways *outside*
the engines, over the same tokens (``search.text.analysis``, both views), the same planned queries
(``search.retrieval.planner.plan`` with the corpus lexicon's fold set, as ``bench_indexing.flysift_queries`` calls
it) and the same generated corpora, beside rank_bm25 (FlyAOC's ``BM25Okapi`` over its whitespace tokens). The
per-field column was the check that the simulation is faithful: it landed on the per-field engines' own recall from
``bench_indexing.py`` on the same corpus (tantivy's one-byte length norms and phrase scoring differ slightly).

    .venv/bin/python bench/bench_bm25f.py --work bench-work/indexing --sizes 2000,4000 --ir ../shared/data/ir
        [--bm25f-weights title=2,abstract=1,body=1] [--json out.json]

The corpora are ``bench_indexing.py``'s (``WORK/corpora/N``; generated here when missing). Prints recall@16 per
query kind for each scoring, CPU and wall time of the run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_embedded import ensure_corpus, flyaoc_tokens, gene_queries, quality  # noqa: E402
from indexer.synthetic import read_genes_tsv  # noqa: E402
from search.core.query import FIELD_BOOSTS, PER_FIELD_BOOSTS  # noqa: E402
from search.retrieval.planner import plan  # noqa: E402
from search.text.analysis import analyze  # noqa: E402
from search.text.lexicon import Lexicon  # noqa: E402

K1, B = 1.2, 0.75
FIELDS = tuple(FIELD_BOOSTS)
VIEWS = ("word", "symbol")


class Corpus:
    """Per view and field: each paper's tokens joined by spaces (for phrases) and term counts; lengths."""

    def __init__(self, docs: Iterable[tuple[str, dict[str, str], list[str]]]):
        self.ids: list[str] = []
        self.text: dict[tuple[str, str], list[str]] = {(v, f): [] for v in VIEWS for f in FIELDS}
        self.tf: dict[tuple[str, str], list[Counter[str]]] = {(v, f): [] for v in VIEWS for f in FIELDS}
        self.flyaoc: list[list[str]] = []
        for pid, parts, flyaoc in docs:
            self.ids.append(pid)
            for v in VIEWS:
                for f in FIELDS:
                    toks = analyze(v, parts.get(f, ""))
                    self.text[v, f].append(" " + " ".join(toks) + " ")
                    self.tf[v, f].append(Counter(toks))
            self.flyaoc.append(flyaoc)
        n = len(self.ids)
        self.length = {k: np.array([sum(c.values()) for c in cs], dtype=np.float64) for k, cs in self.tf.items()}
        self.avg = {k: max(1e-9, float(x.mean())) for k, x in self.length.items()}
        self.n = n

    def counts(self, view: str, field: str, tokens: list[str], phrase: bool) -> np.ndarray:
        """Per paper: occurrences of the token (or the phrase) in one field of one view."""
        if len(tokens) == 1 or not phrase:
            t = tokens[0]
            return np.fromiter((c.get(t, 0) for c in self.tf[view, field]), np.float64, self.n)
        needle = " " + " ".join(tokens) + " "
        return np.fromiter((s.count(needle) for s in self.text[view, field]), np.float64, self.n)


def generated_docs(path: Path) -> Iterator[tuple[str, dict[str, str], list[str]]]:
    """The generated corpus as the indexer splits it: title, abstract, and every section as the body."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            secs = rec.get("sections") or {}
            body = " ".join(" ".join(v) if isinstance(v, list) else (v or "") for v in secs.values())
            yield rec["pmcid"], {"title": rec.get("title") or "", "abstract": rec.get("abstract") or "",
                                 "body": body}, flyaoc_tokens(rec)



def idf(df: float, n: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def units(query) -> list[tuple[str, list[str], float]]:
    """The planned query as scored units: (view, tokens, weight). A phrase is one unit; other clauses score each
    token (the engines' Should over term queries)."""
    out = []
    for c in query.clauses:
        toks = analyze(c.view, c.text)
        if not toks:
            continue
        if c.phrase and len(toks) > 1:
            out.append((c.view, toks, c.boost))
        else:
            out += [(c.view, [t], c.boost) for t in toks]
    return out


#: BM25F's field weights (``--bm25f-weights``; the engines' defaults now). Not the per-field 3 / 2 / 1: inside one
#: saturation an abstract weight of 2 acts as a halved k1 on every title-less collection (MED and NFCorpus lose
#: 0.018 and 0.008 nDCG@10 with it); title 2, abstract 1, body 1 keeps them equal
BM25F_WEIGHTS = {"title": 2.0, "abstract": 1.0, "body": 1.0}


#: the scorings compared: the engines' per-field sum, BM25F (per-field length norms, one saturation), and one field
#: holding every field's tokens, each field repeated its weight's times (what an index can hold)
SCORINGS = {"per-field (as the engines scored)": "per-field", "BM25F (one document)": "bm25f",
            "one field, fields repeated by weight": "repeated"}


def score(corpus: Corpus, query, how: str) -> np.ndarray:
    total = np.zeros(corpus.n)
    for view, toks, boost in units(query):
        phrase = len(toks) > 1
        tfs = {f: corpus.counts(view, f, toks, phrase) for f in FIELDS}
        if how == "per-field":
            for f in FIELDS:
                tf = tfs[f]
                df = float(np.count_nonzero(tf))
                if not df:
                    continue
                norm = K1 * (1 - B + B * corpus.length[view, f] / corpus.avg[view, f])
                total += boost * PER_FIELD_BOOSTS[f] * idf(df, corpus.n) * tf * (K1 + 1) / (tf + norm)
            continue
        df = float(np.count_nonzero(np.sum([tfs[f] for f in FIELDS], axis=0)))
        if not df:
            continue
        if how == "bm25f":
            weighted = np.sum([BM25F_WEIGHTS[f] * tfs[f] / (1 - B + B * corpus.length[view, f] / corpus.avg[view, f])
                               for f in FIELDS], axis=0)
            total += boost * idf(df, corpus.n) * weighted * (K1 + 1) / (K1 + weighted)
        else:
            counts = np.sum([BM25F_WEIGHTS[f] * tfs[f] for f in FIELDS], axis=0)
            length = np.sum([BM25F_WEIGHTS[f] * corpus.length[view, f] for f in FIELDS], axis=0)
            norm = K1 * (1 - B + B * length / max(1e-9, float(length.mean())))
            total += boost * idf(df, corpus.n) * counts * (K1 + 1) / (counts + norm)
    return total


def ranked(corpus: Corpus, scores: np.ndarray, k: int) -> list[tuple[str, float]]:
    """The best ``k`` papers that score at all, ties in corpus order (as the engines break them)."""
    order = np.lexsort((np.arange(corpus.n), -scores))[:k]
    return [(corpus.ids[i], float(scores[i])) for i in order if scores[i] > 0]


def top(corpus: Corpus, scores: np.ndarray, k: int = 16) -> list[str]:
    return [pid for pid, _ in ranked(corpus, scores, k)]


def ir_collection(directory: Path) -> dict:
    """nDCG@10 and Recall@100 of both scorings on a BEIR collection indexed as the service indexes it (``eval.ir``:
    title → title, text → abstract), every judged query planned as the paper route plans it."""
    from eval.ir import load_beir, score_runs

    coll = load_beir(directory)
    corpus = Corpus((d["_id"], {"title": d.get("title") or "", "abstract": d["text"]}, []) for d in coll.docs)
    runs: dict[str, dict[str, dict[str, float]]] = {name: {} for name in SCORINGS}
    for qid in coll.judged_queries:
        planned = plan(coll.queries[qid])
        for name, how in SCORINGS.items():
            hits = ranked(corpus, score(corpus, planned, how), 100)
            runs[name][qid] = {pid: sc - r * 1e-9 for r, (pid, sc) in enumerate(hits)}
    res = score_runs(coll.qrels, runs)
    return {"collection": coll.name, "queries": len(coll.judged_queries),
            "runs": {n: {m: round(v, 4) for m, v in r.items() if m in ("ndcg@10", "recall@100")}
                     for n, r in res["runs"].items()},
            "p_ndcg@10": {x["b"]: x["p_value"] for x in res["significance"] if x["metric"] == "ndcg@10"}}


def one_size(work: Path, papers: int, words: int, seed: int, n_queries: int) -> dict:
    from rank_bm25 import BM25Okapi

    corpus_dir = work / "corpora" / str(papers)
    ensure_corpus(SimpleNamespace(papers=papers, words=words, seed=seed), corpus_dir)
    key = json.loads((corpus_dir / "answer_key.json").read_text(encoding="utf-8"))
    queries = gene_queries(corpus_dir / "genes.tsv", key, n_queries)
    foldable = Lexicon(read_genes_tsv(corpus_dir / "genes.tsv")).foldable()
    corpus = Corpus(generated_docs(corpus_dir / "corpus.jsonl"))
    okapi = BM25Okapi(corpus.flyaoc)
    hits: dict[str, list[list[str]]] = {name: [] for name in [*SCORINGS, "rank_bm25 (FlyAOC)"]}
    for q in queries:
        planned = plan(q["query"], foldable=foldable)
        for name, how in SCORINGS.items():
            hits[name].append(top(corpus, score(corpus, planned, how)))
        hits["rank_bm25 (FlyAOC)"].append(top(corpus, okapi.get_scores(q["query"].lower().split())))
    return {"papers": papers, "queries": len(queries),
            "recall": {name: quality(queries, h) for name, h in hits.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("bench-work/indexing"), help="bench_indexing.py's --work")
    ap.add_argument("--sizes", default="2000,4000")
    ap.add_argument("--words", type=int, default=8_300)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--ir", type=Path, help="Also the BEIR collections in this folder (../shared/data/ir)")
    ap.add_argument("--collections", default="med,nfcorpus-test,cranfield")
    ap.add_argument("--bm25f-weights", default="", help="title=W,abstract=W,body=W for BM25F (default 2, 1, 1)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    for kv in filter(None, args.bm25f_weights.split(",")):
        k, v = kv.split("=")
        BM25F_WEIGHTS[k] = float(v)
    print(f"BM25F weights: {BM25F_WEIGHTS}")
    t0, c0 = time.perf_counter(), time.process_time()
    rows = []
    for papers in (int(s) for s in args.sizes.split(",") if s):
        r = one_size(args.work, papers, args.words, args.seed, args.queries)
        rows.append(r)
        print(f"\n### {papers:,} papers, {r['queries']} gene queries\n")
        print("| scoring | recall@16 symbol | full name | older names (synonym) | all |\n|---|---|---|---|---|")
        for name, q in r["recall"].items():
            print(f"| {name} | " + " | ".join(f"{q[k]['recall@16']:.3f}" for k in ("symbol", "fullname", "synonym",
                                                                                   "all")) + " |", flush=True)
    if args.ir:
        print("\n### IR collections (title + text, judged queries)\n")
        print("| collection | queries | " + " | ".join(f"{n}: nDCG@10 / R@100" for n in SCORINGS) +
              " | p against per-field (nDCG@10, paired t) |\n|---|---|" + "---|" * (len(SCORINGS) + 1))
        for name in args.collections.split(","):
            r = ir_collection(args.ir / name)
            rows.append(r)
            cells = [f"{m['ndcg@10']:.4f} / {m['recall@100']:.4f}" for m in r["runs"].values()]
            ps = ", ".join(f"{p:.2g}" for p in r["p_ndcg@10"].values())
            print(f"| {r['collection']} | {r['queries']} | " + " | ".join(cells) + f" | {ps} |", flush=True)
    print(f"\nWhole run: {time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU "
          f"(load {os.getloadavg()[0]:.1f} at the end)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
