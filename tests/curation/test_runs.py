"""Batch runs through the CLI against a real service: the run directory's files, concurrency, refusing to overwrite,
--resume, --retry-failed, a SIGKILL mid-run, --dry-run, show and eval."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from curation_service import CUR, FIX, build_data, serve

from curation.cli import curate
from search.cli.main import main

from helpers import needs_extra

SECRET = "fsk_do-not-store-this-key"


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    data = build_data(tmp_path_factory.mktemp("data"), tmp_path_factory.mktemp("cache"))
    with serve(data) as srv:
        yield srv


def batch(url: str, run_dir: Path, *args: str, genes: Path = CUR / "genes.txt"):
    return CliRunner().invoke(curate, ["batch", "--url", url, "--genes", str(genes), "--agent", "lexical",
                                       "--run-dir", str(run_dir), *args], env={"FLYSIFT_API_KEY": SECRET})


def test_batch_writes_a_complete_run_directory(service, tmp_path):
    run = tmp_path / "run"
    r = batch(service.url, run, "--concurrency", "2", "--budget", "4")
    assert r.exit_code == 0, r.output
    preds = {p.stem: json.loads(p.read_text()) for p in (run / "predictions").glob("*.json")}
    assert set(preds) == {"FBgn0005558", "FBgn0000463"}
    ey = preds["FBgn0005558"]
    assert ey["error"] is None and ey["output"]["task1_function"][0]["go_id"] == "GO:0005634"
    assert set(ey["usage"]) >= {"papers_read", "turns", "input_tokens", "output_tokens", "cost_usd"}
    assert preds["FBgn0000463"]["output"]["task1_function"] == []  # no paper names Dl: an empty, valid output
    trace = json.loads((run / "traces" / "FBgn0005558.json").read_text())
    assert trace["session_id"] == ey["session_id"]
    tools = [e["tool"] for e in trace["events"]]
    assert "search_papers" in tools and tools.count("get_paper") >= 2 and "submit" in tools
    info = json.loads((run / "run.json").read_text())
    assert info["config"]["agent"] == "lexical" and info["config"]["concurrency"] == 2
    assert info["index"]["papers"] == 3 and info["git"]["commit"] and info["versions"]["python"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["finished"] == 2 and summary["succeeded"] == 2 and summary["missing"] == []
    for path in run.rglob("*"):
        assert not path.is_file() or SECRET not in path.read_text(errors="replace"), path
    lines = [json.loads(x) for x in r.output.splitlines() if x.startswith('{"event"')]
    assert sorted(x["gene_id"] for x in lines) == ["FBgn0000463", "FBgn0005558"]  # JSON lines off a TTY


def test_resume_and_retry_failed(service, tmp_path):
    run = tmp_path / "run"
    assert batch(service.url, run).exit_code == 0
    again = batch(service.url, run)
    assert again.exit_code != 0 and "--resume" in again.output  # never overwrites a run by accident
    kept = (run / "predictions" / "FBgn0005558.json").read_text()
    (run / "predictions" / "FBgn0000463.json").unlink()
    assert batch(service.url, run, "--resume").exit_code == 0
    assert (run / "predictions" / "FBgn0005558.json").read_text() == kept  # finished genes are skipped
    assert (run / "predictions" / "FBgn0000463.json").exists()
    failed = json.loads(kept) | {"output": None, "error": "RateLimited: simulated"}
    (run / "predictions" / "FBgn0005558.json").write_text(json.dumps(failed))
    kept_failed = batch(service.url, run, "--resume")
    assert kept_failed.exit_code == 1 and "1 gene(s) failed" in kept_failed.output  # a failed gene is never success
    assert batch(service.url, run, "--resume", "--allow-failures").exit_code == 0
    assert json.loads((run / "predictions" / "FBgn0005558.json").read_text())["output"] is None
    assert batch(service.url, run, "--resume", "--retry-failed").exit_code == 0
    rec = json.loads((run / "predictions" / "FBgn0005558.json").read_text())
    assert rec["output"] is not None and rec["error"] is None and rec["session_id"] != failed["session_id"]
    assert len(json.loads((run / "run.json").read_text())["resumed"]) == 4


@needs_extra("eval")
def test_show_dry_run_and_eval(service, tmp_path):
    run = tmp_path / "run"
    assert batch(service.url, run).exit_code == 0
    shown = CliRunner().invoke(curate, ["show", str(run)])
    assert shown.exit_code == 0 and "2/2 genes finished, 2 with output" in shown.output
    dry = batch(service.url, tmp_path / "dry", "--dry-run", "--budget", "8")
    assert dry.exit_code == 0 and json.loads(dry.output)["max_papers"] == 16 and not (tmp_path / "dry").exists()
    r = subprocess.run([sys.executable, "-m", "search.cli.main", "curate", "eval", str(run), "--ground-truth",
                        str(CUR / "ground_truth.jsonl"), "--go-obo", str(FIX / "mini.obo"), "--fbbt-obo",
                        str(FIX / "mini_fbbt.obo"), "--bootstrap", "10"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    summary = json.loads((run / "eval" / "summary.json").read_text())
    assert summary["tasks"]["go"]["exact_recall_micro"] == pytest.approx(2 / 4)  # nucleus x2, compound eye dev.
    assert summary["tasks"]["synonyms"]["recall_micro"] == pytest.approx(1.0)  # Pax6
    assert summary["coverage"]["source"].startswith("session traces")


@pytest.mark.slow
def test_sigkill_leaves_a_consistent_directory_that_resume_completes(service, tmp_path):
    genes = tmp_path / "genes.txt"
    ids = ["FBgn0005558", "FBgn0000463"] + [f"FBgn99{n:05d}" for n in range(60)]  # unknown genes fail quickly
    genes.write_text("\n".join(ids) + "\n")
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "search.cli.main", "curate", "batch", "--url", service.url, "--genes", str(genes),
           "--agent", "lexical", "--run-dir", str(run)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    while proc.poll() is None and len(list((run / "predictions").glob("*.json"))) < 3:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = list((run / "predictions").glob("*.json"))
    for p in done:  # every prediction is whole (written to a temp file, then renamed)
        assert set(json.loads(p.read_text())) >= {"output", "usage", "error"}
    r = subprocess.run(cmd + ["--resume"], capture_output=True, text=True)
    assert r.returncode == 1 and "60 gene(s) failed" in r.stderr, r.stderr  # the unknown genes
    r = subprocess.run(cmd + ["--resume", "--allow-failures"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert {p.stem for p in (run / "predictions").glob("*.json")} == set(ids)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["finished"] == 62 and summary["succeeded"] == 2 and len(summary["failed"]) == 60
    assert "not_found" in summary["errors"]["FBgn9900000"] or "NotFound" in summary["errors"]["FBgn9900000"]


def test_a_configuration_mistake_stops_the_batch_before_the_first_gene(service, tmp_path, monkeypatch):
    """No model, no key, an unreachable service: one line, non-zero, and no gene run (nothing in the directory)."""
    monkeypatch.delenv("FLYSIFT_LLM_MODEL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    run = tmp_path / "run"
    no_model = batch(service.url, run, "--agent", "single")
    assert no_model.exit_code == 1 and no_model.output.strip().splitlines() == [
        "Error: no model: pass --model NAME (or -o model=NAME, or set FLYSIFT_LLM_MODEL)"]
    no_key = batch(service.url, run, "--agent", "single", "--model", "gpt-5-mini")
    assert no_key.exit_code == 1 and "no API key for model 'gpt-5-mini': set OPENAI_API_KEY" in no_key.output
    monkeypatch.setitem(sys.modules, "openai", None)  # as if the curation extra were not installed
    no_extra = batch(service.url, run, "--agent", "multi", "--model", "m", "--base-url", "http://127.0.0.1:9/v1")
    assert no_extra.exit_code == 1 and "pip install 'flysift[curation]'" in no_extra.output
    monkeypatch.delitem(sys.modules, "openai")
    down = batch("http://127.0.0.1:9", run)
    assert down.exit_code == 1 and len(down.output.strip().splitlines()) == 1
    assert "Cannot reach the flysift API at http://127.0.0.1:9" in down.output and "flysift serve" in down.output
    assert not run.exists()
    root = CliRunner().invoke(main, ["curate", "run", "--gene", "FBgn0005558", "--run-dir", str(run), "--url",
                                     "http://127.0.0.1:9"])
    assert root.exit_code == 1 and "Traceback" not in root.output and "ConnectError" in root.output


def test_resume_refuses_another_configuration(service, tmp_path):
    run = tmp_path / "run"
    assert batch(service.url, run, "--budget", "4").exit_code == 0
    (run / "predictions" / "FBgn0000463.json").unlink()
    other = batch(service.url, run, "--resume", "--budget", "8", "--agent", "lexical")
    assert other.exit_code == 1 and "budget: 4 -> 8" in other.output and "--force-config" in other.output
    assert not (run / "predictions" / "FBgn0000463.json").exists()
    forced = batch(service.url, run, "--resume", "--budget", "8", "--force-config")
    assert forced.exit_code == 0, forced.output
    info = json.loads((run / "run.json").read_text())
    assert info["config"]["budget"] == 8 and info["forced_config"][0]["changed"] == ["budget: 4 -> 8"]


def test_show_prints_a_row_per_gene(service, tmp_path):
    run = tmp_path / "run"
    assert batch(service.url, run).exit_code == 0
    shown = CliRunner().invoke(curate, ["show", str(run), "--ground-truth", str(CUR / "ground_truth.jsonl")])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    head = next(x for x in lines if x.startswith("| gene |"))
    assert head == "| gene | symbol | status | papers | GO | expr | syn | cited papers | curator refs read |"
    assert "| FBgn0005558 | ey | ok | 2 | 4 | 2 | 1 | 2 | 1/2 |" in lines
    as_json = json.loads(CliRunner().invoke(curate, ["show", str(run), "--json"]).output)
    assert [g["gene_id"] for g in as_json["genes"]] == ["FBgn0005558", "FBgn0000463"]
