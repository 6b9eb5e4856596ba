"""The query language on CRAFT (issue #26), on the embedded engine and, with ``--cluster-url``, on an OpenSearch node,
in one run:

1. **What a curator checks**: ``Shh``, ``Shh -limb``, ``Shh AND limb`` (the last two must split the first),
   ``title:BRCA2`` (the BRCA2 paper), an unbalanced quote (422 ``query_syntax`` with its position), each in both
   engines.
2. **Query forms** (PubMed / Europe PMC / Elasticsearch habits): the papers each form finds, read with the query
   language and as plain text (what the same characters found before #26, and what agents get by default).
3. **Highlight fragments, embedded against cluster**: 100 queries made from CRAFT's own text (the 40 commonest
   symbol-shaped tokens, 30 words, 15 pairs, 10 phrases, 5 with operators or fields), each as a paper search and a
   passage search (top 10, ``highlight``); for every hit both engines return, whether the fragments (and a paper's
   best passage) are equal, with the differences listed.
4. The CPU a paper search spends on highlighting (embedded, in process), with and without ``highlight``.

usage: python bench/bench_query_language.py [--craft ../shared/data/craft] [--cluster-url URL] [--out DIR]

The CRAFT articles are indexed from their JATS files with CRAFT's id map, as ``flysift index corpus`` does. Times are
CPU seconds of this process; the machine is shared, so they are indicative only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from indexer.pipeline import index_corpus  # noqa: E402
from search.core.config import Settings  # noqa: E402
from search.core.errors import FlysiftError  # noqa: E402
from search.core.query import HighlightSpec  # noqa: E402
from search.retrieval.service import SearchService  # noqa: E402
from search.services import Services  # noqa: E402
from search.text.analysis import is_stop_word, is_symbol_like, symbol_tokens  # noqa: E402

FORMS = [
    ("word", "limb"), ("gene symbol (case-sensitive)", "Shh"), ("exclude", "Shh -limb"),
    ("both (AND)", "Shh AND limb"), ("either (OR)", "Shh OR Ihh"), ("group", "(Shh OR Ihh) AND limb"),
    ("must (+)", "+Shh limb"), ("NOT", "Shh NOT limb"), ("phrase", '"limb bud"'), ("title field", "title:BRCA2"),
    ("abstract field", "abstract:BRCA2"), ("year range", "Shh year:2004..2006"),
    ("section filter", "Shh section:results"),
    ("exclude a section", "Shh -section:methods"), ("gene mark", "gene:Shh"), ("lower-case and", "Shh and limb"),
    ("compound", "Wnt/β-catenin"), ("hyphen symbol", "Nkx2-5"), ("PubMed tag (unknown field)", "BRCA2[ti]"),
    ("truncation", "limb*"),
]


def craft_settings(data: Path, cluster_url: str | None, prefix: str) -> Settings:
    if cluster_url:
        return Settings(data_dir=data, cluster_url=cluster_url, cluster_index_prefix=prefix)
    return Settings(data_dir=data, engine="embedded")


def index(settings: Settings, craft: Path) -> float:
    t0 = time.process_time()
    paths = sorted((craft / "articles" / "nxml").glob("*.nxml"))
    index_corpus(paths, Services.open(settings), id_map=craft / "ids" / "craft-idmappings.txt", workers=1,
                 warn=lambda m: None)
    return round(time.process_time() - t0, 1)


def pmcids(svc: SearchService, query: str, syntax: str = "query", **kw: Any) -> list[str] | str:
    try:
        return [h.pmcid for h in svc.search_papers(query, syntax=syntax, limit=100, **kw).hits]  # type: ignore[arg-type]
    except FlysiftError as e:
        return f"{e.status} {e.code}" + (f" at {e.details['position'] + 1}" if "position" in e.details else "")


def checks(svc: SearchService) -> dict[str, Any]:
    shh, without, both = (pmcids(svc, q) for q in ("Shh", "Shh -limb", "Shh AND limb"))
    assert isinstance(shh, list) and isinstance(without, list) and isinstance(both, list)
    brca = pmcids(svc, "title:BRCA2")
    titles = {h.pmcid: h.title for h in svc.search_papers("BRCA2", syntax="query", limit=100).hits}
    return {"Shh": len(shh), "Shh -limb": len(without), "Shh AND limb": len(both),
            "split": sorted(set(without) | set(both)) == sorted(shh) and not set(without) & set(both),
            "Shh (plain, before)": len(pmcids(svc, "Shh -limb", "plain")),
            "Shh AND limb (plain, before)": len(pmcids(svc, "Shh AND limb", "plain")),
            "title:BRCA2": [(p, titles.get(p, "")) for p in brca] if isinstance(brca, list) else brca,
            "BRCA2 anywhere": len(titles), "unbalanced quote": pmcids(svc, 'Shh "limb bud')}


def forms(svc: SearchService) -> list[dict[str, Any]]:
    out = []
    for name, q in FORMS:
        lang, plain = pmcids(svc, q, "query"), pmcids(svc, q, "plain")
        out.append({"form": name, "query": q, "query language": len(lang) if isinstance(lang, list) else lang,
                    "plain text": len(plain) if isinstance(plain, list) else plain})
    return out


def hundred_queries(svc: SearchService) -> list[str]:
    """100 queries from CRAFT's text, deterministic: symbol-shaped tokens and words by document frequency."""
    eng = svc.engine()
    sym_df: Counter[str] = Counter()
    word_df: Counter[str] = Counter()
    bigrams: Counter[str] = Counter()
    for p, _title in eng.scan_passages():
        toks = symbol_tokens(p.text)
        for t in set(toks):
            if is_symbol_like(t) and len(t) >= 3 and any(c.isalpha() for c in t) and not t.isdigit():
                sym_df[t] += 1
            elif t.isalpha() and t.islower() and len(t) >= 5 and not is_stop_word(t):
                word_df[t] += 1
        low = [t for t in toks if t.isalpha() and t.islower() and len(t) >= 4 and not is_stop_word(t)]
        bigrams.update(f"{a} {b}" for a, b in zip(low, low[1:], strict=False))
    syms = [t for t, _ in sym_df.most_common(200) if not re.fullmatch(r"[A-Z]?[0-9.]+[A-Za-z]?", t)][:40]
    words = [w for w, _ in word_df.most_common(400)][100:130]
    pairs = [f"{a} {b}" for a, b in zip(words[:15], syms[:15], strict=True)]
    phrases = [f'"{b}"' for b, _ in bigrams.most_common(10)]
    ops = [f"{syms[0]} -{words[0]}", f"{syms[1]} AND {words[1]}", f"title:{words[2]}", f"({syms[2]} OR {syms[3]})",
           f"abstract:{words[3]} {syms[4]}"]
    return syms + words + pairs + phrases + ops


