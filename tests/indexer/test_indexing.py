"""The indexing run end to end through the CLI: nothing lost, strict mode, duplicates, kill and resume."""

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

from indexer.synthetic import SyntheticConfig, write_corpus
from search.cli.main import main
from search.engines.embedded.engine import EmbeddedEngine
from search.retrieval.planner import plan


def run_index(*args: str) -> tuple[int, dict | None, str]:
    res = CliRunner().invoke(main, ["index", "corpus", *args, "--json"])
    last = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
    return res.exit_code, (json.loads(last) if last.startswith("{") else None), res.output


def test_every_record_is_indexed_or_reported(tmp_path: Path):
    src = tmp_path / "corpus.jsonl"
    good = {"pmcid": "PMC1", "title": "Dl in the wing", "abstract": "Delta.", "sections": {"INTRO": ["Dl binds N."]}}
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({"title": "no id", "abstract": "x", "sections": {}}),
        json.dumps({"pmcid": "PMC3", "title": "", "abstract": "", "sections": {}}),
        json.dumps({"pmcid": "PMC4", "title": "t", "abstract": "a", "sections": {"INTRO": 42}}),
        json.dumps({**good, "title": "Dl in the wing, revised"}),
    ]
    src.write_text("\n".join(lines) + "\n")
    data = tmp_path / "data"
    code, summary, out = run_index(str(src), "--data-dir", str(data))
    assert code == 0, out
    assert summary["read"] == 6 and summary["indexed"] == 1 and summary["rejected"] == 4 and summary["duplicates"] == 1
    rejects = [json.loads(x) for x in next((data / "rejects").glob("*.jsonl")).read_text().splitlines()]
    assert [r["record"] for r in rejects] == [2, 3, 4, 5]
    assert all(r["source"] == str(src) and r["reason"] for r in rejects)
    assert rejects[1]["field"] == "pmcid" and rejects[3]["field"].startswith("sections")
    # last one wins
    assert EmbeddedEngine(data).get_paper("PMC1").title == "Dl in the wing, revised"

    code, _, out = run_index(str(src), "--data-dir", str(tmp_path / "strict"), "--strict")
    assert code != 0 and "record 2" in out


@pytest.mark.slow
def test_killed_run_keeps_old_index_and_rerun_resumes_to_same_counts(tmp_path: Path):
    corpus_dir = tmp_path / "corpus"
    write_corpus(SyntheticConfig(n_papers=30, words_per_paper=300, seed=3), corpus_dir / "small")
    write_corpus(SyntheticConfig(n_papers=1000, words_per_paper=300, seed=5), corpus_dir / "big")
    data = tmp_path / "data"
    code, first, _ = run_index(str(corpus_dir / "small" / "corpus.jsonl"), "--data-dir", str(data))
    assert code == 0 and first["indexed"] == 30
    current = (data / "collections" / "default" / "CURRENT").read_text()

    big = str(corpus_dir / "big" / "corpus.jsonl")
    cmd = [sys.executable, "-m", "search.cli.main", "index", "corpus", big, "--data-dir", str(data),
           "--commit-every", "100", "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    builds = data / "collections" / "default" / "builds"
    deadline = time.time() + 120
    while time.time() < deadline:
        states = [json.loads(m.read_text()) for m in builds.glob("*/build.json")]
        if any(s["status"] == "building" and s["state"].get("consumed", 0) >= 300 for s in states):
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # the old index still serves, unchanged
    assert (data / "collections" / "default" / "CURRENT").read_text() == current
    eng = EmbeddedEngine(data)
    assert eng.stats().papers == 30
    assert eng.search_papers(plan("embryo")).total > 0

    code, resumed, out = run_index(big, "--data-dir", str(data), "--commit-every", "100")
    assert code == 0, out
    assert "resumed" in out
    code, fresh, _ = run_index(big, "--data-dir", str(tmp_path / "fresh"))
    counts = ("read", "indexed", "rejected")
    assert [resumed[k] for k in counts] == [fresh[k] for k in counts]
    assert eng.stats().papers == fresh["indexed"] == 1000
