"""The indexing run with a pool of worker processes: the same build as one process (papers, passages, rejects report,
duplicates) over several files and formats with bad records, results in input order with a bounded number of chunks
in flight, a progress total estimated from bytes, and Ctrl-C or a dead worker leaving a build the next run resumes."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from indexer import pipeline
from indexer.pipeline import Preparing, index_corpus
from indexer.sources import iter_units
from indexer.synthetic import SyntheticConfig, write_corpus
from search.core.config import Settings
from search.core.errors import InputError, Unavailable
from search.engines import open_engine
from search.services import Services

CURATION = Path(__file__).parents[1] / "fixtures" / "curation"
GOOD = {"pmcid": "PMC1", "title": "Dl in the wing", "abstract": "Delta.", "sections": {"INTRO": ["Dl binds N."]}}


def _bioc_document(pmc: str, title: str, para: str) -> str:
    return (f'<document><id>{pmc}</id><passage><infon key="section_type">TITLE</infon><infon key="type">front'
            f'</infon><text>{title}</text></passage><passage><infon key="section_type">INTRO</infon>'
            f'<infon key="type">paragraph</infon><text>{para}</text></passage></document>')


def _mixed_corpus(root: Path) -> Path:
    """A folder of every kind of input: JSONL (bad lines, duplicates, blank lines), a JSON array, gzipped JSONL,
    JATS files (one malformed), a BioC XML collection, an empty file and a file of unknown format."""
    root.mkdir()
    write_corpus(SyntheticConfig(n_papers=60, words_per_paper=400, seed=11), root.parent / "gen")
    shutil.copy(root.parent / "gen" / "corpus.jsonl", root / "a_synthetic.jsonl")
    lines = [json.dumps(GOOD), "{not json", "", json.dumps({"title": "no id", "abstract": "x", "sections": {}}),
             json.dumps({"pmcid": "PMC3", "title": "", "abstract": "", "sections": {}}),
             json.dumps({"pmcid": "PMC4", "title": "t", "abstract": "a", "sections": {"INTRO": 42}}),
             json.dumps({**GOOD, "title": "Dl in the wing, revised"})]
    (root / "b_bad.jsonl").write_text("\n".join(lines) + "\n")
    (root / "c_array.json").write_text(json.dumps([{**GOOD, "pmcid": "PMC5"}, {**GOOD, "title": "Dl, third"}, 7]))
    with gzip.open(root / "d_zipped.jsonl.gz", "wt") as fh:
        fh.write("\n".join(json.dumps({**GOOD, "pmcid": f"PMC7{i}", "title": f"zipped {i}"}) for i in range(5)))
    jats = root / "e_jats"
    jats.mkdir()
    for f in sorted(CURATION.glob("*.nxml")):
        shutil.copy(f, jats / f.name)
    (jats / "PMC999.nxml").write_text("<article><front><article-meta>")
    (root / "f_bioc.xml").write_text(
        '<?xml version="1.0"?><collection><source>PMC</source>'
        + _bioc_document("PMC801", "Notch in the eye", "Notch acts in the eye disc.")
        + _bioc_document("PMC900001", "eyeless again, from BioC", "A later copy of a JATS paper.")
        + "<document><id>PMC803</id><passage><text>broken</passage></document></collection>")
    (root / "g_empty.jsonl").write_text("")
    (root / "h_notes.csv").write_text("a,b\n")
    return root


def _build(corpus: Path, data: Path, workers: int, **kw) -> tuple[dict, bytes, dict, list]:
    summary = index_corpus([corpus], Services.open(Settings(data_dir=data)), workers=workers, commit_every=7, **kw)
    engine = open_engine(Settings(data_dir=data))
    passages = sorted(((p.model_dump(), title) for p, title in engine.scan_passages()), key=lambda x: x[0]["id"])
    papers = {pid: engine.get_paper(pid).model_dump() for pid in sorted({p["pmcid"] for p, _ in passages})}
    counts = summary.model_dump(include={"read", "indexed", "rejected", "duplicates", "passages"})
    return counts, Path(summary.rejects_file).read_bytes(), papers, passages


def test_a_pool_builds_what_one_process_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    corpus = _mixed_corpus(tmp_path / "corpus")
    monkeypatch.setattr(pipeline, "CHUNK_UNITS", 3)  # many chunks, more than the pool keeps in flight
    one = _build(corpus, tmp_path / "one", workers=1)
    pool = _build(corpus, tmp_path / "pool", workers=2)
    assert pool == one
    counts, rejects, papers, _ = pool
    # 60 synthetic + 6 + 3 + 5 + 4 JATS + 3 BioC + the empty and the unknown file; PMC1 three times, PMC900001 twice
    assert counts == {"read": 83, "indexed": 71, "rejected": 9, "duplicates": 3, "passages": counts["passages"]}
    reported = [(Path(r["source"]).name, r["record"]) for r in map(json.loads, rejects.splitlines())]
    assert reported == [("b_bad.jsonl", 2), ("b_bad.jsonl", 4), ("b_bad.jsonl", 5), ("b_bad.jsonl", 6),
                        ("c_array.json", 3), ("PMC999.nxml", 1), ("f_bioc.xml", 3), ("g_empty.jsonl", 0),
                        ("h_notes.csv", 0)]
    assert papers["PMC1"]["title"] == "Dl, third"  # the last one wins, across files
    assert papers["PMC900001"]["title"] == "eyeless again, from BioC"


def test_strict_stops_at_the_same_record_with_a_pool(tmp_path: Path):
    corpus = _mixed_corpus(tmp_path / "corpus")
    for workers in (1, 2):
        with pytest.raises(InputError) as exc:
            index_corpus([corpus], Services.open(Settings(data_dir=tmp_path / f"d{workers}")), strict=True,
                         workers=workers)
        assert exc.value.details.get("record", 2) == 2 and "b_bad.jsonl, record 2" in exc.value.message
        assert not list((tmp_path / f"d{workers}" / "collections" / "default" / "builds").glob("*/build.json"))


def test_results_come_back_in_input_order_with_bounded_chunks_in_flight(tmp_path: Path):
    lines = []
    for i in range(1, 201):  # sizes vary a lot, so chunks finish out of order
        words = " ".join(["wing"] * (3000 if i % 17 == 0 else 5))
        lines.append(json.dumps({"pmcid": f"PMC{i}", "title": f"paper {i}", "abstract": words, "sections": {}}))
    src = tmp_path / "c.jsonl"
    src.write_text("\n".join(lines) + "\n")
    units = iter_units([src])
    pulled = 0

    def counted():
        nonlocal pulled
        for unit in units:
            pulled += 1
            yield unit

    preparer = open_engine(Settings(data_dir=tmp_path / "d")).preparer()
    with Preparing(2, preparer) as preparing:
        results = preparing.run(counted())
        first = next(results)
        assert pulled <= pipeline.IN_FLIGHT_PER_WORKER * 2 * pipeline.CHUNK_UNITS
        rest = list(results)
    assert [r.record for r in [first, *rest]] == list(range(1, 201))
    assert [r.pmcid for r in [first, *rest]] == [f"PMC{i}" for i in range(1, 201)]
    assert rest[-1].end == src.stat().st_size and all(r.prepared is not None for r in rest)


def test_progress_total_is_estimated_from_bytes_and_exact_at_the_end(tmp_path: Path):
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({**GOOD, "pmcid": f"PMC{i}"}) + "\n" for i in range(1, 41)))
    calls: list[tuple[int, int | None]] = []
    summary = index_corpus([src], Services.open(Settings(data_dir=tmp_path / "d")), workers=1,
                           progress=lambda done, total: calls.append((done, total)))
    assert summary.read == 40
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and calls[-1] == (40, 40)
    assert all(total is not None and 38 <= total <= 42 for _, total in calls)  # lines of about one size


# ---------------------------------------------------------------------------------------------------------------
# interrupted runs, in a process of their own


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _workers(pid: int) -> list[int]:
    return [c for c in _children(pid) if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


def _start(corpus: Path, data: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "search.cli.main", "index", "corpus", str(corpus), "--data-dir", str(data),
           "--commit-every", "50", "--workers", "2", "--json"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _wait_for_commit(data: Path, consumed: int, proc: subprocess.Popen) -> None:
    builds = data / "collections" / "default" / "builds"
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        states = [json.loads(m.read_text()) for m in builds.glob("*/build.json")]
        if any(s["status"] == "building" and s["state"].get("consumed", 0) >= consumed for s in states):
            return
        time.sleep(0.05)
    pytest.fail(f"no commit past {consumed} records (exit {proc.poll()})")


def _run(corpus: Path, data: Path, *args: str) -> tuple[dict, str]:
    res = subprocess.run([sys.executable, "-m", "search.cli.main", "index", "corpus", str(corpus), "--data-dir",
                          str(data), "--json", *args], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1]), res.stderr


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="finds worker processes through Linux's /proc")
@pytest.mark.parametrize("how", ["ctrl-c", "worker killed"])
def test_an_interrupted_pool_run_resumes_to_the_same_build(tmp_path: Path, how: str):
    # 2,000 papers: the interruption comes at the third commit, with enough left that a busy machine cannot finish
    # the run between the test seeing that commit and sending the signal
    write_corpus(SyntheticConfig(n_papers=2000, words_per_paper=300, seed=5), tmp_path / "gen")
    corpus = tmp_path / "gen" / "corpus.jsonl"
    with open(corpus, "a") as fh:  # a reject and a duplicate past the interruption
        fh.write("{broken\n" + corpus.read_text().splitlines()[0] + "\n")
    data = tmp_path / "data"
    proc = _start(corpus, data)
    try:
        _wait_for_commit(data, 150, proc)
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends: the whole process group
        else:
            workers = _workers(proc.pid)
            assert len(workers) == 2
            os.kill(workers[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0, err[-2000:]   # the run's own account, should it ever finish regardless
    if how == "ctrl-c":
        assert proc.returncode == 130 and b"interrupted: the build is kept" in err, err[-2000:]
    if how == "worker killed":
        assert proc.returncode == 2 and b"worker process stopped" in err and b"Traceback" not in err
    [state] = [json.loads(m.read_text()) for m in (data / "collections" / "default" / "builds").glob("*/build.json")]
    assert state["status"] == "building" and state["state"]["consumed"] >= 150  # kept for the resume

    resumed, err = _run(corpus, data)
    assert "resumed an interrupted build" in err
    fresh, _ = _run(corpus, tmp_path / "fresh", "--workers", "1")
    counts = ("read", "indexed", "rejected", "duplicates")
    assert [resumed[k] for k in counts] == [fresh[k] for k in counts] == [2002, 2000, 1, 1]
    rejects = [json.loads(x) for d in (data, tmp_path / "fresh") for x in
               next((d / "rejects").glob("*.jsonl")).read_text().splitlines()]
    assert [r["record"] for r in rejects] == [2001, 2001]


class _InterruptsInItsFinaliser:
    """An object whose finaliser gets Ctrl-C: where Python's own handler raises KeyboardInterrupt there, Python
    prints "Exception ignored" and the program carries on as if no Ctrl-C had come."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)


