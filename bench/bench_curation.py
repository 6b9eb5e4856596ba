"""Curation benchmarks: the lexical curator's term recogniser on real text (CRAFT) and the service under a batch of
lexical agents. Numbers go to docs/curation.md.

    python bench/bench_curation.py craft [--url URL] [--split test] [--out bench/results/curation_craft.json]
    python bench/bench_curation.py batch --genes 100 --concurrency 16 [--out bench/results/curation_batch.json]

``craft`` indexes the 97 CRAFT articles and GO (../shared/data), serves them, reads every article of the split
through the API, has the service recognise GO terms in all of its text (``POST /v1/terms/recognise``, the lexical
curator's recogniser, with its molecular-function rule) and scores per-article GO-id sets per aspect against CRAFT's
gold (alt ids mapped to primary ids through the API): macro (the mean over articles where the aspect has a gold or a
predicted term; an article with neither is undefined, not a perfect 1) and micro (pooled counts), and mention spans
with their ids after aligning the service's paragraphs to CRAFT's plain text, to which CRAFT's offsets refer. Nothing
is fitted to the gold; develop on ``--split train``, report ``test``.
``batch`` generates a sample corpus about ``--genes`` genes, serves it and runs ``flysift curate batch --agent
lexical``; then reads the traces for per-tool service latency.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import click  # noqa: E402

from bench.common import flysift_command, free_port, latency_summary, machine, served, write_json  # noqa: E402
from curation.lexical import paper_units  # noqa: E402
from indexer.synthetic import read_genes_tsv, write_genes_tsv  # noqa: E402
from search.client import Client, NotFoundError  # noqa: E402
from search.core.models import Gene  # noqa: E402
from search.ontology.recognise import sentences  # noqa: E402
from search.text.lexicon import Lexicon  # noqa: E402

SHARED = Path(os.environ.get("FLYSIFT_SHARED_DATA", REPO.parent / "shared" / "data"))
CRAFT = SHARED / "craft"
ASPECTS = {"P": "go_bp", "C": "go_cc", "F": "go_mf"}


@dataclass(frozen=True)
class Mention:
    aspect: str
    start: int
    end: int
    pieces: int       # CRAFT's discontinuous mentions have several; a contiguous prediction never equals them
    concept: str


def _gold(split: str) -> tuple[list[str], dict[str, list[Mention]], dict[str, str]]:
    """Article ids of the split, gold GO mentions per article (offsets into CRAFT's plain text), PMID -> PMCID."""
    ids = (CRAFT / "ids" / f"craft-ids-{split}.txt").read_text().split()
    pmcid = {}
    for line in (CRAFT / "ids" / "craft-idmappings.txt").read_text().splitlines()[1:]:
        _, pmc, pmid = line.split("\t")
        pmcid[pmid.strip()] = pmc.strip()
    gold: dict[str, list[Mention]] = defaultdict(list)
    for aspect, name in ASPECTS.items():
        with open(CRAFT / "annotations" / f"{name}.jsonl", encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                if row["concept_id"].startswith("GO:"):
                    gold[row["article_id"]].append(Mention(aspect, row["start"], row["end"], len(row["spans"]),
                                                           row["concept_id"]))
    return ids, gold, pmcid


def _f1(pred: set, gold: set) -> tuple[float, float, float] | None:
    """Precision, recall and F1 of one article, or None when it has neither a gold nor a predicted term (undefined:
    counting it as a perfect 1 made MF's macro F1 look like 0.033 where nothing was right)."""
    if not pred and not gold:
        return None
    tp = len(pred & gold)
    p = tp / len(pred) if pred else 0.0
    r = tp / len(gold) if gold else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def align(units: list[str], txt: str) -> list[list[tuple[int, int, int]]]:
    """Where each paragraph the service returned sits in CRAFT's plain text: per paragraph, pieces ``(start in the
    paragraph, start in the text, length)``. A paragraph found whole is one piece; otherwise each of its sentences
    found verbatim is one (CRAFT's text lays out abstracts and captions differently); text found nowhere has none."""
    out: list[list[tuple[int, int, int]]] = []
    pos = 0
    for text in units:
        at = txt.find(text, pos)
        at = at if at >= 0 else txt.find(text)
        if at >= 0:
            out.append([(0, at, len(text))])
            pos = at + len(text)
            continue
        pieces = []
        for s, e in sentences(text):
            sent = text[s:e].strip()
            if len(sent) < 20:
                continue
            s += text[s:e].index(sent)
            found = txt.find(sent, pos)
            found = found if found >= 0 else txt.find(sent)
            if found >= 0:
                pieces.append((s, found, len(sent)))
        out.append(pieces)
    return out


def _project(pieces: list[tuple[int, int, int]], start: int, end: int) -> tuple[int, int] | None:
    for ps, ts, n in pieces:
        if ps <= start and end <= ps + n:
            return ts + start - ps, ts + end - ps
    return None


def craft_scores(client: Client, split: str) -> dict:
    """Per aspect: per-article GO-id sets (precision/recall/F1, macro over articles, and micro counts) and mention
    spans with their ids (exact and overlapping), over the recogniser's matches in every paragraph of each article
    as the service returns it, mapped to CRAFT's offsets by :func:`align`."""
    t0 = time.perf_counter()
    client.recognise_terms(["warm up: the service builds its recogniser on the first call"], ontologies=["go"])
    dict_s = time.perf_counter() - t0
    ids, gold, pmcid = _gold(split)
    primary: dict[str, str | None] = {}

    def canonical(term_id: str) -> str | None:
        if term_id not in primary:
            try:
                primary[term_id] = client.get_term(term_id).id
            except NotFoundError:
                primary[term_id] = None
        return primary[term_id]

    per: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    micro: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    spans: dict[str, Counter[str]] = defaultdict(Counter)
    t1 = time.perf_counter()
    for art in ids:
        units = [u.text for page in client.iter_paper_pages(pmcid[art], max_chars=1_000_000) for u in paper_units(page)]
        txt = (CRAFT / "articles" / "txt" / f"{art}.txt").read_text(encoding="utf-8")
        pieces = align(units, txt)
        covered = sorted((ts, ts + n) for ps in pieces for _, ts, n in ps)
        found: dict[str, set[str]] = defaultdict(set)
        predicted: dict[str, set[tuple[int, int, str]]] = defaultdict(set)
        recognised = client.recognise_terms(units, ontologies=["go"]).mentions
        for text_pieces, matches in zip(pieces, recognised, strict=True):
            for m in matches:
                if m.aspect:
                    found[m.aspect].add(m.term_id)
                    at = _project(text_pieces, m.start, m.end)
                    if at:
                        predicted[m.aspect].add((*at, m.term_id))
                    else:
                        spans[m.aspect]["predicted_unaligned"] += 1
        for aspect in ASPECTS:
            mentions = [(g, canonical(g.concept)) for g in gold[art] if g.aspect == aspect]
            g_ids = {c for _, c in mentions if c}
            scores = _f1(found[aspect], g_ids)
            if scores is not None:
                per[aspect].append(scores)
            micro[aspect][0] += len(found[aspect] & g_ids)
            micro[aspect][1] += len(found[aspect])
            micro[aspect][2] += len(g_ids)
            gold_spans = {(g.start, g.end, c) for g, c in mentions if c}
            contiguous = {(g.start, g.end, c) for g, c in mentions if c and g.pieces == 1}
            pred = predicted[aspect]
            sc = spans[aspect]
            sc["gold"] += len(mentions)
            sc["gold_in_aligned_text"] += sum(any(a <= g.start and g.end <= b for a, b in covered) for g, _ in mentions)
            sc["predicted"] += len(pred)
            sc["exact_tp"] += len(pred & contiguous)
            sc["overlap_tp_pred"] += sum(any(c == i and s < ge and gs < e for gs, ge, c in gold_spans)
                                         for s, e, i in pred)
            sc["overlap_tp_gold"] += sum(any(c == i and s < ge and gs < e for s, e, i in pred)
                                         for gs, ge, c in gold_spans)
    out: dict = {"split": split, "articles": len(ids), "recogniser_build_s": round(dict_s, 1),
                 "recognise_s": round(time.perf_counter() - t1, 1), "aspects": {}, "spans": {}}
    for aspect, name in ASPECTS.items():
        rows = per[aspect]
        tp, npred, ngold = micro[aspect]

        def mean(k: int, rows: list = rows) -> float | None:
            return round(sum(r[k] for r in rows) / len(rows), 4) if rows else None

        out["aspects"][name] = {
            "precision": mean(0), "recall": mean(1), "f1": mean(2), "articles_scored": len(rows),
            "micro_precision": round(tp / npred, 4) if npred else None,
            "micro_recall": round(tp / ngold, 4) if ngold else None,
            "micro_f1": round(2 * tp / (npred + ngold), 4) if npred + ngold else None, "tp": tp,
            "predicted": npred, "gold": ngold}
        sc = spans[aspect]
        ep, er = sc["exact_tp"] / max(1, sc["predicted"]), sc["exact_tp"] / max(1, sc["gold"])
        op, orr = sc["overlap_tp_pred"] / max(1, sc["predicted"]), sc["overlap_tp_gold"] / max(1, sc["gold"])
        out["spans"][name] = {**sc, "exact_f1": round(2 * ep * er / (ep + er), 4) if ep + er else 0.0,
                              "exact_precision": round(ep, 4), "exact_recall": round(er, 4),
                              "overlap_f1": round(2 * op * orr / (op + orr), 4) if op + orr else 0.0}
    return out


@click.group()
def main() -> None:
    """Curation benchmarks (see the module docstring)."""


@main.command("craft")
@click.option("--url", default=None, help="A running service that already serves CRAFT and GO (else built here)")
@click.option("--split", type=click.Choice(("train", "dev", "test")), default="test", show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=REPO / "bench" / "results" / "curation_craft.json")
def craft_cmd(url: str | None, split: str, out: Path) -> None:
    if url:
        result = craft_scores(Client(url, timeout=300), split)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "data"
            fs = flysift_command()
            subprocess.run([*fs, "index", "corpus", *map(str, sorted((CRAFT / "articles" / "nxml").glob("*.nxml"))),
                            "--id-map", str(CRAFT / "ids" / "craft-idmappings.txt"), "--data-dir", str(data)],
                           check=True)
            subprocess.run([*fs, "index", "ontology", str(SHARED / "ontologies" / "go-basic.obo.gz"), "--name", "go",
                            "--data-dir", str(data)], check=True)
            port = free_port()
            with served([*fs, "serve", "--data-dir", str(data), "--port", str(port)],
                        f"http://127.0.0.1:{port}/v1/health"):
                result = craft_scores(Client(f"http://127.0.0.1:{port}", timeout=300), split)
    result["machine"] = machine()
    write_json(out, result)
    click.echo(json.dumps({"ids": result["aspects"], "spans": result["spans"]}, indent=1))


def trace_latencies(run_dir: Path) -> dict[str, dict[str, float]]:
    """Service latency per tool over every trace of a run directory (as the service recorded it)."""
    by_tool: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    for path in sorted((run_dir / "traces").glob("*.json")):
        for ev in json.loads(path.read_text())["events"]:
            by_tool[ev["tool"]].append(ev["latency_ms"])
            if ev.get("error"):
                errors[ev["error"].get("code", "?")] += 1
    out: dict[str, dict[str, float]] = {t: latency_summary(v) for t, v in sorted(by_tool.items())}
    out["_errors"] = dict(errors)
    return out


def gene_table(n: int, path: Path) -> Path:
    """A sample-corpus gene list of FlyAOC's first ``n`` benchmark genes, with the names its ground truth holds, so
    the generated corpus is about the real genes and its run scores against the real ground truth (plumbing only:
    the generated text carries no GO/anatomy facts)."""
    genes = []
    with open(SHARED / "flyaoc" / "data" / "ground_truth_top100.jsonl", encoding="utf-8") as fh:
        for line in fh:
            g = json.loads(line)
            syn = g["task3_synonyms"]
            genes.append(Gene(id=g["gene_id"], symbol=g["gene_symbol"], fullname=syn.get("current_fullname"),
                              symbol_synonyms=[s["synonym"] for s in syn["symbol_synonyms"]],
                              fullname_synonyms=[s["synonym"] for s in syn["fullname_synonyms"]]))
    write_genes_tsv(genes[:n], path)
    return path


@main.command("batch")
@click.option("--genes", "n_genes", type=int, default=100, show_default=True)
@click.option("--papers", "n_papers", type=int, default=2000, show_default=True)
@click.option("--concurrency", type=int, default=16, show_default=True)
@click.option("--budget", type=int, default=16, show_default=True)
@click.option("--keep-run", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Copy the run directory here (to score it with flysift eval flyaoc / FlyAOC's evaluator)")
@click.option("--port", type=int, default=None, help="Port of the service this runs (default: a free one)")
@click.option("--out", type=click.Path(path_type=Path), default=REPO / "bench" / "results" / "curation_batch.json")
def batch_cmd(n_genes: int, n_papers: int, concurrency: int, budget: int, keep_run: Path | None, port: int | None,
              out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        data, corpus = tmpd / "data", tmpd / "corpus"
        genes_tsv = gene_table(n_genes, tmpd / "genes.tsv")
        fs = flysift_command()
        subprocess.run([*fs, "sample", "--papers", str(n_papers), "--genes", str(genes_tsv), "--out", str(corpus)],
                       check=True)
        subprocess.run([*fs, "index", "corpus", str(corpus / "corpus.jsonl"), "--data-dir", str(data)], check=True)
        Lexicon(read_genes_tsv(genes_tsv)).save(data / "lexicon.tsv")
        for name, obo in (("go", "go-basic.obo.gz"), ("fbbt", "fbbt-2013-07-26.obo"), ("fbdv", "fbdv.obo")):
            subprocess.run([*fs, "index", "ontology", str(SHARED / "ontologies" / obo), "--name", name,
                            "--data-dir", str(data)], check=True)
        port = port or free_port()
        url = f"http://127.0.0.1:{port}"
        gene_list = tmpd / "genes.txt"
        gene_list.write_text("".join(f"{g.id}\t{g.symbol}\n" for g in read_genes_tsv(genes_tsv)))
        with served([*fs, "serve", "--data-dir", str(data), "--port", str(port)], f"{url}/v1/health"):
            t_dict = time.perf_counter()  # the service builds its recogniser once, on the first call
            Client(url, timeout=300).recognise_terms(["warm up"], task="go")
            dict_s = time.perf_counter() - t_dict
            run_dir = tmpd / "run"
            t0 = time.perf_counter()
            subprocess.run([*fs, "curate", "batch", "--url", url, "--genes", str(gene_list), "--agent", "lexical",
                            "--budget", str(budget), "--concurrency", str(concurrency), "--run-dir", str(run_dir),
                            "--allow-failures"],
                           check=True)
            wall = time.perf_counter() - t0
            summary = json.loads((run_dir / "summary.json").read_text())
            result = {"genes": n_genes, "papers": n_papers, "concurrency": concurrency, "budget": budget,
                      "wall_s": round(wall, 1), "genes_per_min": round(60 * n_genes / wall, 1),
                      "recogniser_build_s": round(dict_s, 1),
                      "summary": summary, "latency_by_tool": trace_latencies(run_dir), "machine": machine()}
            if keep_run:
                shutil.copytree(run_dir, keep_run, dirs_exist_ok=True)
    write_json(out, result)
    click.echo(json.dumps({k: v for k, v in result.items() if k != "summary"}, indent=1))


def demo_truth(answer_key: dict[str, list[str]], genes_tsv: Path, path: Path) -> Path:
    """A FlyAOC-shaped ground truth for a sample corpus: each gene "cites" the papers the generator wrote about it
    (one placeholder GO row per paper, in corpus), so coverage can be walked through on any corpus."""
    genes = {g.id: g for g in read_genes_tsv(genes_tsv)}
    with open(path, "w", encoding="utf-8") as fh:
        for gid, pmcids in answer_key.items():
            if gid not in genes:
                continue
            rows = [{"go_id": "GO:0008150", "qualifier": "involved_in", "is_negated": False, "aspect": "P",
                     "evidence_code": "IDA", "reference": "", "in_corpus": True, "pmcid": p} for p in pmcids]
            fh.write(json.dumps({"gene_id": gid, "gene_symbol": genes[gid].symbol, "task1_function": rows,
                                 "task2_expression": [], "task3_synonyms": {"current_fullname": genes[gid].fullname,
                                                                            "fullname_synonyms": [],
                                                                            "symbol_synonyms": []}}) + "\n")
    return path


@main.command("coverage-demo")
@click.option("--genes", "n_genes", type=int, default=20, show_default=True)
@click.option("--papers", "n_papers", type=int, default=400, show_default=True)
@click.option("--drop-every", type=int, default=10, show_default=True,
              help="Leave every n-th paper out of the index: cited papers the corpus lacks")
@click.option("--budget", type=int, default=8, show_default=True)
@click.option("--search-limit", type=int, default=20, show_default=True, help="Papers the lexical agent looks at")
@click.option("--port", type=int, default=None, help="Port of the service this runs (default: a free one)")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Keeps the corpus, the ground truth, the run and the coverage report")
def coverage_demo_cmd(n_genes: int, n_papers: int, drop_every: int, budget: int, search_limit: int,
                      port: int | None, out: Path) -> None:
    """Coverage on a corpus missing some cited papers: a sample corpus about FlyAOC's first genes with every n-th
    paper left out of the index, a lexical run over it, and ``flysift coverage`` of that run and of the ceiling
    (its output is the walkthrough in docs/curation.md)."""
    out.mkdir(parents=True, exist_ok=True)
    data, corpus = out / "data", out / "corpus"
    genes_tsv = gene_table(n_genes, out / "genes.tsv")
    fs = flysift_command()
    subprocess.run([*fs, "sample", "--papers", str(n_papers), "--genes", str(genes_tsv), "--out", str(corpus)],
                   check=True)
    lines = (corpus / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    kept = out / "indexed.jsonl"
    kept.write_text("".join(x + "\n" for n, x in enumerate(lines) if (n + 1) % drop_every), encoding="utf-8")
    subprocess.run([*fs, "index", "corpus", str(kept), "--data-dir", str(data)], check=True)
    Lexicon(read_genes_tsv(genes_tsv)).save(data / "lexicon.tsv")
    for name, obo in (("go", "go-basic.obo.gz"), ("fbbt", "fbbt-2013-07-26.obo"), ("fbdv", "fbdv.obo")):
        subprocess.run([*fs, "index", "ontology", str(SHARED / "ontologies" / obo), "--name", name,
                        "--data-dir", str(data)], check=True)
    truth = demo_truth(json.loads((corpus / "answer_key.json").read_text()), genes_tsv, out / "ground_truth.jsonl")
    gene_list = out / "genes.txt"
    gene_list.write_text("".join(f"{g.id}\t{g.symbol}\n" for g in read_genes_tsv(genes_tsv)))
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    with served([*fs, "serve", "--data-dir", str(data), "--port", str(port)], f"{url}/v1/health"):
        subprocess.run([*fs, "curate", "batch", "--url", url, "--genes", str(gene_list), "--budget", str(budget),
                        "-o", f"search_limit={search_limit}", "--run-dir", str(out / "run"), "--allow-failures"],
                       check=True)
        for extra in (["--run-dir", str(out / "run")], ["--ceiling"]):
            subprocess.run([*fs, "coverage", "--ground-truth", str(truth), "--url", url, "--out",
                            str(out / ("coverage" if "--run-dir" in extra else "ceiling")), *extra], check=True)


if __name__ == "__main__":
    main()
