"""Issue #9, items 2, 5 and 7: a bad or small build never replaces a live index, failed builds hold no disk or lock,
disk faults end the indexer with one line, and API builds survive searches and calls running beside them.

The hostile corpus files are in ``tests/fixtures/bad_inputs/builds/`` (see its README.md).
"""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from search.api.app import create_app
from search.cli.main import main
from search.core.config import Settings
from search.core.models import Paper, Section
from search.engines import BuildRefused, publish_refusal
from search.engines.embedded import build as embedded_module
from search.engines.embedded.engine import EmbeddedEngine
from search.text.passages import split_passages

from helpers import PAPERS, LiveServer, build_index

BAD = Path(__file__).parents[1] / "fixtures" / "bad_inputs" / "builds"
REPO = Path(__file__).resolve().parents[2]
BAD_CORPUS_FILES = ["truncated.nxml", "random_bytes.nxml", "empty.nxml", "empty.jsonl", "blank_lines.jsonl",
                    "csv_named.jsonl", "binary.json", "empty_array.json"]


def paper(i: int) -> Paper:
    return Paper(pmcid=f"PMC{900000 + i}", year=2000 + i % 20, title=f"Wing disc paper {i}",
                 abstract="Dpp and Wg pattern the wing imaginal disc.",
                 sections=[Section(type="RESULTS", paragraphs=[f"Result {i}: dpp expression in the pouch.",
                                                               "Wg at the margin."])])


def write_jsonl(path: Path, papers: list[Paper]) -> Path:
    path.write_text("".join(p.model_dump_json() + "\n" for p in papers))
    return path


def run_index(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["index", "corpus", *args])
    return res.exit_code, res.output


def builds_of(data: Path, collection: str = "default") -> set[str]:
    folder = data / "collections" / collection / "builds"
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


def current(data: Path, collection: str = "default") -> str:
    return json.loads((data / "collections" / collection / "CURRENT").read_text())["build"]


@pytest.fixture
def live(tmp_path: Path) -> Path:
    """A data dir whose live build holds 10 papers, indexed by the CLI."""
    data = tmp_path / "data"
    code, out = run_index(str(write_jsonl(tmp_path / "live.jsonl", [paper(i) for i in range(10)])),
                          "--data-dir", str(data))
    assert code == 0, out
    return data