def test_a_ctrl_c_that_lands_in_a_finaliser_still_stops_the_run_and_keeps_the_build(tmp_path: Path):
    write_corpus(SyntheticConfig(n_papers=60, words_per_paper=300, seed=5), tmp_path / "gen")
    corpus = tmp_path / "gen" / "corpus.jsonl"
    data = tmp_path / "data"
    calls: list[int] = []

    def progress(done: int, _total: int | None) -> None:
        calls.append(done)
        if done == 20:
            _InterruptsInItsFinaliser()   # dropped at once: the finaliser runs here

    with pytest.raises(KeyboardInterrupt):
        index_corpus([corpus], Services.open(Settings(data_dir=data)), workers=1, commit_every=7, progress=progress)
    assert max(calls) == 20   # stopped at the next record
    [state] = [json.loads(m.read_text()) for m in (data / "collections" / "default" / "builds").glob("*/build.json")]
    assert state["status"] == "building" and state["state"]["consumed"] == 14   # kept, as of its last commit
    resumed = index_corpus([corpus], Services.open(Settings(data_dir=data)), workers=1, commit_every=7)
    assert (resumed.resumed_from, resumed.read, resumed.indexed) == (14, 60, 60)


class DiesWhileSending:
    """A preparer that, for one paper, does what a worker killed half-way through sending its result leaves behind:
    the start of a message on the pool's result pipe (a length of 1 MB, then 100 bytes), then the worker gone."""

    def __init__(self, preparer, pmcid: str):
        self.preparer, self.pmcid = preparer, pmcid

    def __call__(self, paper, passages):
        if paper.pmcid == self.pmcid:
            frame = sys._getframe()
            while frame is not None and "result_queue" not in frame.f_locals:
                frame = frame.f_back
            assert frame is not None, "not in a pool worker"
            frame.f_locals["result_queue"]._writer._send(struct.pack("!i", 1 << 20) + b"x" * 100)
            os._exit(1)
        return self.preparer(paper, passages)


def test_a_worker_dying_half_way_through_its_result_breaks_the_run_instead_of_hanging(tmp_path: Path):
    lines = [json.dumps({"pmcid": f"PMC{i}", "title": f"paper {i}", "abstract": "wing " * 50, "sections": {}})
             for i in range(1, 301)]
    src = tmp_path / "c.jsonl"
    src.write_text("\n".join(lines) + "\n")
    preparer = DiesWhileSending(open_engine(Settings(data_dir=tmp_path / "d")).preparer(), "PMC70")
    done: list[str] = []

    def run() -> None:
        try:
            with Preparing(2, preparer) as preparing:
                for _ in preparing.run(iter_units([src])):
                    pass
        except Unavailable as exc:
            done.append(str(exc))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=90)   # before the watch, CPython's pool waited for the rest of the message for ever
    assert not t.is_alive(), "the run hung on a worker that died while sending its result"
    assert done and "worker process stopped unexpectedly" in done[0]
