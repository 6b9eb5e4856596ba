"""A small site for the workbench tests: the fixture corpus plus a paper whose title holds markup, the mini GO
ontology, a one-gene lexicon, a FlyAOC ground truth, two teams' sessions (one refused by its budget) and a curation
run directory with a prediction and its trace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from search.core.config import Settings
from search.core.models import Gene, Paper, Section
from search.engines.embedded.terms import TermIndex
from search.ontology.model import Ontology
from search.text.lexicon import Lexicon

from helpers import PAPERS, build_index, term_service

FIX = Path(__file__).parents[1] / "fixtures"
XSS_TITLE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> Dl & "N"'
XSS_PAPER = Paper(pmcid="PMC100099", year=2020, journal="<b>J</b>", title=XSS_TITLE,
                  abstract="Dl binds N; the title of this paper is hostile markup.",
                  sections=[Section(type="RESULTS", title="<i>Results</i>",
                                    paragraphs=["Dl is expressed in the wing margin </p><script>x()</script>."])])
DL = Gene(id="FBgn0000463", symbol="Dl", fullname="Delta", symbol_synonyms=["Delta-like"],
          fullname_synonyms=["Delta ligand"])



def ground_truth_line(gene_id: str, go: list[tuple[str, str | None]]) -> str:
    rows = [{"go_id": g, "qualifier": "involved_in", "is_negated": False, "aspect": "P", "evidence_code": "IDA",
             "reference": "PMID:1", "in_corpus": pmcid is not None, "pmcid": pmcid} for g, pmcid in go]
    return json.dumps({"gene_id": gene_id, "gene_symbol": "Dl", "task1_function": rows, "task2_expression": [],
                       "task3_synonyms": {"current_fullname": "Delta",
                                          "fullname_synonyms": [{"synonym": "Delta ligand", "in_corpus": True}],
                                          "symbol_synonyms": [{"synonym": "Dl-1", "in_corpus": True},
                                                              {"synonym": "DL2", "in_corpus": False}]}})


def build_site(root: Path, go_ids: list[str]) -> Settings:
    """The data directory, ground truth and runs directory; ``go_ids``: three ids of the indexed ontology."""
    data = root / "data"
    build_index(data, [*PAPERS, XSS_PAPER])
    Lexicon([DL]).save(data / "lexicon.tsv")
    gt = root / "ground_truth.jsonl"
    gt.write_text(ground_truth_line(DL.id, [(go_ids[0], "PMC100001"), (go_ids[1], "PMC100003"),
                                            (go_ids[2], "PMC100004")]) + "\n")
    runs = root / "runs"
    run = runs / "lexical-2026"
    (run / "predictions").mkdir(parents=True)
    (run / "traces").mkdir()
    (run / "run.json").write_text(json.dumps({"config": {"agent": "lexical", "budget": 4}, "created_at": 1.7e9}))
    output = {"gene_id": DL.id, "gene_symbol": "Dl",
              "task1_function": [
                  {"go_id": go_ids[0], "qualifier": "involved_in", "aspect": "P", "is_negated": False,
                   "evidence": {"pmcid": "PMC100001", "text": "Loss of Dl abolishes E(spl)m8-HLH expression"}},
                  {"go_id": "GO:0000000", "qualifier": "involved_in", "aspect": "P", "is_negated": False}],
              "task2_expression": [], "task3_synonyms": {"fullname_synonyms": ["delta ligand"],
                                                         "symbol_synonyms": ["Notch ligand"]}}
    (run / "predictions" / f"{DL.id}.json").write_text(json.dumps(
        {"output": output, "usage": {"papers_read": 1, "turns": 3, "input_tokens": 1200, "output_tokens": 300,
                                     "cost_usd": 0.0}, "error": None, "gene_symbol": "Dl"}))
    events: list[dict[str, Any]] = [
        {"seq": 1, "time": 1.7e9, "tool": "search_papers", "arguments": {"body": {"query": "Dl"}},
         "returned_ids": ["PMC100001", "PMC100003"], "latency_ms": 1.0, "status": 200},
        {"seq": 2, "time": 1.7e9, "tool": "get_paper", "arguments": {"pmcid": "PMC100001"},
         "returned_ids": ["PMC100001"], "latency_ms": 1.0, "status": 200}]
    (run / "traces" / f"{DL.id}.json").write_text(json.dumps({"session_id": "ses_fromrun", "events": events}))
    (runs / "not-a-run").mkdir()
    return Settings(data_dir=data, ground_truth=gt, runs_dir=runs)


def index_go(data: Path, cache: Path) -> Ontology:
    ont = Ontology.load(FIX / "mini.obo", "go", cache_dir=cache)
    term_service(data).index_ontology(ont, TermIndex(data).write)
    return ont


def parent_child(ont: Ontology) -> tuple[str, str, str]:
    """A live term with a parent and a child over is_a: (parent, term, child)."""
    for t in ont.terms():
        if t.obsolete:
            continue
        parents = t.parents.get("is_a") or []
        kids = ont.children(t.id, ["is_a"])
        if parents and kids:
            return parents[0], t.id, kids[0]
    raise AssertionError("the fixture ontology has no three-level is_a chain")
