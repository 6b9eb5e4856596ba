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


def test_run_coverage_from_traces(served_run, tmp_path):
    _, run = served_run
    r = CliRunner().invoke(coverage_cmd, ["--ground-truth", str(CUR / "ground_truth.jsonl"), "--run-dir", str(run),
                                          "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    rc = json.loads((tmp_path / "coverage.json").read_text())["run"]
    assert rc["totals"] == {"cited": 3, "read": 1, "surfaced_not_read": 0, "never_surfaced": 2}
    assert rc["genes"]["FBgn0005558"] == {"cited": 2, "read": ["PMC900001"], "surfaced_not_read": [],
                                          "never_surfaced": ["PMC900004"]}
    assert rc["genes"]["FBgn0000463"]["never_surfaced"] == ["PMC900003"]


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
    assert "| snapshot |" in (tmp_path / "ceiling.md").read_text()
    assert (tmp_path / "ceiling.png").read_bytes()[:4] == b"\x89PNG"


def test_coverage_needs_a_run_or_the_ceiling(tmp_path):
    r = CliRunner().invoke(coverage_cmd, ["--ground-truth", str(CUR / "ground_truth.jsonl"), "--out", str(tmp_path)])
    assert r.exit_code != 0 and "--run-dir, --ceiling or both" in r.output
