"""Concept search (issue #26 item 8): what ``flysift index concepts`` costs and what ``term:`` finds, in one run.

1. **Throughput and growth on a generated corpus** (``indexer.synthetic``, ``--papers`` × ``--words``): the concept
   index of GO, FBbt and FBdv (../shared/data/ontologies) built with 1 worker and with 2 (both cores), passages per
   second wall and CPU, and its size beside the collection's index, in the embedded engine and, with
   ``--cluster-url``, on an OpenSearch node (2 workers).
2. **CRAFT** (97 articles from JATS): the same figures, and how much of CRAFT's gold GO annotation ``term:`` finds:
   for each article and each GO id its gold annotates (alt ids resolved), whether ``term:ID`` finds the article,
   exactly (a mention of that id) and as ``term:`` searches (the id or a descendant); beside it the concept index's
   own article-level GO ids scored as the lexical curator is (docs/curation.md: precision, recall, F1 per aspect,
   micro over the article-term pairs and macro over articles), on CRAFT's test split (30 articles) and on all 97.

usage: python bench/bench_concepts.py [--shared ../shared/data] [--papers 2000] [--words 1500] [--cluster-url URL]

Wall and CPU seconds (CPU of this process and its workers); the machine is shared, so times are indicative only.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import folder_terms  # noqa: E402
from indexer.concepts import index_concepts  # noqa: E402
from indexer.pipeline import index_corpus  # noqa: E402
from indexer.synthetic import SyntheticConfig, generate  # noqa: E402
from search.core.config import Settings  # noqa: E402
from search.ontology.model import Ontology  # noqa: E402
from search.services import Services  # noqa: E402
from search.text.passages import split_passages  # noqa: E402

ASPECTS = {"P": "go_bp", "C": "go_cc", "F": "go_mf"}
ONTOLOGIES = {"go": "go-basic.obo.gz", "fbbt": "fbbt-2013-07-26.obo", "fbdv": "fbdv.obo"}


def cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def ontologies(shared: Path, data: Path, cache: Path) -> dict[str, Any]:
    """GO, FBbt and FBdv saved where ``index_concepts`` reads them (terms not written to a term index: not needed)."""
    t0 = time.perf_counter()
    svc = folder_terms(data)
    out = {}
    for name, file in ONTOLOGIES.items():
        ont = Ontology.load(shared / "ontologies" / file, name, cache_dir=cache)
        svc.index_ontology(ont, lambda _n, terms: sum(1 for _ in terms))
        out[name] = len(ont)
    return {"terms": out, "load_s": round(time.perf_counter() - t0, 1)}


def share(ontology_dir: Path, data: Path) -> None:
    """The ontology files of one data directory, linked into another (each run gets a fresh data directory)."""
    (data / "ontologies").mkdir(parents=True, exist_ok=True)
    for f in ontology_dir.iterdir():
        target = data / "ontologies" / f.name
        if f.is_file() and not target.exists():
            os.link(f, target)


def run_concepts(settings: Settings, collection: str, workers: int) -> dict[str, Any]:
    w, c = time.perf_counter(), cpu()
    meta = index_concepts(settings, collection, workers=workers, resume=False)
    wall, used = time.perf_counter() - w, cpu() - c
    st = Services.open(settings).engine(collection).stats()
    return {"workers": meta["workers"], "passages": meta["passages_read"], "papers": meta["papers"],
            "mentions": meta["mentions"], "terms": meta["terms"], "wall_s": round(wall, 1), "cpu_s": round(used, 1),
            "setup_s": meta["setup_s"], "recognise_s": meta["recognise_s"],
            "passages_per_s (recognising)": meta["passages_per_s"],
            "passages_per_cpu_s (whole run)": round(meta["passages_read"] / used, 1) if used else None,
            "concepts_MiB": round(meta["bytes"] / 2**20, 2), "index_MiB": round(st.index_bytes / 2**20, 2),
            "growth_%": round(100 * meta["bytes"] / st.index_bytes, 1)}


def generated(settings: Settings, papers: int, words: int) -> int:
    eng = Services.open(settings).engine("generated")
    build = eng.open_build("bench-concepts", resume=False)
    n = 0
    for p in generate(SyntheticConfig(n_papers=papers, words_per_paper=words, seed=7)):
        passages = split_passages(p)
        n += len(passages)
        build.add(p, passages)
    build.commit({})
    build.publish()
    return n


def craft_gold(craft: Path) -> tuple[dict[str, list[str]], dict[str, dict[str, set[str]]]]:
    """Splits (article pmcids) and gold GO ids per article and aspect."""
    pmcid = {}
    for line in (craft / "ids" / "craft-idmappings.txt").read_text().splitlines()[1:]:
        _, pmc, pmid = line.split("\t")
        pmcid[pmid.strip()] = pmc.strip()
    splits = {s: [pmcid[i] for i in (craft / "ids" / f"craft-ids-{s}.txt").read_text().split()]
              for s in ("train", "dev", "test")}
    splits["all"] = sorted(set(pmcid.values()))
    gold: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for aspect, name in ASPECTS.items():
        with open(craft / "annotations" / f"{name}.jsonl", encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                if row["concept_id"].startswith("GO:"):
                    gold[row["pmcid"]][aspect].add(row["concept_id"])
    return splits, gold


def craft_scores(settings: Settings, craft: Path) -> dict[str, Any]:
    splits, gold = craft_gold(craft)
    services = Services.open(settings)
    go, eng = services.terms.ontology("go"), services.engine("craft")
    resolve = lambda i: go.resolve(i) or i  # noqa: E731
    found: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))   # article -> aspect -> ids
    descended: dict[tuple[str, str], bool] = {}
    for article in splits["all"]:
        for aspect in ASPECTS:
            for g in gold[article][aspect]:
                hit = eng.concept_counts("papers", [resolve(g)])
                descended[(article, resolve(g))] = article in hit
    mentioned = _mentioned_go(eng, splits["all"])
    for article, ids in mentioned.items():
        for i in ids:
            term = go.get(i)
            if term is not None and term.aspect:
                found[article][term.aspect].add(i)
    out: dict[str, Any] = {}
    for split in ("test", "all"):
        arts = splits[split]
        rows = {}
        for aspect in ASPECTS:
            pairs = [(a, resolve(g)) for a in arts for g in gold[a][aspect]]
            exact = sum(1 for a, g in pairs if g in found[a][aspect])
            desc = sum(1 for p in pairs if descended.get(p))
            tp = fp = fn = 0
            macro = []
            for a in arts:
                pred = found[a][aspect]
                true = {resolve(g) for g in gold[a][aspect]}
                t = len(pred & true)
                tp, fp, fn = tp + t, fp + len(pred - true), fn + len(true - pred)
                if pred or true:
                    p = t / len(pred) if pred else 0.0
                    r = t / len(true) if true else 0.0
                    macro.append(2 * p * r / (p + r) if p + r else 0.0)
            p = tp / (tp + fp) if tp + fp else 0.0
            r = tp / (tp + fn) if tp + fn else 0.0
            rows[aspect] = {"gold pairs": len(pairs), "term: exact": round(exact / len(pairs), 3) if pairs else None,
                            "term: with descendants": round(desc / len(pairs), 3) if pairs else None,
                            "micro P": round(p, 3), "micro R": round(r, 3),
                            "micro F1": round(2 * p * r / (p + r), 3) if p + r else 0.0,
                            "macro F1": round(sum(macro) / len(macro), 3) if macro else None,
                            "articles": len(macro)}
        out[split] = rows
    return out


def _mentioned_go(eng: Any, articles: list[str]) -> dict[str, set[str]]:
    """Article -> the GO ids the concept index holds as mentioned (their own terms, not the ancestors)."""
    return {a: {m.term_id for m in eng.paper_concepts(a) if m.term_id.startswith("GO:")} for a in articles}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=Path("../shared/data"))
    ap.add_argument("--papers", type=int, default=2000)
    ap.add_argument("--words", type=int, default=1500)
    ap.add_argument("--cluster-url", default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/out/concepts"))
    args = ap.parse_args()
    result: dict[str, Any] = {"papers": args.papers, "words": args.words}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "onto"
        result["ontologies"] = ontologies(args.shared, base, Path(tmp) / "cache")
        print(result, flush=True)
        emb = Settings(data_dir=Path(tmp) / "emb", engine="embedded")
        share(base / "ontologies", emb.data_dir)
        result["generated passages"] = generated(emb, args.papers, args.words)
        result["generated, embedded"] = [run_concepts(emb, "generated", w) for w in (1, 2)]
        print(result["generated, embedded"], flush=True)
        craft = args.shared / "craft"
        index_corpus(sorted((craft / "articles" / "nxml").glob("*.nxml")), Services.open(emb), collection="craft",
                     workers=1,
                     id_map=craft / "ids" / "craft-idmappings.txt", warn=lambda m: None)
        result["craft, embedded"] = run_concepts(emb, "craft", 2)
        result["craft recall"] = craft_scores(emb, craft)
        print(result["craft, embedded"], result["craft recall"], flush=True)
        if args.cluster_url:
            prefix = f"fsbench-{uuid.uuid4().hex[:8]}"
            clu = Settings(data_dir=Path(tmp) / "clu", cluster_url=args.cluster_url, cluster_index_prefix=prefix)
            share(base / "ontologies", clu.data_dir)
            try:
                generated(clu, args.papers, args.words)
                result["generated, cluster"] = run_concepts(clu, "generated", 2)
                print(result["generated, cluster"], flush=True)
            finally:
                t = Services.open(clu).engine().t  # type: ignore[attr-defined]
                names = list(t.request("GET", f"/{prefix}-*", params={"expand_wildcards": "all"}))
                if names:
                    t.request("DELETE", "/" + ",".join(names))
                for tpl in t.request("GET", "/_index_template").get("index_templates", []):
                    if tpl["name"].startswith(prefix):
                        t.request("DELETE", f"/_index_template/{tpl['name']}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
