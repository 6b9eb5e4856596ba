"""flysift coverage against a real service: a lexical run's cited papers read / surfaced / never surfaced, and the
agent-free retrieval ceiling per synonym policy, with its table and plot."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import needs_extra

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "curation"))

from curation_service import CUR, build_data, serve  # noqa: E402

from curation.cli import curate  # noqa: E402
from eval.cli import coverage_cmd  # noqa: E402


@pytest.fixture(scope="module")
def served_run(tmp_path_factory):
    data = build_data(tmp_path_factory.mktemp("data"), tmp_path_factory.mktemp("cache"))
    run = tmp_path_factory.mktemp("runs") / "run"
    with serve(data) as srv:
        r = CliRunner().invoke(curate, ["batch", "--url", srv.url, "--genes", str(CUR / "genes.txt"), "--run-dir",
                                        str(run)])
        assert r.exit_code == 0, r.output
        yield srv, run


def _truth(path: Path) -> Path:
    """The fixture's ground truth with ey also citing PMC900002: ey cites PMC900001, PMC900002 and PMC900004 (not in
    the corpus), Dl cites PMC900003 (in the corpus; no paper names Dl)."""
    genes = [json.loads(x) for x in (CUR / "ground_truth.jsonl").read_text().splitlines() if x.strip()]
    row = dict(genes[0]["task1_function"][0], pmcid="PMC900002", go_id="GO:0003700", aspect="F",
               qualifier="enables")
    genes[0]["task1_function"].append(row)
    path.write_text("".join(json.dumps(g) + "\n" for g in genes))
    return path


def _reasons(srv, run: Path, truth: Path, out: Path, *args: str) -> dict:
    r = CliRunner().invoke(coverage_cmd, ["--ground-truth", str(truth), "--run-dir", str(run), "--url", srv.url,
                                          "--out", str(out), "--json", *args])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)["run"]
    assert report == json.loads((out / "coverage.json").read_text())["run"]
    return report


def test_run_coverage_says_why_each_cited_paper_was_missed(served_run, tmp_path):
    """Budget 1 over a corpus missing one cited paper: read and cited, surfaced but not read, not indexed, never
    retrieved; then the same run with its search cut to one hit and no evidence from the read paper: read but not
    annotated, and beyond the budget."""
    srv, _ = served_run
    run = tmp_path / "run"
    r = CliRunner().invoke(curate, ["batch", "--url", srv.url, "--genes", str(CUR / "genes.txt"), "--run-dir",
                                    str(run), "--budget", "1"])
    assert r.exit_code == 0, r.output
    truth = _truth(tmp_path / "gt.jsonl")
    rc = _reasons(srv, run, truth, tmp_path / "a")
    assert rc["reasons"] == ["not_indexed", "never_retrieved", "beyond_budget", "surfaced_not_read",
                             "read_not_annotated", "read_and_cited"]
    ey = {ref["pmcid"]: ref for ref in rc["genes"]["FBgn0005558"]["references"]}
    assert {p: ref["reason"] for p, ref in ey.items()} == {
        "PMC900001": "read_and_cited", "PMC900002": "surfaced_not_read", "PMC900004": "not_indexed"}
    assert ey["PMC900002"]["detail"]["rank"] == 1 and ey["PMC900002"]["detail"]["tool"] == "search_passages"
    assert ey["PMC900001"]["title"] and ey["PMC900001"]["year"] and ey["PMC900004"]["title"] is None
    assert rc["genes"]["FBgn0005558"]["not_indexed_share"] == pytest.approx(1 / 3)
    dl = rc["genes"]["FBgn0000463"]["references"]
    assert [(x["pmcid"], x["reason"]) for x in dl] == [("PMC900003", "never_retrieved")]
    assert rc["totals"] == {"not_indexed": 1, "never_retrieved": 1, "beyond_budget": 0, "surfaced_not_read": 1,
                            "read_not_annotated": 0, "read_and_cited": 1}
    md = (tmp_path / "a" / "coverage.md").read_text()
    assert "| FBgn0005558 | ey | 3 | 1 | 0 | 1 | 1 | 33% |" in md and "| **all** | | 4 |" in md

    trace_path = run / "traces" / "FBgn0005558.json"
    trace = json.loads(trace_path.read_text())
    trace["events"] = [e for e in trace["events"] if e["tool"] != "search_passages"]
    search = next(e for e in trace["events"] if e["tool"] == "search_papers")
    search["returned_ids"], search["arguments"]["body"]["limit"] = search["returned_ids"][:1], 1
    trace_path.write_text(json.dumps(trace))
    pred_path = run / "predictions" / "FBgn0005558.json"
    pred = json.loads(pred_path.read_text())
    for item in pred["output"]["task1_function"] + pred["output"]["task2_expression"]:
        item["evidence"].pop("pmcid", None)
    pred_path.write_text(json.dumps(pred))
    ey = {ref["pmcid"]: ref for ref in _reasons(srv, run, truth, tmp_path / "b")["genes"]["FBgn0005558"]["references"]}
    assert ey["PMC900001"]["reason"] == "read_not_annotated"
    # the run's own query (gene= expanded) ranks it 2, past the budget of 1; a plain "ey" ranks it first
    assert ey["PMC900002"]["reason"] == "beyond_budget" and ey["PMC900002"]["detail"] == {
        "best_rank": 1, "query": "ey", "policy": "none", "from": "ceiling", "within_budget": True}
    only_run = _reasons(srv, run, truth, tmp_path / "c", "--policy", "snapshot")
    assert only_run["genes"]["FBgn0005558"]["references"][1]["detail"] == {
        "best_rank": 2, "query": "ey", "policy": "snapshot", "from": "run", "within_budget": False}


def test_coverage_needs_a_reachable_service(tmp_path):
    r = CliRunner().invoke(coverage_cmd, ["--ground-truth", str(CUR / "ground_truth.jsonl"), "--ceiling", "--url",
                                          "http://127.0.0.1:9", "--out", str(tmp_path)])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1 and "flysift serve" in r.output


@needs_extra("eval")
def test_retrieval_ceiling_table_and_plot(served_run, tmp_path):
    srv, _ = served_run
    r = CliRunner().invoke(coverage_cmd, ["--ground-truth", str(CUR / "ground_truth.jsonl"), "--ceiling", "--url",
                                          srv.url, "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    ce = json.loads((tmp_path / "coverage.json").read_text())["ceiling"]
    # PMC900004 is not in the corpus, so only two references count; no paper names Dl
    assert ce["n_references"] == 2 and ce["genes"]["FBgn0000463"]["ranks"]["snapshot"] == {"PMC900003": None}
    assert ce["genes"]["FBgn0005558"]["ranks"]["snapshot"]["PMC900001"] in (1, 2)
    assert ce["recall"]["snapshot"]["64"] == 0.5 and ce["recall"]["none"]["64"] == 0.5
    assert ce["genes"]["FBgn0005558"]["not_indexed"] == ["PMC900004"] and ce["n_not_indexed"] == 1
    assert "| snapshot |" in (tmp_path / "coverage.md").read_text()
    assert (tmp_path / "ceiling.png").read_bytes()[:4] == b"\x89PNG"


def test_ceiling_over_references_that_are_all_missing_says_n_a(served_run, tmp_path):
    """A corpus holding none of the cited papers: "n/a" in every cell, never 0.000, and no plot."""
    srv, _ = served_run
    genes = [json.loads(x) for x in (CUR / "ground_truth.jsonl").read_text().splitlines() if x.strip()]
    for g in genes:
        for row in g["task1_function"] + g["task2_expression"]:
            row["pmcid"] = "PMC999999"
    truth = tmp_path / "gt.jsonl"
    truth.write_text("".join(json.dumps(g) + "\n" for g in genes))
    r = CliRunner().invoke(coverage_cmd, ["--ground-truth", str(truth), "--ceiling", "--url", srv.url, "--out",
                                          str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "0.000" not in r.output and "| snapshot | n/a | n/a |" in r.output and "no plot" in r.output
    assert not (tmp_path / "out" / "ceiling.png").exists()
    ce = json.loads((tmp_path / "out" / "coverage.json").read_text())["ceiling"]
    assert ce["n_references"] == 0 and ce["n_not_indexed"] == 2 and ce["recall"]["none"]["1"] is None


def test_coverage_needs_a_run_or_the_ceiling(tmp_path):
    r = CliRunner().invoke(coverage_cmd, ["--ground-truth", str(CUR / "ground_truth.jsonl"), "--out", str(tmp_path)])
    assert r.exit_code != 0 and "--run-dir, --ceiling or both" in r.output