def compare(emb: SearchService, clu: SearchService, queries: list[str], spec: HighlightSpec) -> dict[str, Any]:
    """Fragments of every hit both engines return, for paper and passage search."""
    stats: dict[str, Any] = {"queries": len(queries), "paper hits compared": 0, "paper hits equal": 0,
                             "best passage equal": 0, "passage hits compared": 0, "passage hits equal": 0,
                             "differences": []}
    for q in queries:
        a = {h.pmcid: h for h in emb.search_papers(q, syntax="query", highlight=spec).hits}
        b = {h.pmcid: h for h in clu.search_papers(q, syntax="query", highlight=spec).hits}
        for pmcid in a.keys() & b.keys():
            stats["paper hits compared"] += 1
            same_best = a[pmcid].best_passage == b[pmcid].best_passage
            stats["best passage equal"] += same_best
            if a[pmcid].highlight == b[pmcid].highlight:
                stats["paper hits equal"] += 1
            elif len(stats["differences"]) < 20:
                stats["differences"].append({"query": q, "pmcid": pmcid, "best passage": [
                    a[pmcid].best_passage, b[pmcid].best_passage],
                    "fields": sorted(k for k in set(a[pmcid].highlight or {}) | set(b[pmcid].highlight or {})
                                     if (a[pmcid].highlight or {}).get(k) != (b[pmcid].highlight or {}).get(k))})
        if q.startswith("title:"):   # passages have no title (422 query_syntax)
            continue
        pa = {h.passage_id: h for h in emb.search_passages(q, syntax="query", highlight=spec).hits}
        pb = {h.passage_id: h for h in clu.search_passages(q, syntax="query", highlight=spec).hits}
        for pid in pa.keys() & pb.keys():
            stats["passage hits compared"] += 1
            stats["passage hits equal"] += pa[pid].highlight == pb[pid].highlight
    return stats


def highlight_cost(svc: SearchService, queries: list[str], spec: HighlightSpec, repeat: int = 3) -> dict[str, float]:
    out = {}
    for label, hl in (("without highlight", None), ("with highlight", spec)):
        t0 = time.process_time()
        for _ in range(repeat):
            for q in queries:
                svc.search_papers(q, syntax="query", highlight=hl)
        out[label] = round((time.process_time() - t0) * 1000 / (repeat * len(queries)), 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--craft", type=Path, default=Path("../shared/data/craft"))
    ap.add_argument("--cluster-url", default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/out/query_language"))
    args = ap.parse_args()
    spec = HighlightSpec()
    result: dict[str, Any] = {}
    prefix = f"fsbench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        emb = Services.open(craft_settings(Path(tmp) / "emb", None, prefix)).search
        result["index CPU s"] = {"embedded": index(emb.settings, args.craft)}
        result["checks"] = {"embedded": checks(emb)}
        result["forms"] = forms(emb)
        queries = hundred_queries(emb)
        result["queries"] = queries
        result["highlight CPU ms per paper search (embedded)"] = highlight_cost(emb, queries, spec)
        if args.cluster_url:
            clu = Services.open(craft_settings(Path(tmp) / "clu", args.cluster_url, prefix)).search
            try:
                result["index CPU s"]["cluster"] = index(clu.settings, args.craft)
                result["checks"]["cluster"] = checks(clu)
                result["forms (cluster)"] = forms(clu)
                result["highlight: embedded vs cluster"] = compare(emb, clu, queries, spec)
            finally:
                eng = clu.engine()
                t = eng.t  # type: ignore[attr-defined]
                names = list(t.request("GET", f"/{prefix}-*", params={"expand_wildcards": "all"}))
                if names:
                    t.request("DELETE", "/" + ",".join(names))
                for tpl in t.request("GET", "/_index_template").get("index_templates", []):
                    if tpl["name"].startswith(prefix):
                        t.request("DELETE", f"/_index_template/{tpl['name']}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(json.dumps({k: v for k, v in result.items() if k != "queries"}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