# ---- item 2: publish guards ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", BAD_CORPUS_FILES)
def test_bad_input_file_is_refused_and_the_live_build_keeps_serving(live: Path, name: str):
    before, kept = current(live), builds_of(live)
    code, out = run_index(str(BAD / name), "--data-dir", str(live))
    assert code != 0, out
    errors = [line for line in out.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "build_refused" in errors[0] and "Traceback" not in out
    assert current(live) == before and EmbeddedEngine(live).stats().papers == 10
    assert builds_of(live) == kept  # the refused build left nothing behind
    rejects = [json.loads(x) for f in (live / "rejects").glob("*.jsonl") for x in f.read_text().splitlines()]
    assert rejects and all(r["source"] == str(BAD / name) and r["reason"] for r in rejects)


def test_nothing_is_published_into_an_empty_collection_either(tmp_path: Path):
    data = tmp_path / "data"
    code, out = run_index(str(BAD / "empty.jsonl"), "--data-dir", str(data))
    assert code != 0 and "build_refused" in out
    assert not (data / "collections" / "default" / "CURRENT").exists() and builds_of(data) == set()


def test_a_build_much_smaller_than_the_live_one_needs_allow_shrink(live: Path, tmp_path: Path):
    small = str(write_jsonl(tmp_path / "small.jsonl", [paper(i) for i in range(3)]))
    before = current(live)
    code, out = run_index(small, "--data-dir", str(live))
    assert code != 0 and "build_refused" in out and "--allow-shrink" in out and "3 papers" in out
    assert current(live) == before and EmbeddedEngine(live).stats().papers == 10 and len(builds_of(live)) == 1
    code, out = run_index(small, "--data-dir", str(live), "--allow-shrink")
    assert code == 0, out
    assert EmbeddedEngine(live).stats().papers == 3


def test_the_shrink_threshold_is_a_setting(live: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("FLYSIFT_MIN_PUBLISH_SHARE", "0.25")
    code, out = run_index(str(write_jsonl(tmp_path / "s.jsonl", [paper(i) for i in range(3)])), "--data-dir", str(live))
    assert code == 0, out  # 3 of 10 is above 25 %
    assert EmbeddedEngine(live).stats().papers == 3


def test_publish_refusal_rule():
    assert publish_refusal(0, 0) and publish_refusal(0, 5, allow_shrink=True)  # empty: never
    assert publish_refusal(4, 10) and publish_refusal(4, 10, allow_shrink=True) is None
    assert publish_refusal(5, 10) is None and publish_refusal(1, 0) is None
    assert publish_refusal(9, 10, min_share=0.95) and publish_refusal(1, 10, min_share=0.0) is None


def test_unknown_file_in_a_folder_is_a_reject_not_silence(tmp_path: Path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_jsonl(folder / "good.jsonl", [paper(1)])
    shutil.copy(BAD / "not_a_data_file.csv", folder / "table.csv")
    (folder / "README.md").write_text("a dataset card: documentation, not data")
    data = tmp_path / "data"
    code, out = run_index(str(folder), "--data-dir", str(data))
    assert code == 0, out
    rejects = [json.loads(x) for f in (data / "rejects").glob("*.jsonl") for x in f.read_text().splitlines()]
    assert [(Path(r["source"]).name, r["record"]) for r in rejects] == [("table.csv", 0)]
    assert "unknown input format" in rejects[0]["reason"]


# ---- item 7: failed and killed builds hold no disk; disk faults are one line -------------------------------------
def test_a_failed_strict_run_removes_its_build(live: Path, tmp_path: Path):
    kept = builds_of(live)
    src = tmp_path / "mixed.jsonl"
    src.write_text(paper(1).model_dump_json() + "\n{broken\n")
    code, out = run_index(str(src), "--data-dir", str(live), "--strict")
    assert code != 0 and "record 2" in out
    assert builds_of(live) == kept and EmbeddedEngine(live).stats().papers == 10


def test_abandoned_partial_builds_are_removed_by_the_next_run(live: Path, tmp_path: Path):
    builds = live / "collections" / "default" / "builds"
    (builds / "20200101T000000-aaaaaa" / "papers").mkdir(parents=True)  # killed before build.json was written
    (builds / "20200101T000000-aaaaaa" / "papers" / "segment").write_bytes(b"x" * 1000)
    (builds / "20200101T000001-bbbbbb").mkdir()
    (builds / "20200101T000001-bbbbbb" / "build.json").write_text("{truncated")  # killed while writing it
    (builds / "20200101T000002-cccccc").mkdir()
    (builds / "20200101T000002-cccccc" / "build.json").write_text(json.dumps(
        {"fingerprint": "other input", "status": "building", "state": {}}))
    code, out = run_index(str(write_jsonl(tmp_path / "more.jsonl", [paper(i) for i in range(12)])),
                          "--data-dir", str(live))
    assert code == 0, out
    assert not any(n.startswith("20200101") for n in builds_of(live))
    assert EmbeddedEngine(live).stats().papers == 12


def _limited(limit_bytes: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return apply


@pytest.mark.slow
def test_a_full_disk_ends_the_indexer_with_one_line_and_frees_the_space(live: Path, tmp_path: Path):
    """A real write failure: the indexer runs with a file-size limit, so tantivy, SQLite and Python writes fail the way
    they do on a full disk (root cannot be stopped by permissions, but is by RLIMIT_FSIZE)."""
    filler = [f"Paragraph {k}: the Dpp gradient scales with the growing wing disc. " * 12 for k in range(10)]
    big = write_jsonl(tmp_path / "big.jsonl", [paper(i).model_copy(update={"sections": [
        Section(type="RESULTS", paragraphs=filler)]}) for i in range(600)])
    before, kept = current(live), builds_of(live)
    cmd = [sys.executable, "-m", "search.cli.main", "index", "corpus", str(big), "--data-dir", str(live),
           "--commit-every", "100"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path,
                          preexec_fn=_limited(200_000), timeout=300)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "storage_" in errors[0] and str(live) in errors[0] and "--data-dir" in errors[0]
    assert builds_of(live) == kept  # the partial build is gone: it does not keep the disk full
    assert current(live) == before and EmbeddedEngine(live).stats().papers == 10
    code, out = run_index(str(big), "--data-dir", str(live))  # with room again, the same input indexes
    assert code == 0, out
    assert EmbeddedEngine(live).stats().papers == 600


def test_a_read_only_data_dir_ends_the_indexer_with_one_line(live: Path, tmp_path: Path, monkeypatch):
    src = str(write_jsonl(tmp_path / "more.jsonl", [paper(i) for i in range(12)]))
    collection = live / "collections" / "default"
    before, kept = current(live), builds_of(live)
    if os.geteuid() != 0:
        for d in (collection, collection / "builds"):
            d.chmod(0o555)
    else:  # root writes through permission bits: fail the first write into the build as a read-only mount does
        def read_only(path: Path, data: dict) -> None:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        monkeypatch.setattr(embedded_module, "_write_json_atomic", read_only)
    try:
        code, out = run_index(src, "--data-dir", str(live))
    finally:
        for d in (collection, collection / "builds"):
            d.chmod(0o755)
    assert code != 0 and "Traceback" not in out
    errors = [line for line in out.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "storage_read_only" in errors[0] and str(collection) in errors[0]
    assert "writable" in errors[0] and "--data-dir" in errors[0]
    assert current(live) == before and builds_of(live) == kept


# ---- item 5: builds over the API -------------------------------------------------------------------------------------
def _docs(start: int, n: int) -> list[dict]:
    return [json.loads(paper(i).model_dump_json()) for i in range(start, start + n)]


@pytest.fixture
def server(data_dir: Path):
    with LiveServer(create_app(Settings(data_dir=data_dir))) as srv:
        yield srv


def test_api_builds_beside_searches_never_answer_5xx_nor_leave_a_lock(server, data_dir: Path):
    """Five collections built at once (two threads adding to each build), searches running beside them."""
    statuses: list[tuple[str, int, str]] = []
    done = threading.Event()
    collections = [f"coll-{k}" for k in range(5)]

    def record(what: str, r: httpx.Response) -> httpx.Response:
        statuses.append((what, r.status_code, r.text[:300]))
        return r

    def search() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            while not done.is_set():
                for coll in ["default", *collections]:
                    record("search", c.post("/v1/papers/search", json={"query": "wing", "collection": coll}))
                    record("passages", c.post("/v1/passages/search", json={"query": "dpp", "collection": coll}))
                record("stats", c.get("/v1/stats", params={"collection": "default"}))

    def build(coll: str) -> None:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            bid = record("create", c.post(f"/v1/collections/{coll}/builds")).json()["build_id"]

            def add(start: int) -> None:
                record("add", c.post(f"/v1/collections/{coll}/builds/{bid}/papers", json={"papers": _docs(start, 5)}))

            adders = [threading.Thread(target=add, args=(s,)) for s in (0, 5, 10, 15)]
            for t in adders:
                t.start()
            for t in adders:
                t.join()
            record("publish", c.post(f"/v1/collections/{coll}/builds/{bid}/publish"))

    searchers = [threading.Thread(target=search) for _ in range(3)]
    builders = [threading.Thread(target=build, args=(c,)) for c in collections]
    for t in searchers + builders:
        t.start()
    for t in builders:
        t.join()
    done.set()
    for t in searchers:
        t.join()
    # a collection not yet published answers "no index" (404/503 index_missing), never a server error
    assert [s for s in statuses if s[1] >= 500 and "index_missing" not in s[2]] == []
    assert all(code == 200 for what, code, _ in statuses if what in ("create", "add", "publish")), statuses
    assert {code for what, code, _ in statuses if what not in ("create", "add", "publish")} <= {200, 404, 503}
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for coll in collections:
            assert c.get("/v1/stats", params={"collection": coll}).json()["papers"] == 20
            r = c.post(f"/v1/collections/{coll}/builds")  # nothing is left locked
            assert r.status_code == 200, r.text
            assert c.delete(f"/v1/collections/{coll}/builds/{r.json()['build_id']}").status_code == 200


def test_api_publish_guard_abort_and_expiry(tmp_path: Path):
    data = tmp_path / "data"
    build_index(data, [paper(i) for i in range(10)], collection="ir")
    with LiveServer(create_app(Settings(data_dir=data))) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        bid = c.post("/v1/collections/ir/builds").json()["build_id"]
        r = c.post(f"/v1/collections/ir/builds/{bid}/publish")  # empty
        assert r.status_code == 409 and r.json()["error"]["code"] == "build_refused"
        assert c.post(f"/v1/collections/ir/builds/{bid}/papers", json={"papers": _docs(0, 2)}).status_code == 200
        r = c.post(f"/v1/collections/ir/builds/{bid}/publish")  # 2 of 10: too small
        assert r.status_code == 409 and r.json()["error"]["details"]["live"] == 10
        assert c.get("/v1/stats", params={"collection": "ir"}).json()["papers"] == 10
        r = c.post("/v1/collections/ir/builds")  # the refused build is still open and holds the collection
        assert r.status_code == 409 and r.json()["error"]["code"] == "busy" and bid in r.json()["error"]["message"]
        r = c.post(f"/v1/collections/ir/builds/{bid}/publish", params={"allow_shrink": "true"})
        assert r.status_code == 200 and r.json()["indexed"] == 2
        assert c.get("/v1/stats", params={"collection": "ir"}).json()["papers"] == 2
        assert c.post(f"/v1/collections/ir/builds/{bid}/publish").status_code == 404  # published: no longer open

        bid = c.post("/v1/collections/ir/builds").json()["build_id"]
        assert c.post(f"/v1/collections/ir/builds/{bid}/papers", json={"papers": _docs(0, 3)}).status_code == 200
        assert c.delete(f"/v1/collections/ir/builds/{bid}").json()["aborted"] is True
        assert bid not in builds_of(data, "ir") and c.delete(f"/v1/collections/ir/builds/{bid}").status_code == 404
        assert c.get("/v1/stats", params={"collection": "ir"}).json()["papers"] == 2

    # a build nobody uses for build_idle_timeout_s is aborted by the next build call: its collection unlocks
    with LiveServer(create_app(Settings(data_dir=data, build_idle_timeout_s=0))) as srv, \
            httpx.Client(base_url=srv.url, timeout=60) as c:
        first = c.post("/v1/collections/ir/builds").json()["build_id"]
        r = c.post("/v1/collections/ir/builds")
        assert r.status_code == 200, r.text
        assert first not in builds_of(data, "ir")


def test_api_build_whose_write_fails_is_aborted_and_unlocks(tmp_path: Path, monkeypatch):
    data = tmp_path / "data"
    build_index(data, PAPERS)
    real = embedded_module._write_json_atomic
    failing = {"on": True}

    def disk_full(path: Path, payload: dict) -> None:
        if failing["on"] and path.name == "build.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, payload)

    monkeypatch.setattr(embedded_module, "_write_json_atomic", disk_full)
    with LiveServer(create_app(Settings(data_dir=data))) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        r = c.post("/v1/collections/default/builds")  # fails while the build is being created
        assert r.status_code == 507 and r.json()["error"]["code"] == "storage_full", r.text
        assert "data-dir" in r.json()["error"]["message"]
        failing["on"] = False
        bid = c.post("/v1/collections/default/builds").json()["build_id"]
        failing["on"] = True
        r = c.post(f"/v1/collections/default/builds/{bid}/papers", json={"papers": _docs(0, 5)})  # fails at commit
        assert r.status_code == 507, r.text
        failing["on"] = False
        assert c.post(f"/v1/collections/default/builds/{bid}/papers", json={"papers": _docs(0, 5)}).status_code == 404
        r = c.post("/v1/collections/default/builds")  # the failed build released the collection
        assert r.status_code == 200, r.text
        assert builds_of(data) == {current(data), r.json()["build_id"]}
        assert c.get("/v1/stats").json()["papers"] == len(PAPERS)


def test_embedded_build_is_usable_from_any_thread(tmp_path: Path):
    """The build's SQLite connection and writers are used by whatever thread the API runs a call on."""
    engine = EmbeddedEngine(tmp_path / "data")
    build = engine.open_build("threads", resume=False)
    errors: list[BaseException] = []

    def add(start: int) -> None:
        try:
            for i in range(start, start + 5):
                build.add(paper(i), split_passages(paper(i)))
            build.commit({})
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(s,)) for s in (0, 5, 10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    build.publish()
    assert engine.stats().papers == 15
    with pytest.raises(Exception) as e:  # a published build is closed, whatever thread asks
        build.add(paper(99), [])
    assert getattr(e.value, "code", None) == "build_closed"


def test_refused_engine_build_stays_open_and_can_be_aborted(tmp_path: Path):
    data = tmp_path / "data"
    engine = build_index(data, [paper(i) for i in range(10)])
    build = engine.open_build("small", resume=False)
    build.add(paper(1), split_passages(paper(1)))
    with pytest.raises(BuildRefused) as e:
        build.publish()
    assert e.value.status == 409 and e.value.details["indexed"] == 1 and e.value.details["live"] == 10
    build.add(paper(2), split_passages(paper(2)))  # still open
    build.abort(discard=True)
    assert build.id not in builds_of(data) and engine.stats().papers == 10


# ---- the same guards on the cluster engine ---------------------------------------------------------------------------
@pytest.mark.cluster
def test_cluster_publish_guard_keeps_the_live_version_and_discard_drops_the_build(cluster_node, cluster_settings):
    from search.engines.cluster.engine import ClusterEngine

    engine = ClusterEngine(cluster_settings)
    live = engine.open_build("live", resume=False)
    for i in range(10):
        live.add(paper(i), split_passages(paper(i)))
    live.commit({})
    live.publish()
    empty = engine.open_build("empty", resume=False)
    with pytest.raises(BuildRefused):
        empty.publish(allow_shrink=True)  # an empty build is never published
    empty.abort(discard=True)
    assert cluster_node.indices(empty.papers_index + "*") == []  # a failed build holds no disk on the cluster
    small = engine.open_build("small", resume=False)
    small.add(paper(1), split_passages(paper(1)))
    with pytest.raises(BuildRefused) as e:
        small.publish()
    assert e.value.details == {"build": small.id, "indexed": 1, "live": 10, "min_share": 0.5}
    assert engine.stats().build == live.id and engine.stats().papers == 10
    small.publish(allow_shrink=True)
    assert engine.stats().build == small.id and engine.stats().papers == 1
