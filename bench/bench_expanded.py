"""Gene-expanded searches in-process: how the embedded engine restricts its per-name ``matched`` searches to a page's
hits, tantivy's term-set query against ``any_of`` (a disjunction of term queries), side by side in one run.

A session's search carries the gene's names as named clauses; ``EmbeddedEngine._matched`` runs one search per name
restricted to the page's hits (and paper snippets one per hit). The corpus is ``bench_sessions``' generated one
(indexed once into ``--work``) with the bundled gene lexicon; the queries are ten genes' symbols, alone with a
section filter and with a word, each expanded with all the gene's names. The rows alternate ``--rounds`` times
(this machine's speed drifts); each reports CPU per paper search, passage search and paper search with snippets,
and the run checks that both restrictions give the same hits, scores, totals, matched names and snippets.

    .venv/bin/python bench/bench_expanded.py --work /tmp/bench-sessions
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tantivy  # noqa: E402

from bench.bench_serving import cpu_per_call  # noqa: E402
from bench.bench_sessions import build  # noqa: E402
from search.core.query import Filters  # noqa: E402
from search.engines import open_local  # noqa: E402
from search.engines.embedded import compile as embedded  # noqa: E402  (where the embedded engine compiles queries)
from search.retrieval.planner import plan  # noqa: E402
from search.text.lexicon import Lexicon  # noqa: E402

GENES = ["Dl", "N", "Su(H)", "wg", "hh", "dpp", "Ubx", "arm", "E(spl)m8-HLH", "Egfr"]


def term_set(schema: tantivy.Schema, field: str, values: Any) -> tantivy.Query:
    return tantivy.Query.term_set_query(schema, field, list(values))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("bench-work/sessions"))
    ap.add_argument("--papers", type=int, default=2000)
    ap.add_argument("--words", type=int, default=800)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20, help="passes over the queries per measurement")
    args = ap.parse_args()

    data, _, _ = build(args.work, args.papers, args.words, args.seed)
    eng = open_local(data)
    lex = Lexicon.load([data / "lexicon.tsv"])
    queries = []
    for symbol in GENES:
        gene = lex.by_symbol(symbol)
        if gene is None:
            continue
        names = [n for n in (gene.symbol, gene.fullname, *gene.symbol_synonyms, *gene.fullname_synonyms) if n]
        queries.append(plan(f"{symbol} wing", expansions=names))
        queries.append(plan(symbol, expansions=names, filters=Filters(section_types=["INTRO", "RESULTS"])))

    def answers() -> list:
        out = []
        for q in queries:
            p, s = eng.search_papers(q, limit=10, snippets=True), eng.search_passages(q, limit=10)
            out.append(([(h.pmcid, round(h.score, 4), h.matched, [x.model_dump() for x in h.snippets])
                         for h in p.hits], p.total,
                        [(h.passage_id, round(h.score, 4), h.matched, h.snippet) for h in s.hits], s.total))
        return out

    def cpu_ms(call, repeat: int) -> float:
        return cpu_per_call(call, queries, repeat * len(queries))

    ways = {"term-set query": term_set, "any_of (term disjunction)": embedded.any_of}
    found: dict[str, list] = {}
    print(f"{len(queries)} gene-expanded queries; CPU ms per search (in-process)\n")
    print("| restriction | round | paper search | passage search | paper search + snippets |\n|---|---|---|---|---|")
    try:
        for r in range(args.rounds):
            for name, fn in ways.items():
                embedded.any_of = fn
                found[name] = answers()
                paper = cpu_ms(lambda q: eng.search_papers(q, limit=10), args.repeat)
                passage = cpu_ms(lambda q: eng.search_passages(q, limit=10), args.repeat)
                snip = cpu_ms(lambda q: eng.search_papers(q, limit=10, snippets=True), max(1, args.repeat // 4))
                print(f"| {name} | {r + 1} | {paper:.3f} | {passage:.3f} | {snip:.3f} |", flush=True)
    finally:
        embedded.any_of = ways["any_of (term disjunction)"]
    same = found["term-set query"] == found["any_of (term disjunction)"]
    print(f"\nsame hits, scores, totals, matched names and snippets: {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
