"""Queries as people and agents write them (issue #16): flysift's BM25 through the service beside a plain stemmed BM25,
and gene recall on a generated corpus, in one run.

What it measures, all against one local service (started on a free loopback port over a throw-away data directory):

1. **Shared IR collections** (``../shared/data/ir``: MED, NFCorpus-test, Cranfield). Each is indexed through the API
   and every judged query asked for 100 hits (``eval.ir``). Beside it, on the same title + text, the reference: a
   plain stemmed BM25 with a stop list — ``bm25s`` (Lucene BM25, k1 0.9, b 0.4; ``[a-z0-9]``-style tokens, Lucene's
   33 English stop words, Snowball English stemmer via PyStemmer). Also: the same queries written in capitals
   (should score what the lower-case queries score) and, with ``--compare-planner REV``, the planner of a git
   revision on the same index (before/after in one run). Scored by ranx: nDCG@10, Recall@100, MAP, MRR.
2. **Generated corpus** (``indexer.synthetic``, deterministic): recall@16 per gene query kind (symbol, full name,
   older names; ``bench_embedded``'s queries and answer key) and on 50 natural-language questions about genes
   ("What is the role of Delta in wing development?"), whose answer papers are the gene's papers.
3. **Gene hazards**: ``dl`` vs ``Dl`` and friends on the hand-written fixture corpus (the tests' rules, counted here),
   read as plain text and through the query language (issue #26).

Runs (issue #26): ``flysift`` is the service's default for a caller outside a session, the query language
(``syntax: query``); ``flysift, syntax plain`` reads every character as text (what agents get by default);
``flysift, planner before`` (``--compare-planner REV``) is the planner of that revision with plain text: REV =
the commit before #26 gives the figures before the query language and the compound reading.

usage: python bench/bench_queries.py [--data DIR] [--out DIR] [--papers 1000] [--words 1500]
                                     [--compare-planner REV] [--collections med,nfcorpus-test,cranfield]
       python bench/bench_queries.py --field-weights-grid [--grid-title 1,2,3] [--grid-abstract 1,2]

``--field-weights-grid`` runs only this: every collection indexed once, then for each global field-weight setting
(the current default first, then title × abstract, body 1) one service over the same index with that setting for
every collection, all judged queries asked; nDCG@10 per collection and their mean, each setting's paired t-test
against the default per collection (``grid.md``/``grid.json``). Defaults are chosen on the mean over all
collections, never per collection (docs/search.md, "Scoring").

Needs ``bm25s`` and ``PyStemmer`` (the ``bench`` extra: ``pip install -e ".[bench]"``). Times are wall and CPU
seconds of this process (the service runs in it); the machine is shared, so they are indicative only.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_ir import local_service  # noqa: E402
from eval.ir import Collection, index_collection, load_beir, score_runs, search_run, service_collection_name  # noqa: E402

K = 16
N_QUESTIONS = 50
REF_K1, REF_B = 0.9, 0.4
#: question templates for the natural-language set ({s}: symbol, {f}: full name); answers: the gene's papers
QUESTIONS = (
    "What is the role of {f} in wing development?",
    "How does {s} regulate its target genes?",
    "Which papers describe mutants of {s}?",
    "What is known about the function of {f} ({s})?",
    "Is {s} required for cell growth in the embryo?",
)


# ------------------------------------------------------------------------------------------------- the reference

def bm25s_run(coll: Collection, depth: int = 100, k1: float = REF_K1, b: float = REF_B) -> dict[str, dict[str, float]]:
    """Plain stemmed BM25 with a stop list (bm25s, Lucene variant) over title + text; positive scores only."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    ids = [d["_id"] for d in coll.docs]
    corpus = [f"{d.get('title') or ''} {d['text']}" for d in coll.docs]
    model = bm25s.BM25(method="lucene", k1=k1, b=b)
    model.index(bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    run: dict[str, dict[str, float]] = {}
    for qid in coll.judged_queries:
        toks = bm25s.tokenize([coll.queries[qid]], stopwords="en", stemmer=stemmer, return_ids=False,
                              show_progress=False)[0]
        toks = [t for t in toks if t in model.vocab_dict]
        if not toks:
            run[qid] = {}
            continue
        docs, scores = model.retrieve([toks], k=min(depth, len(ids)), show_progress=False)
        run[qid] = {ids[int(d)]: float(s) for d, s in zip(docs[0], scores[0], strict=True) if s > 0}
    return run


# ------------------------------------------------------------------------------------------ planner of a revision

def planner_at(rev: str) -> ModuleType:
    """``search/retrieval/planner.py`` as it was at git revision ``rev``, loaded as a module of its own."""
    root = Path(__file__).resolve().parents[1]
    src = subprocess.run(["git", "show", f"{rev}:search/retrieval/planner.py"], cwd=root, check=True,
                         capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "planner_at_rev.py"
    path.write_text(src, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("planner_at_rev", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _without_compounds(fn: Any, text: str, compounds: Any = None, **kw: Any) -> Any:
    return fn(text, **kw)


class use_planner:
    """Within the block the service plans queries with ``module.plan`` (the service runs in this process)."""

    def __init__(self, module: ModuleType | None):
        self.module = module

    def __enter__(self) -> None:
        import search.retrieval.service as service

        self.saved = service.plan
        if self.module is not None:
            fn = self.module.plan
            if "compounds" not in inspect.signature(fn).parameters:   # a planner from before the compound reading
                fn = functools.partial(_without_compounds, fn)
            service.plan = fn

    def __exit__(self, *exc: object) -> None:
        import search.retrieval.service as service

        service.plan = self.saved


# ------------------------------------------------------------------------------------------------- collections

def timed(fn: Any, *args: Any, **kw: Any) -> tuple[Any, dict[str, float]]:
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args, **kw)
    return out, {"wall_s": round(time.perf_counter() - w, 2), "cpu_s": round(time.process_time() - c, 2)}


def shouted(coll: Collection) -> Collection:
    return Collection(coll.name, coll.docs, {q: t.upper() for q, t in coll.queries.items()}, coll.qrels)


class Plain:
    """The client, asking for plain-text reading (``syntax: plain``) on every search."""

    def __init__(self, client: Any):
        self.client = client

    def search_papers(self, *args: Any, **kw: Any) -> Any:
        return self.client.search_papers(*args, syntax="plain", **kw)


def collection_rows(client: Any, data: Path, names: list[str], old: ModuleType | None, log: Any) -> list[dict]:
    rows = []
    for name in names:
        coll = load_beir(data / name)
        svc = service_collection_name(coll.name)
        log(f"[{name}] indexing {len(coll.docs)} documents")
        index_collection(client, coll, svc)
        runs: dict[str, dict] = {}
        times: dict[str, dict] = {}
        failed: dict[str, dict[str, str]] = {}
        for label, c, planner, asker in (
                ("flysift", coll, None, client), ("flysift, syntax plain", coll, None, Plain(client)),
                ("flysift, queries in capitals", shouted(coll), None, client),
                ("flysift, queries in capitals, syntax plain", shouted(coll), None, Plain(client)),
                *([("flysift, planner before", coll, old, Plain(client))] if old else [])):
            errs: dict[str, str] = {}
            with use_planner(planner):
                runs[label], times[label] = timed(search_run, asker, c, svc, errors=errs)
            failed[label] = errs
        runs["bm25s reference"], times["bm25s reference"] = timed(bm25s_run, coll)
        log(f"[{name}] scoring {len(runs)} runs")
        scored = score_runs(coll.qrels, runs)
        per_query = {run: {q: round(v["ndcg@10"], 4) for q, v in pq.items()} for run, pq in scored["per_query"].items()}
        rows.append({"collection": name, "docs": len(coll.docs), "queries": len(coll.judged_queries),
                     "ndcg@10_per_query": per_query,
                     "runs": scored["runs"], "times": times, "failed": {k: len(v) for k, v in failed.items()},
                     "significance": [s for s in scored["significance"] if s["metric"] == "ndcg@10"]})
    return rows


# ---------------------------------------------------------------------------------------------- generated corpus

def generated_rows(client: Any, papers: int, words: int, old: ModuleType | None, log: Any) -> dict:
    from bench.bench_embedded import gene_queries, quality
    from indexer.synthetic import SyntheticConfig, answer_key, generate, write_genes_tsv

    cfg = SyntheticConfig(n_papers=papers, words_per_paper=words, seed=7)
    key = answer_key(cfg)
    log(f"[generated] indexing {papers} papers x ~{words} words")
    build = client.create_build("generated")["build_id"]
    batch: list = []
    for p in generate(cfg):
        batch.append(p)
        if len(batch) == 100:
            client.add_papers("generated", build, batch)
            batch = []
    if batch:
        client.add_papers("generated", build, batch)
    client.publish_build("generated", build)
    with tempfile.TemporaryDirectory() as tmp:
        write_genes_tsv(cfg._genes, Path(tmp) / "genes.tsv")
        queries = gene_queries(Path(tmp) / "genes.tsv", key, 200)
    genes = [g for g in cfg._genes if key.get(g.id) and g.fullname]
    questions = []
    for i in range(N_QUESTIONS):  # each gene once, then again with the next template
        g = genes[i % len(genes)]
        questions.append({"kind": "question", "gene": g.id, "relevant": key[g.id],
                          "query": QUESTIONS[(i + i // len(genes)) % len(QUESTIONS)].format(s=g.symbol, f=g.fullname)})

    def ask(qs: list[dict], syntax: str) -> list[list[str]]:
        return [[h.pmcid for h in client.search_papers(q["query"], limit=K, collection="generated",
                                                       syntax=syntax).hits] for q in qs]

    out: dict[str, Any] = {"papers": papers, "words": words, "seed": 7}
    for label, planner, syntax in (("flysift", None, "query"), ("flysift, syntax plain", None, "plain"),
                                   *([("flysift, planner before", old, "plain")] if old else [])):
        with use_planner(planner):
            (hits, qhits), t = timed(lambda s=syntax: (ask(queries, s), ask(questions, s)))
        q = quality(queries, hits)
        nl = quality([dict(x, kind="symbol") for x in questions], qhits)["symbol"]
        out[label] = {k: q[k] for k in ("symbol", "fullname", "synonym", "all") if k in q} | {"questions": nl,
                                                                                           **t}
    out["examples"] = [q["query"] for q in questions[:5]]
    return out


# -------------------------------------------------------------------------------------------------------- hazards

def hazards(syntax: str = "plain") -> dict[str, bool]:
    """The gene-symbol hazards of the fixture corpus, as the planner (``syntax`` plain) or the query language
    (``query``) + embedded engine answer them."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from search.core.querylang import parse
    from search.retrieval.boolean import read_query
    from search.retrieval.planner import plan

    from helpers import build_index  # type: ignore[import-not-found]

    def reading(q: str, **kw: Any) -> Any:
        return plan(q, **kw) if syntax == "plain" else read_query(q, parse(q), "papers", **kw)[0]

    with tempfile.TemporaryDirectory() as tmp:
        eng = build_index(Path(tmp))

        def ids(q: str, **kw: Any) -> list[str]:
            return [h.pmcid for h in eng.search_papers(reading(q, **kw)).hits]

        return {
            "Dl finds only the Delta paper": ids("Dl") == ["PMC100001"],
            "dl finds both, exact case first": ids("dl")[:1] == ["PMC100002"] and len(ids("dl")) == 2,
            "dl known in lower case excludes Dl": "PMC100001" not in ids("dl", known_symbols={"dl"}),
            "Su(H) found": "PMC100003" in ids("Su(H)"),
            "l(2)gl found alone": ids("l(2)gl") == ["PMC100003"],
            "WING DISC GROWTH = wing disc growth": ids("WING DISC GROWTH") == ids("wing disc growth"),
            "question about Dl finds the Delta paper first": ids("What is the role of Dl in the wing?")[:1]
            == ["PMC100001"],
        }


# -------------------------------------------------------------------------------------------- field-weight grid

#: a loss on one collection smaller than noise: the paired t-test against the default does not reject at this level
NOISE_P = 0.05


def cpu_now() -> float:
    """CPU seconds of this process and its children (the service runs in this process)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def weight_grid(titles: list[int], abstracts: list[int]) -> list[dict[str, float]]:
    """The settings to try: the current default first (the base of every comparison), then title × abstract with
    body 1 (BEIR documents have no body, so there only the title:abstract ratio matters)."""
    from search.core.query import FIELD_BOOSTS

    grid = [dict(FIELD_BOOSTS)] + [{"title": float(t), "abstract": float(a), "body": 1.0}
                                   for t in titles for a in abstracts]
    return [dict(w) for w in dict.fromkeys(tuple(sorted(w.items())) for w in grid)]


def weights_label(w: dict[str, float]) -> str:
    return f"title {w['title']:g}, abstract {w['abstract']:g}, body {w['body']:g}"


def grid_rows(data: Path, names: list[str], grid: list[dict[str, float]], log: Any) -> dict:
    """nDCG@10 of every setting of ``grid`` on every collection. The weights are written at index time (how many
    times each field goes into a paper's one searched field), so each setting indexes the collections again."""
    from bench.bench_ir import local_service
    from search.client import Client
    from search.core.config import CollectionSettings, Settings

    colls = {name: load_beir(data / name) for name in names}
    svc = {name: service_collection_name(c.name) for name, c in colls.items()}
    runs: dict[str, dict[str, dict]] = {name: {} for name in names}
    failed: dict[str, dict[str, int]] = {name: {} for name in names}
    for w in grid:
        label = weights_label(w)
        log(f"[grid] {label}")
        table = CollectionSettings.model_validate({"field_weights": {f: int(v) for f, v in w.items()}})
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(data_dir=Path(tmp), collections={svc[n]: table for n in names})
            with local_service(settings) as url, Client(url) as client:
                for name, coll in colls.items():
                    index_collection(client, coll, svc[name])
                for name, coll in colls.items():
                    in_force = client.stats(svc[name]).bm25 or {}
                    if in_force.get("field_weights") != w:   # the run must be labelled with what the service used
                        raise SystemExit(f"{name}: the service reports {in_force}, not {w}")
                    errs: dict[str, str] = {}
                    runs[name][label] = search_run(client, coll, svc[name], errors=errs)
                    failed[name][label] = len(errs)
    base = weights_label(grid[0])
    rows: list[dict[str, Any]] = [{"weights": w, "label": weights_label(w), "collections": {}} for w in grid]
    for name, coll in colls.items():
        scored = score_runs(coll.qrels, runs[name])
        p_values = {s["b"]: s["p_value"] for s in scored["significance"] if s["metric"] == "ndcg@10"}
        for row in rows:
            nd = scored["runs"][row["label"]]["ndcg@10"]
            row["collections"][name] = {"ndcg@10": round(nd, 4),
                                        "delta": round(nd - scored["runs"][base]["ndcg@10"], 4),
                                        "p_value": None if row["label"] == base else round(p_values[row["label"]], 4),
                                        "failed": failed[name][row["label"]]}
    for row in rows:
        row["mean"] = round(sum(c["ndcg@10"] for c in row["collections"].values()) / len(names), 4)
    for row in rows:
        cs = row["collections"].values()
        row["mean_delta"] = round(row["mean"] - rows[0]["mean"], 4)
        # better on the mean, by more than noise somewhere (a gain the paired t-test accepts on some collection), and
        # no collection worse by more than noise (a loss it accepts); identical rankings give no p-value (nan)
        beyond_noise = [c for c in cs if c["p_value"] is not None and c["p_value"] < NOISE_P]
        row["qualifies"] = (row["label"] != base and row["mean_delta"] > 0 and any(c["delta"] > 0 for c in beyond_noise)
                            and not any(c["delta"] < 0 for c in beyond_noise))
    titled = {name: sum(bool((d.get("title") or "").strip()) for d in c.docs) for name, c in colls.items()}
    return {"base": base, "collections": names, "rows": rows, "noise_p": NOISE_P, "docs_with_title": titled}


def grid_markdown(res: dict) -> str:
    names = res["collections"]
    lines = ["| title | abstract | body | " + " | ".join(f"{n} nDCG@10 (Δ, p)" for n in names)
             + " | mean | Δ mean | rule |", "|---|---|---|" + "---|" * (len(names) + 3)]
    for row in res["rows"]:
        w = row["weights"]
        cells = []
        for n in names:
            c = row["collections"][n]
            p = c["p_value"]
            cells.append(f"{c['ndcg@10']:.4f}" if p is None else f"{c['ndcg@10']:.4f} (same ranking)" if p != p
                         else f"{c['ndcg@10']:.4f} ({c['delta']:+.4f}, p {p:.2f})")
        rule = "default" if row["label"] == res["base"] else ("better" if row["qualifies"] else "–")
        lines.append(f"| {w['title']:g} | {w['abstract']:g} | {w['body']:g} | " + " | ".join(cells)
                     + f" | {row['mean']:.4f} | {row['mean_delta']:+.4f} | {rule} |")
    best = max(res["rows"], key=lambda r: r["mean"])
    verdict = f"Best on the mean: {best['label']} ({best['mean']:.4f}); " + (
        f"better than the default on the mean, beyond noise on some collection and worse beyond noise on none "
        f"(paired t-test, p < {res['noise_p']})." if best["qualifies"] else
        "the default stays: no setting is better on the mean by more than noise without a loss beyond noise.")
    titled = ", ".join(f"{n} {k}" for n, k in res["docs_with_title"].items())
    return ("\n".join(lines) + f"\n\nDocuments with a title: {titled} (where none has one, the weights cannot matter)."
            + "\n\n" + verdict + "\n")


# ----------------------------------------------------------------------------------------------------------- main

def markdown(rows: list[dict], gen: dict | None, haz: dict[str, dict[str, bool]]) -> str:
    f = lambda v: "–" if v is None else f"{v:.4f}"  # noqa: E731
    labels = [k for k in rows[0]["runs"]] if rows else []
    lines = ["| collection | " + " | ".join(f"{lab} nDCG@10" for lab in labels) + " | flysift − reference |",
             "|---|" + "---|" * (len(labels) + 1)]
    for r in rows:
        nd = {k: r["runs"][k].get("ndcg@10") for k in labels}
        lines.append(f"| {r['collection']} | " + " | ".join(f(nd[k]) for k in labels)
                     + f" | {nd['flysift'] - nd['bm25s reference']:+.4f} |")
    lines += ["", "| collection | run | Recall@100 | MAP | MRR | failed queries | wall s | CPU s |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for k in labels:
            m = r["runs"][k]
            lines.append(f"| {r['collection']} | {k} | {f(m.get('recall@100'))} | {f(m.get('map'))} | "
                         f"{f(m.get('mrr'))} | {r['failed'].get(k, 0)} | {r['times'][k]['wall_s']} | "
                         f"{r['times'][k]['cpu_s']} |")
    if gen:
        lines += ["", f"Generated corpus ({gen['papers']} papers × ~{gen['words']} words, seed 7), recall@16:", "",
                  "| planner | symbol | full name | older names | all gene queries | 50 questions |",
                  "|---|---|---|---|---|---|"]
        for k in ("flysift", "flysift, syntax plain", "flysift, planner before"):
            if k in gen:
                g = gen[k]
                lines.append(f"| {k} | " + " | ".join(
                    f"{g[x]['recall@16']:.3f} ({g[x]['queries']})" for x in ("symbol", "fullname", "synonym", "all",
                                                                              "questions")) + " |")
    for syntax, found in haz.items():
        lines += ["", f"Gene hazards (fixture corpus, syntax {syntax}): " + ", ".join(
            f"{k}: {'yes' if v else 'NO'}" for k, v in found.items())]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("../shared/data/ir"))
    ap.add_argument("--out", type=Path, default=Path("bench/out/queries"))
    ap.add_argument("--collections", default="med,nfcorpus-test,cranfield")
    ap.add_argument("--papers", type=int, default=1000, help="generated corpus size (0: skip)")
    ap.add_argument("--words", type=int, default=1500)
    ap.add_argument("--compare-planner", default=None, metavar="REV",
                    help="also run the planner of this git revision on the same indexes")
    ap.add_argument("--field-weights-grid", action="store_true",
                    help="run only the grid of global field weights over all --collections (grid.md, grid.json)")
    ap.add_argument("--grid-title", default="1,2,3", help="title weights of the grid")
    ap.add_argument("--grid-abstract", default="1,2", help="abstract weights of the grid")
    args = ap.parse_args()
    from search.client import Client

    def log(m: str) -> None:
        print(m, flush=True)

    if args.field_weights_grid:
        numbers = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
        grid = weight_grid(numbers(args.grid_title), numbers(args.grid_abstract))
        wall, cpu = time.perf_counter(), cpu_now()
        res = grid_rows(args.data, [c for c in args.collections.split(",") if c], grid, log)
        res |= {"wall_s": round(time.perf_counter() - wall, 1), "cpu_s": round(cpu_now() - cpu, 1)}
        md = grid_markdown(res) + f"\nWhole run: {res['wall_s']} s wall, {res['cpu_s']} s CPU (process + children).\n"
        print(md)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "grid.md").write_text(md, encoding="utf-8")
        (args.out / "grid.json").write_text(json.dumps(res, indent=1))
        return

    missing = [m for m in ("bm25s", "Stemmer") if importlib.util.find_spec(m) is None]
    if missing and args.collections:  # the collections' reference run; generated papers alone need neither
        sys.exit(f"bench_queries: the reference BM25 needs the bench extra ({', '.join(missing)} missing): "
                 "pip install -e '.[bench]'")
    old = planner_at(args.compare_planner) if args.compare_planner else None
    started = time.perf_counter(), time.process_time()
    with local_service() as url, Client(url) as client:
        rows = collection_rows(client, args.data, [c for c in args.collections.split(",") if c], old, log)
        gen = generated_rows(client, args.papers, args.words, old, log) if args.papers else None
    haz = {"plain": hazards("plain"), "query": hazards("query")}
    total = {"wall_s": round(time.perf_counter() - started[0], 1), "cpu_s": round(time.process_time() - started[1], 1)}
    md = markdown(rows, gen, haz) + f"\nWhole run: {total['wall_s']} s wall, {total['cpu_s']} s CPU.\n"
    print(md)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(md, encoding="utf-8")
    (args.out / "results.json").write_text(json.dumps({"collections": rows, "generated": gen, "hazards": haz,
                                                       "compare_planner": args.compare_planner, **total}, indent=1))


if __name__ == "__main__":
    main()
