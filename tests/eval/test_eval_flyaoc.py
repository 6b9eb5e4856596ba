"""FlyAOC metrics on a hand-written DAG and ground truth (tests/fixtures/eval_flyaoc), values computed by hand, plus
parity with a frozen output of FlyAOC's own evaluator on the same files."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from eval import coverage as cov
from eval.cli import eval_group
from eval.flyaoc import Scorer, evaluate, load_ground_truth, load_predictions, parse_prediction
from eval.report import write_flyaoc_report
from search.core.errors import InputError
from search.ontology.model import Ontology, WangSimilarity

from helpers import needs_extra

FIX = Path(__file__).parents[1] / "fixtures" / "eval_flyaoc"
ROOT = Path(__file__).parents[2]

# Hand-computed Wang values on fixtures/eval_flyaoc/go.obo and fbbt.obo (S-values: is_a 0.8, part_of 0.6).
S_2_3 = 3.24 / 4.24         # GO:0000003 vs its parent GO:0000002: (0.8+1)+(0.64+0.8) / (2.44+1.8)
S_3_4 = 2.88 / 4.88         # siblings under GO:0000002
S_12_13 = 3.04 / 4.84       # GO:0000012 part_of GO:0000013: S12 = {12:1, 11:.8, 13:.6, 10:.64}
S_21_22 = 1.6 / 3.6         # siblings; the `regulates` edge between them is not followed
F_5_3 = 4.392 / 5.392       # FBbt midgut vs gut (is_a chain; the {gci…} is_a to body is skipped)
F_3_4 = 1.44 / 4.24         # FBbt gut part_of body: part_of is not an FBbt edge
F_4_5 = 1.312 / 4.752


@pytest.fixture(scope="module")
def sims(tmp_path_factory):
    cache = tmp_path_factory.mktemp("ontology-cache")
    go = WangSimilarity(Ontology.load(FIX / "go.obo", "go", cache_dir=cache), "go")
    fbbt = WangSimilarity(Ontology.load(FIX / "fbbt.obo", "fbbt", cache_dir=cache), "fbbt")
    return {"go": go.sim, "anatomy": fbbt.sim}


@pytest.fixture(scope="module")
def truth():
    return load_ground_truth(FIX / "ground_truth.jsonl")


def run(truth, sims, mode="parity", missing_as_failed=False, seed=0, n_resamples=200):
    preds, stray = load_predictions(FIX / "predictions", truth)
    return evaluate(truth, preds, Scorer(sims, mode=mode), missing_as_failed=missing_as_failed,
                    extra_issues=stray, seed=seed, n_resamples=n_resamples)


def test_wang_similarity_hand_dag(sims):
    go, fbbt = sims["go"], sims["anatomy"]
    assert go("GO:0000003", "GO:0000002") == pytest.approx(S_2_3, abs=1e-12)
    assert go("GO:0000003", "GO:0000004") == pytest.approx(S_3_4, abs=1e-12)
    assert go("GO:0000012", "GO:0000013") == pytest.approx(S_12_13, abs=1e-12)
    assert go("GO:0000021", "GO:0000022") == pytest.approx(S_21_22, abs=1e-12)
    assert go("GO:0000003", "GO:0000012") == 0.0          # namespaces never mix
    assert go("GO:0000095", "GO:0000005") == 1.0          # alt id resolves
    assert go("GO:0000095", "GO:0000002") == pytest.approx(S_2_3, abs=1e-12)
    assert go("GO:0000006", "GO:0000002") == 0.0          # obsolete: not in the DAG
    assert go("GO:9999999", "GO:9999999") == 1.0          # identity first, even unknown
    assert fbbt("FBbt:00000005", "FBbt:00000003") == pytest.approx(F_5_3, abs=1e-12)
    assert fbbt("FBbt:00000003", "FBbt:00000004") == pytest.approx(F_3_4, abs=1e-12)
    assert fbbt("FBbt:00000004", "FBbt:00000005") == pytest.approx(F_4_5, abs=1e-12)
    assert fbbt("FBbt:00000095", "FBbt:00000005") == 0.0  # FBbt alt ids are not resolved


def test_ground_truth_sets(truth):
    a = truth["FBgn0000001"]
    assert a.sets["go"] == {"GO:0000003", "GO:0000004", "GO:0000012"} and a.rows["go"] == 4
    assert a.sets_all["go"] == a.sets["go"] | {"GO:0000002"}
    assert a.sets["anatomy"] == {"FBbt:00000003", "FBbt:00000005", None} and a.rows["anatomy"] == 3
    assert a.sets["synonyms_fullname"] == {"alpha alpha"} and a.rows["synonyms_fullname"] == 2
    assert a.sets["synonyms"] == {"alpha alpha", "aa", "aa1"}
    assert a.cited_pmcids == {"PMC1", "PMC2", "PMC3", "PMC4"}
    assert a.tuples == {("FBbt:00000003", "FBdv:00005289", None),
                        ("FBbt:00000005", "FBdv:00000001", "FBdv:00000002")}
    c = truth["FBgn0000003"]
    assert len(c.sets["synonyms_symbol"]) == 1 and c.rows["synonyms_symbol"] == 2   # "CC" and "cc" normalise


def test_ground_truth_errors_name_record_and_field(tmp_path):
    bad = tmp_path / "gt.jsonl"
    good = (FIX / "ground_truth.jsonl").read_text().splitlines()[0]
    row = json.loads(good)
    del row["task1_function"][1]["in_corpus"]
    bad.write_text(good + "\n" + json.dumps({**row, "gene_id": "FBgn0000009"}) + "\n")
    with pytest.raises(InputError) as e:
        load_ground_truth(bad)
    assert e.value.record == 2 and e.value.field == "task1_function[1].in_corpus" and e.value.source == str(bad)


def test_recall_micro_vs_macro_parity(truth, sims):
    ev = run(truth, sims)
    assert ev.genes == ["FBgn0000001", "FBgn0000002", "FBgn0000003", "FBgn0000005"]   # 04 has no file: skipped
    assert ev.genes_with("failed") == ["FBgn0000003"] and ev.genes_with("missing") == ["FBgn0000004"]
    go = ev.aggregate["go"]
    # denominators: 3 + 2 + 3 in-corpus GO *rows* of the failed gene + 0 (gene 05 has no in-corpus GO)
    assert go["n_ground_truth"] == 8 and go["k"] == 30
    g1 = 1 + S_2_3 + S_12_13                   # GO:0000003 exact, 04 via parent 02, 12 via 13
    g2 = S_12_13 + S_21_22
    assert go["exact_recall_micro"] == pytest.approx(1 / 8, abs=1e-12)
    assert go["exact_recall_macro"] == pytest.approx((1 / 3) / 4, abs=1e-12)
    assert go["recall_micro"] == pytest.approx((g1 + g2) / 8, abs=1e-12)
    assert go["recall_macro"] == pytest.approx((g1 / 3 + g2 / 2) / 4, abs=1e-12)
    at1 = go["recall_at_k"]["1"]
    assert at1["exact_micro"] == 0.0 and at1["semantic_micro"] == pytest.approx((2 * S_2_3 + S_12_13) / 8, abs=1e-12)
    an = ev.aggregate["anatomy"]                 # null member counts; failed gene: 2 expression rows
    assert an["n_ground_truth"] == 3 + 1 + 2 and an["recall_micro"] == pytest.approx(2 / 6, abs=1e-12)
    assert an["recall_at_k"]["1"]["semantic_micro"] == pytest.approx((1 + F_5_3) / 6, abs=1e-12)
    assert an["tuple_recall_micro"] == pytest.approx(1 / 4, abs=1e-12)   # only midgut@FBdv:00000001 matches
    syn = ev.aggregate["synonyms"]               # failed gene adds nothing to the combined denominator
    assert syn["n_ground_truth"] == 4 and syn["recall_micro"] == pytest.approx(3 / 4, abs=1e-12)
    assert syn["recall_macro"] == pytest.approx((2 / 3 + 1) / 4, abs=1e-12)
    assert syn["recall_at_k"]["1"]["exact_micro"] == pytest.approx(1 / 4, abs=1e-12)


def test_precision_and_set_metrics(truth, sims):
    ev = run(truth, sims)
    ex = ev.aggregate["go"]["exact_set"]
    assert (ex["tp"], ex["fp"], ex["fn"]) == (1, 6, 7)   # GO:0000002 and 13 are out-of-corpus truth: not FP
    assert ex["precision_micro"] == pytest.approx(1 / 7) and ex["recall_micro"] == pytest.approx(1 / 8)
    p1 = S_2_3 + 1 + 0 + S_3_4 + 0 + S_12_13       # [02, 03, unknown, alt of 05, obsolete, 13]
    p2 = S_12_13 + S_21_22
    sem = ev.aggregate["go"]["semantic_set"]
    assert sem["n_predictions"] == 9 and sem["precision_micro"] == pytest.approx((p1 + p2) / 9, abs=1e-12)
    assert ev.aggregate["go"]["precision_micro"] == sem["precision_micro"]
    assert sem["precision_macro"] == pytest.approx((p1 / 6 + p2 / 2) / 4, abs=1e-12)
    an = ev.aggregate["anatomy"]["semantic_set"]     # parity: 5 records, not 4 distinct ids
    pa = 1 + 0 + 1 + F_3_4
    assert an["precision_micro"] == pytest.approx(pa / 5, abs=1e-12)
    assert an["recall_micro"] == pytest.approx(2 / 6, abs=1e-12)
    assert ev.aggregate["synonyms"]["exact_set"]["fp"] == 2   # "zz", "bb fullname"; "aa-2" is known, not FP
    corrected = run(truth, sims, mode="corrected").aggregate["anatomy"]["semantic_set"]
    assert corrected["precision_micro"] == pytest.approx(pa / 4, abs=1e-12)
    assert corrected["recall_micro"] == pytest.approx(2 / 4, abs=1e-12)


def test_corrected_mode_and_missing_as_failed(truth, sims):
    corr = run(truth, sims, mode="corrected")
    assert corr.genes_with("missing") == ["FBgn0000004"] and "FBgn0000004" in corr.genes
    # unique denominators: combined synonyms 3 + 1 + 2 (failed: "cee cee", "cc") + 1 (missing: "dd")
    assert corr.aggregate["synonyms"]["n_ground_truth"] == 7
    assert corr.aggregate["synonyms"]["recall_micro"] == pytest.approx(3 / 7)
    assert corr.aggregate["anatomy"]["n_ground_truth"] == 2 + 1 + 1      # no null member, unique ids
    assert corr.aggregate["anatomy"]["recall_micro"] == pytest.approx(2 / 4)
    maf = run(truth, sims, missing_as_failed=True)
    assert maf.aggregate["go"]["n_ground_truth"] == 9                     # + 1 GO row of the missing gene
    assert maf.aggregate["go"]["exact_recall_micro"] == pytest.approx(1 / 9)
    assert maf.aggregate["synonyms"]["recall_micro"] == pytest.approx(3 / 4)   # parity: failed adds 0
    assert maf.aggregate["synonyms"]["recall_macro"] == pytest.approx((2 / 3 + 1) / 5)


def test_headline_k_override(truth, sims):
    preds, _ = load_predictions(FIX / "predictions", truth)
    ev = evaluate(truth, preds, Scorer(sims, k_values=[5]), headline_k={"go": 1}, n_resamples=0)
    assert ev.aggregate["go"]["k"] == 1 and 1 in ev.k_values and 10 in ev.k_values
    assert ev.aggregate["go"]["recall_micro"] == pytest.approx((2 * S_2_3 + S_12_13) / 8, abs=1e-12)


def test_bootstrap_is_seeded_and_reproducible(truth, sims):
    a, b, c = run(truth, sims, seed=3), run(truth, sims, seed=3), run(truth, sims, seed=4)
    assert a.bootstrap == b.bootstrap
    assert a.bootstrap["intervals"] != c.bootstrap["intervals"]
    lo, hi = a.aggregate["go"]["ci95"]["recall_macro"]
    assert 0.0 <= lo <= a.aggregate["go"]["recall_macro"] <= hi <= 1.0
    # every gene identical → the interval collapses onto the value
    one = {g: t for g, t in truth.items() if g == "FBgn0000002"}
    twins = {f"FBgn000000{i}": t for i, t in enumerate([one["FBgn0000002"]] * 3)}
    preds = {g: parse_prediction(g, json.loads((FIX / "predictions" / "FBgn0000002.json").read_text()))
             for g in twins}
    ev = evaluate(twins, preds, Scorer(sims), n_resamples=50, seed=1)
    v = ev.aggregate["go"]["recall_micro"]
    assert ev.aggregate["go"]["ci95"]["recall_micro"] == pytest.approx([v, v])


def test_bad_prediction_files_are_reported_not_fatal(truth, sims, tmp_path):
    d = tmp_path / "preds"
    d.mkdir()
    (d / "FBgn0000001.json").write_text("{not json")
    (d / "FBgn0000002.json").write_text(json.dumps([1, 2]))
    (d / "FBgn0000003.json").write_text(json.dumps({"go_terms": [], "task1_function": "GO:0000003",
                                                    "task2_expression": [7, {"anatomy_id": 5}],
                                                    "task3_synonyms": {"fullname_synonyms": [None, "Cee Cee"]}}))
    (d / "FBgn0000005.json").write_text(json.dumps({"output": {"task1_function": [
        {"go_id": "GO:123"}, {"go_id": 17}, {"qualifier": "enables"}, {"go_id": "GO:0000003"}]}}))
    (d / "stray.json").write_text("{}")
    known = {"go": lambda t: t != "GO:0000003"}
    preds, stray = load_predictions(d, truth, known)
    assert preds["FBgn0000001"].status == "invalid" and preds["FBgn0000002"].status == "invalid"
    assert preds["FBgn0000004"].status == "missing" and stray[0].gene_id == "stray"
    p3 = preds["FBgn0000003"]
    assert p3.status == "ok" and p3.lists["synonyms"] == ["cee cee"]
    msgs = {(i.where, i.severity) for i in p3.issues}
    assert {("go_terms", "warning"), ("task1_function", "error"), ("task2_expression[0]", "warning"),
            ("task2_expression[1].anatomy_id", "warning"), ("task3_synonyms.fullname_synonyms[0]", "warning"),
            ("task3_synonyms.symbol_synonyms", "warning")} <= msgs
    p5 = preds["FBgn0000005"]
    assert p5.lists["go"] == ["GO:123", "GO:0000003"]            # scored as FlyAOC would; flagged
    assert any("not a well-formed" in i.message for i in p5.issues)
    assert any("not a live term" in i.message for i in p5.issues)
    ev = evaluate(truth, preds, Scorer(sims), extra_issues=stray, n_resamples=0)
    assert ev.scores["FBgn0000001"]["go"].n == 4                  # unusable: zero, row denominators kept
    assert ev.scores["FBgn0000001"]["go"].exact[30] == 0.0
    assert ev.scores["FBgn0000003"]["synonyms"].exact[20] == pytest.approx(1 / 2)


def test_run_record_and_gene_mismatch_warning():
    p = parse_prediction("FBgn0000002", {"gene_id": "FBgn0000001", "task1_function": [],
                                         "task2_expression": [], "task3_synonyms": {}})
    assert p.status == "ok" and any(i.where == "gene_id" for i in p.issues)
    failed = parse_prediction("FBgn0000002", {"output": None, "error": "boom"})
    assert failed.status == "failed" and "boom" in failed.issues[0].message


@needs_extra("eval")
def test_parity_with_frozen_flyaoc_reference(truth, sims, tmp_path):
    """Every recall@k, set metric and denominator FlyAOC's evaluator printed for these files, to its 4 decimals."""
    spec = importlib.util.spec_from_file_location("bench_flyaoc_parity", ROOT / "bench" / "bench_flyaoc_parity.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    ev = run(truth, sims, n_resamples=0)
    summary = write_flyaoc_report(ev, tmp_path, {"ground_truth": "fixture"})
    genes = json.loads((tmp_path / "genes.json").read_text())["genes"]
    ref = json.loads((FIX / "flyaoc_reference.json").read_text())
    rows = bench.pairs(summary, genes, ref)
    assert len(rows) > 150
    bad = [(name, mine, theirs) for name, mine, theirs in rows if abs(round(mine, 4) - theirs) > 1e-9]
    assert not bad


@needs_extra("eval")
def test_report_shape_and_files(truth, sims, tmp_path):
    ev = run(truth, sims, n_resamples=50)
    coverage = cov.coverage_from_predictions(truth, load_predictions(FIX / "predictions", truth)[0], ev.genes)
    write_flyaoc_report(ev, tmp_path, {"ground_truth": "g", "predictions": "p"}, coverage)
    s = json.loads((tmp_path / "summary.json").read_text())
    for task in ("go", "anatomy", "synonyms"):
        for key in ("recall_micro", "recall_macro", "exact_recall_micro", "precision_micro", "n_ground_truth", "k"):
            assert key in s["tasks"][task]
    assert s["genes"]["failed_ids"] == ["FBgn0000003"] and s["genes"]["missing_ids"] == ["FBgn0000004"]
    md = (tmp_path / "report.md").read_text()
    assert "FBgn0000003" in md and "FBgn0000004" in md and "770" in md
    for png in ("recall_by_task.png", "recall_at_k.png", "per_gene.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_coverage_from_evidence_and_traces(truth, tmp_path):
    preds, _ = load_predictions(FIX / "predictions", truth)
    c = cov.coverage_from_predictions(truth, preds, ["FBgn0000001", "FBgn0000002"])
    assert c["genes"]["FBgn0000001"]["coverage"] == pytest.approx(2 / 4)   # PMC1, PMC3 of PMC1-4
    assert c["genes"]["FBgn0000002"]["coverage"] == 0.0
    assert c["micro"] == pytest.approx(2 / 6) and c["macro"] == pytest.approx(0.25)
    d = tmp_path / "traces"
    d.mkdir()
    (d / "FBgn0000001.json").write_text(json.dumps({"events": [
        {"tool": "search_corpus", "arguments": {"query": "aa"}, "returned_ids": ["PMC2", "PMC4"]},
        {"tool": "get_paper_text", "arguments": {"pmcid": "PMC2"}},
        {"tool": "get_paper_text", "arguments": {"pmcid": "PMC4"}, "error": "Paper limit reached (8/8)."},
        {"tool": "analyze_papers_batch", "arguments": {"pmcids": ["PMC1", "PMC9"]}}]}))
    read = cov.load_trace_dir(d, truth)
    assert read == {"FBgn0000001": {"PMC1", "PMC2", "PMC9"}}
    t = cov.coverage(truth, read, ["FBgn0000001"], "traces")
    assert t["genes"]["FBgn0000001"]["missed"] == ["PMC3", "PMC4"]
    (d / "FBgn0000002.json").write_text(json.dumps([{"tool": "get_paper_text", "arguments": {"pmcid": 5}}]))
    with pytest.raises(InputError) as e:
        cov.load_trace_dir(d, truth)
    assert e.value.record == 0 and e.value.field == "pmcid"


@needs_extra("eval")
def test_cli_flyaoc(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYSIFT_ONTOLOGY_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    res = CliRunner().invoke(eval_group, ["flyaoc", "--ground-truth", str(FIX / "ground_truth.jsonl"),
                                          "--predictions", str(FIX / "predictions"), "--go-obo", str(FIX / "go.obo"),
                                          "--fbbt-obo", str(FIX / "fbbt.obo"), "--out", str(out),
                                          "--bootstrap", "20", "--missing-as-failed"])
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert s["mode"] == "parity" and s["missing_as_failed"] and s["tasks"]["go"]["n_ground_truth"] == 9
    assert "go@30" in res.output
