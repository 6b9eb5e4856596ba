"""Issue #14 item 4: long work shows progress on a terminal, says nothing extra when piped, and writes JSON lines
with --json; no run starts with an empty ``0 records [00:00, ? records/s]`` line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from search.core.progress import Progress

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def _events(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_piped_progress_writes_nothing_but_warnings():
    out = io.StringIO()
    with Progress("records", stream=out, tty=False) as p:
        p.stage("reading")
        for i in range(1, 1001):
            p.update(i, 1000)
        p.write("warning: one bad record", always=True)
    assert out.getvalue() == "warning: one bad record\n"


def test_terminal_progress_has_a_bar_and_no_empty_first_line():
    out = io.StringIO()
    with Progress("records", stream=out, tty=True):
        pass
    assert out.getvalue() == ""   # nothing counted: no "0 records [00:00, ?]" line
    out = io.StringIO()
    with Progress("records", stream=out, tty=True) as p:
        p.stage("reading corpus.jsonl")
        for i in range(1, 51):
            p.update(i, 50)
    text = out.getvalue()
    assert text.startswith("reading corpus.jsonl…\n") and "50/50" in text and "records" in text
    assert " 0 records" not in text


def test_json_progress_lines():
    out = io.StringIO()
    with Progress("terms", stream=out, json_lines=True, tty=True) as p:
        p.stage("indexing", terms=3)
        for i in range(1, 4):
            p.update(i, 3)
        p.write("note")
    events = _events(out.getvalue())
    assert len(events) == len(out.getvalue().splitlines())          # every line is JSON
    assert events[0] == {"event": "stage", "stage": "indexing", "terms": 3}
    progress = [e for e in events if e["event"] == "progress"]
    assert progress[0]["done"] == 1 and progress[-1] == {"event": "progress", "done": 3, "total": 3, "unit": "terms"}
    assert events[-1] == {"event": "message", "message": "note"}


def test_index_corpus_starts_without_a_stray_progress_line(tmp_path):
    from search.cli.main import main

    src = tmp_path / "corpus.jsonl"
    src.write_text(json.dumps({"pmcid": "PMC1", "title": "Dl in the wing", "abstract": "Delta.",
                               "sections": {"INTRO": ["Dl binds N."]}}) + "\n")
    r = CliRunner().invoke(main, ["index", "corpus", str(src), "--data-dir", str(tmp_path / "d")])
    assert r.exit_code == 0, r.output
    assert "records/s" not in r.stderr and "0 records" not in r.stderr
    assert r.stderr.startswith("read 1 · indexed 1 papers")
    r = CliRunner().invoke(main, ["index", "corpus", str(src), "--data-dir", str(tmp_path / "d2"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["indexed"] == 1
    last = _events(r.stderr)[-1]
    assert last["event"] == "progress" and last["done"] == 1 and last["unit"] == "records"


def test_index_ontology_stages_and_json(tmp_path, monkeypatch):
    from search.cli.main import main

    monkeypatch.setenv("FLYSIFT_ONTOLOGY_CACHE", str(tmp_path / "cache"))
    r = CliRunner().invoke(main, ["index", "ontology", str(FIX / "mini.obo"), "--name", "go", "--json", "--no-dense",
                                  "--data-dir", str(tmp_path / "d")])
    assert r.exit_code == 0, r.output
    stages = [e["stage"] for e in _events(r.stderr) if e["event"] == "stage"]
    assert stages[0].startswith("go: reading") and stages[1].startswith("go: indexing 25 terms")
    summary = json.loads(r.stdout)
    assert summary["ontology"] == "go" and summary["terms"] == 25 and summary["indexed"] == 25
    r = CliRunner().invoke(main, ["index", "ontology", str(FIX / "mini.obo"), "--name", "go", "--no-dense",
                                  "--data-dir", str(tmp_path / "d")])
    assert r.exit_code == 0 and r.stdout == "" and "reading" not in r.stderr   # piped: only the summary line
    assert len(r.stderr.strip().splitlines()) == 1


def test_eval_ir_counts_queries_per_stage():
    from eval.cli import _CountingClient

    class Fake:
        def search_papers(self, *_a, **_k):
            return {"hits": []}

        def stats(self):
            return "stats"

    out = io.StringIO()
    progress = Progress("queries", stream=out, json_lines=True)
    client = _CountingClient(Fake(), progress)
    client.stage("indexing 4 documents into beir-x")
    client.stage("querying 2 topics, mode bm25")
    client.search_papers("a")
    client.search_papers("b")
    assert client.stats() == "stats"
    progress.close()
    events = _events(out.getvalue())
    assert [e["stage"] for e in events if e["event"] == "stage"] == ["indexing 4 documents into beir-x",
                                                                     "querying 2 topics, mode bm25"]
    assert [e for e in events if e["event"] == "progress"][-1] == {"event": "progress", "done": 2, "total": 2,
                                                                   "unit": "queries"}


@pytest.mark.slow
def test_eval_ir_json_through_a_live_service(live_server, tmp_path):
    pytest.importorskip("ranx", reason="eval ir needs the eval extra (ranx)")
    from search.cli.main import main

    from helpers import write_beir

    coll = write_beir(tmp_path / "tiny")
    r = CliRunner().invoke(main, ["eval", "ir", "--collection", str(coll), "--url", live_server.url,
                                  "--into", "beir-tiny", "--out", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.output
    events = _events(r.stderr)
    assert any(e["event"] == "stage" and e["stage"].startswith("querying 3 topics") for e in events)
    assert {"event": "progress", "done": 3, "total": 3, "unit": "queries"} in events


def test_index_dense_progress_as_json_lines(tmp_path, monkeypatch):
    """The CLI side of a dense build (the build itself needs the dense extra: stubbed here)."""
    import indexer.dense_cli as dense_cli
    from search.cli.main import main

    def build(_data_dir, _collection, *, progress, **_kw):
        for done in (32, 64, 70):
            progress(done, 70)
        return {"count": 70, "index": "flat", "dim": 384, "seconds": 1.0, "passages_per_s": 70, "build": "b1"}

    monkeypatch.setattr(dense_cli, "build_dense", build)
    r = CliRunner().invoke(main, ["index", "dense", "--data-dir", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    events = _events(r.stderr)
    assert events[0]["event"] == "stage" and events[-1] == {"event": "progress", "done": 70, "total": 70,
                                                            "unit": "passages"}
    assert json.loads(r.stdout)["count"] == 70
    r = CliRunner().invoke(main, ["index", "dense", "--data-dir", str(tmp_path)])
    assert r.exit_code == 0 and r.stderr.startswith("dense index of 'default': 70 passages")   # piped: no bar
