"""One home for FlyAOC's files: the ground-truth reader every user shares (evaluator, lexicon, sessions), the id
shapes, and the prediction parser behind the evaluator."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from eval.flyaoc import load_ground_truth as eval_truth
from search.core.errors import InputError
from search.flyaoc import cited_pmcids, load_ground_truth, parse_prediction, read_ground_truth
from search.flyaoc.ids import FBBT_ID, GENE_ID, GO_ID, PMCID, TERM_ID, well_formed
from search.text.lexicon import Lexicon

GROUND_TRUTH = Path(__file__).parents[1] / "fixtures" / "eval_flyaoc" / "ground_truth.jsonl"


def test_records_keep_rows_in_file_order():
    genes = load_ground_truth(GROUND_TRUTH)
    assert list(genes) == ["FBgn0000001", "FBgn0000002", "FBgn0000003", "FBgn0000004", "FBgn0000005"]
    a = genes["FBgn0000001"]
    assert (a.gene_symbol, a.current_fullname, a.record) == ("aa", "x", 1)
    assert [r.pmcid for r in a.go] == ["PMC1", "PMC2", "PMC1", None, "PMC3"]
    assert [s.synonym for s in a.symbol_synonyms] == ["AA", "aa1", "aa-2"]
    assert a.cited_pmcids == ("PMC1", "PMC2", "PMC3", "PMC4")     # GO rows first, each paper once


def test_every_user_reads_the_same_file_the_same_way(tmp_path: Path):
    cited = cited_pmcids(GROUND_TRUTH)                               # sessions' coverage
    truth = eval_truth(GROUND_TRUTH)                                 # the evaluator
    assert {g: set(p) for g, p in cited.items()} == {g: set(t.cited_pmcids) for g, t in truth.items()}
    lex = Lexicon.load([GROUND_TRUTH])                               # the lexicon
    assert lex.get("FBgn0000001").symbol_synonyms == ["AA", "aa1", "aa-2"] and lex.get("FBgn0000001").fullname == "x"
    packed = tmp_path / "ground_truth.jsonl.gz"
    packed.write_bytes(gzip.compress(GROUND_TRUTH.read_bytes()))
    assert [g.gene_id for g in read_ground_truth(packed)] == list(truth)


def test_a_broken_line_names_file_line_and_field(tmp_path: Path):
    row = json.loads(GROUND_TRUTH.read_text().splitlines()[0])
    del row["task3_synonyms"]["symbol_synonyms"][1]["in_corpus"]
    bad = tmp_path / "gt.jsonl"
    bad.write_text("\n" + json.dumps(row) + "\n")
    with pytest.raises(InputError) as e:
        list(read_ground_truth(bad))
    assert (e.value.source, e.value.record) == (str(bad), 2)
    assert e.value.field == "task3_synonyms.symbol_synonyms[1].in_corpus"
    bad.write_text("{not json\n")
    with pytest.raises(InputError, match="invalid JSON"):
        cited_pmcids(bad)
    with pytest.raises(InputError) as e:
        Lexicon.load([bad])
    assert ":1:" in e.value.message
    first = GROUND_TRUTH.read_text().splitlines()[0]
    bad.write_text(first + "\n" + first + "\n")
    with pytest.raises(InputError, match="duplicate gene"):
        load_ground_truth(bad)


def test_ids_match_whole_strings_only():
    assert well_formed("GO:0005634", GO_ID) and well_formed("FBgn0000014", GENE_ID) and well_formed("PMC1", PMCID)
    assert well_formed("FBbt:00004508", TERM_ID["anatomy"]) and TERM_ID["anatomy"] is FBBT_ID
    for value in ("GO:0005634\n", " GO:0005634", "GO:000563", "go:0005634", "GO:٠٠٠٥٦٣٤", None, 5634):
        assert not well_formed(value, GO_ID)


def test_prediction_parser_warns_on_ids_the_validator_would_refuse():
    pred = parse_prediction("FBgn0000001", {"task1_function": [{"go_id": "GO:0000003\n"}, {"go_id": "GO:0000004"}],
                                            "task2_expression": [], "task3_synonyms": {"fullname_synonyms": [],
                                                                                       "symbol_synonyms": []}})
    assert pred.status == "ok" and pred.lists["go"] == ["GO:0000003\n", "GO:0000004"]   # scored as FlyAOC does
    assert [(i.where, i.severity) for i in pred.issues] == [("task1_function[0].go_id", "warning")]
