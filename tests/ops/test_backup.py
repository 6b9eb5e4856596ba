"""Backups (issue #28, Operate 4): sessions and builds made, backed up while agents keep working, the data dir
wiped, restored: every session, budget, trace, submission, key and search is as it was at the backup, and a cursor
handed out before still continues."""

from __future__ import annotations

import json
import re
import shutil
import threading
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

import search.engines.embedded.backup as embedded_backup
from search.api.app import create_app
from search.cli.main import main
from search.core.config import Settings
from search.core.models import Gene, Paper, Section
from search.engines.embedded.engine import EmbeddedEngine
from search.engines.embedded.terms import TermIndex
from search.ontology.model import Ontology
from search.ops import backup as ops_backup
from search.sessions.keys import new_key
from search.sessions.store import SqliteStore
from search.text.lexicon import Lexicon
from search.text.passages import split_passages

from helpers import PAPERS, LiveServer, build_index, term_service

FIX = Path(__file__).parents[1] / "fixtures"
QUERIES = ["wing", "Dl", "Su(H)", "growth disc", "dorsal gradient"]
GENE = Gene(id="FBgn0000463", symbol="Dl", fullname="Delta")


def _data(root: Path) -> Path:
    d = root / "data"
    long_paper = Paper(pmcid="PMC200001", title="Delta in the wing", abstract="Dl and N.",
                       sections=[Section(type="RESULTS", paragraphs=[f"Paragraph {i}: Dl signals. " * 30
                                                                     for i in range(8)])])
    build_index(d, [*PAPERS, long_paper])
    build_index(d, PAPERS[:3], collection="ir")
    term_service(d).index_ontology(Ontology.load(FIX / "mini.obo", "go", cache_dir=root / "cache"), TermIndex(d).write)
    Lexicon([GENE]).save(d / "lexicon.tsv")
    store = SqliteStore(d / "sessions.sqlite")
    store.create_team("lab1")
    store.add_key(new_key("lab1", ["agent"], "harness")[1])
    store.close()
    return d


def _timeless(r: httpx.Response) -> object:
    return json.loads(re.sub(r'"(took_ms|latency_ms)":[0-9.e+-]+', '"\\1":0', r.text))


def _state(c: httpx.Client, sids: list[str]) -> dict:
    """Everything a client can read back that a backup must keep."""
    out: dict = {"sessions": {}, "searches": {}}
    for sid in sids:
        out["sessions"][sid] = {part: _timeless(c.get(f"/v1/sessions/{sid}{part}"))
                                for part in ("", "/trace", "/submission")}
    for q in QUERIES:
        for coll in ("default", "ir"):
            out["searches"][(q, coll)] = _timeless(c.post("/v1/papers/search", json={"query": q, "collection": coll}))
        out["searches"][(q, "passages")] = _timeless(c.post("/v1/passages/search", json={"query": q}))
    out["terms"] = _timeless(c.get("/v1/terms/search", params={"query": "transcription factor"}))
    listed = c.get("/v1/sessions", params={"limit": 1000}).json()["sessions"]
    out["sessions_list"] = [s for s in listed if s["id"] in sids]
    return out


def test_back_up_under_load_wipe_restore_and_everything_is_equal(tmp_path: Path):
    data = _data(tmp_path)
    backup_dir = tmp_path / "backups" / "b1"
    with LiveServer(create_app(Settings(data_dir=data, rate_limit_per_minute=0))) as srv, \
            httpx.Client(base_url=srv.url, timeout=60) as c:
        sids = []
        for k, budget in enumerate((2, 3, 5)):
            sid = c.post("/v1/sessions", json={"gene": "Dl", "max_papers": budget, "label": f"run {k}"}).json()["id"]
            head = {"X-Session-Id": sid}
            c.post("/v1/papers/search", json={"query": "Dl wing", "gene": "Dl"}, headers=head)
            for p in PAPERS[:k + 2]:   # the first session runs out of budget: a refusal is traced too
                c.get(f"/v1/papers/{p.pmcid}", headers=head)
            c.post(f"/v1/sessions/{sid}/names", json={"names": [f"name-{k}"]})
            c.post(f"/v1/sessions/{sid}/submission", json={"gene_id": GENE.id, "annotations": []})
            sids.append(sid)
        c.post(f"/v1/sessions/{sids[0]}/close")
        cursor_sid = sids[2]
        page = c.get("/v1/papers/PMC200001", params={"max_chars": 300}, headers={"X-Session-Id": cursor_sid}).json()
        assert page["next_cursor"]
        before = _state(c, sids)

        load_sid = c.post("/v1/sessions", json={"gene": "Dl", "max_papers": 1000}).json()["id"]
        stop = threading.Event()
        errors: list[str] = []

        def load() -> None:   # an agent working all through the backup: searches, reads, names
            with httpx.Client(base_url=srv.url, timeout=60) as a:
                i = 0
                while not stop.is_set():
                    for r in (a.post("/v1/passages/search", json={"query": QUERIES[i % len(QUERIES)]},
                                     headers={"X-Session-Id": load_sid}),
                              a.get(f"/v1/papers/{PAPERS[i % len(PAPERS)].pmcid}", headers={"X-Session-Id": load_sid}),
                              a.post(f"/v1/sessions/{load_sid}/names", json={"names": [f"load-{i}"]})):
                        if r.status_code != 200:
                            errors.append(r.text[:200])
                    i += 1

        agents = [threading.Thread(target=load) for _ in range(2)]
        for t in agents:
            t.start()
        try:
            while not c.get(f"/v1/sessions/{load_sid}/trace").json()["events"]:
                pass
            r = CliRunner().invoke(main, ["backup", "create", str(backup_dir), "--data-dir", str(data)])
            assert r.exit_code == 0, r.output
        finally:
            stop.set()
            for t in agents:
                t.join()
        assert errors == []
        live_load_trace = c.get(f"/v1/sessions/{load_sid}/trace", params={"limit": 10_000}).json()["events"]
        assert _state(c, sids) == before   # the load touched only its own session

    shutil.rmtree(data)   # the disk is lost
    assert not data.exists()
    r = CliRunner().invoke(main, ["backup", "restore", str(backup_dir), "--data-dir", str(data)])
    assert r.exit_code == 0, r.output

    with LiveServer(create_app(Settings(data_dir=data, rate_limit_per_minute=0))) as srv, \
            httpx.Client(base_url=srv.url, timeout=60) as c:
        assert c.get("/v1/ready").status_code == 200
        assert _state(c, sids) == before
        restored = c.get(f"/v1/sessions/{load_sid}/trace", params={"limit": 10_000}).json()["events"]
        # the load session as of one instant: a whole prefix of what it went on to record
        assert restored and restored == live_load_trace[:len(restored)]
        session = c.get(f"/v1/sessions/{load_sid}").json()
        reads = [e for e in restored if e["tool"] == "get_paper" and e["status"] == 200]
        assert session["budget_used"] == len({e["arguments"]["pmcid"] for e in reads})
        nxt = c.get("/v1/papers/PMC200001", params={"cursor": page["next_cursor"]},
                    headers={"X-Session-Id": cursor_sid})
        assert nxt.status_code == 200, nxt.text   # the cursor secret came back with the sessions
    keys = SqliteStore(data / "sessions.sqlite").list_keys("lab1")
    assert [k.name for k in keys] == ["harness"]


def test_restore_refuses_a_live_data_dir_without_force_and_keeps_it_with_force(tmp_path: Path):
    data = _data(tmp_path)
    CliRunner().invoke(main, ["backup", "create", str(tmp_path / "b"), "--data-dir", str(data)])
    r = CliRunner().invoke(main, ["backup", "restore", str(tmp_path / "b"), "--data-dir", str(data)])
    assert r.exit_code == 2 and "--force" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["backup", "restore", str(tmp_path / "b"), "--data-dir", str(data), "--force"])
    assert r.exit_code == 0, r.output
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("data.replaced-")]
    assert len(kept) == 1 and (kept[0] / "sessions.sqlite").exists()


def test_a_damaged_backup_is_refused_naming_the_file(tmp_path: Path):
    data = _data(tmp_path)
    CliRunner().invoke(main, ["backup", "create", str(tmp_path / "b"), "--data-dir", str(data)])
    victim = next((tmp_path / "b" / "collections" / "default").rglob("papers.db"))
    victim.write_bytes(victim.read_bytes()[:-10] + b"0123456789")
    r = CliRunner().invoke(main, ["backup", "restore", str(tmp_path / "b"), "--data-dir", str(tmp_path / "new")])
    assert r.exit_code == 2 and "papers.db differs" in r.output and not (tmp_path / "new").exists()
    r = CliRunner().invoke(main, ["backup", "verify", str(tmp_path / "b")])
    assert r.exit_code == 2
    (tmp_path / "b" / ops_backup.MANIFEST).unlink()   # an unfinished backup has no manifest
    r = CliRunner().invoke(main, ["backup", "restore", str(tmp_path / "b"), "--data-dir", str(tmp_path / "new")])
    assert r.exit_code == 2 and "not a flysift backup" in r.output


def test_a_backup_with_a_cluster_snapshot_needs_its_cluster(tmp_path: Path):
    """The snapshot of a cluster-mode backup is checked in the cluster: without one configured, verify and restore
    refuse in one line (test_backup_cluster.py does the rest on a real node)."""
    data = _data(tmp_path)
    CliRunner().invoke(main, ["backup", "create", str(tmp_path / "b"), "--data-dir", str(data)])
    manifest = json.loads((tmp_path / "b" / ops_backup.MANIFEST).read_text())
    manifest["snapshot"] = {"snapshot": "flysift-20260101-000000", "repository": "flysift-backups",
                            "indices": ["flysift-sessions-sessions"], "documents": 3}
    (tmp_path / "b" / ops_backup.MANIFEST).write_text(json.dumps(manifest))
    env = {"FLYSIFT_CLUSTER_URL": "", "FLYSIFT_ENGINE": "embedded"}
    for args in (["verify", str(tmp_path / "b")],
                 ["restore", str(tmp_path / "b"), "--data-dir", str(tmp_path / "new")]):
        r = CliRunner().invoke(main, ["backup", *args], env=env)
        assert r.exit_code == 2 and "holds cluster snapshot flysift-20260101-000000" in r.output, r.output
        assert "FLYSIFT_CLUSTER_URL" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "new").exists()
    with pytest.raises(ops_backup.BackupError, match="settings for its cluster"):
        ops_backup.verify(tmp_path / "b")


def test_a_configuration_error_leaves_no_half_backup(tmp_path: Path):
    data = _data(tmp_path)
    env = {"FLYSIFT_COLLECTIONS": json.dumps({"default": {"bm25_k1": 2.0}})}   # k1 needs the cluster engine
    r = CliRunner().invoke(main, ["backup", "create", str(tmp_path / "b"), "--data-dir", str(data)], env=env)
    assert r.exit_code != 0 and "config_error" in r.output, r.output
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".b.")]


def test_a_backup_or_restore_failing_midway_leaves_no_half_folder(tmp_path: Path, monkeypatch):
    """Both fill a hidden folder beside their target and move it into place: a failure removes it, and the target
    (a new backup folder, a live data dir) is as it was."""
    data = _data(tmp_path)
    ops_backup.create(Settings(data_dir=data), tmp_path / "b")
    before = sorted(p.name for p in data.iterdir())

    def full(*_a, **_k):
        raise OSError("No space left on device")

    monkeypatch.setattr(ops_backup, "_files", full)
    with pytest.raises(OSError, match="No space"):
        ops_backup.create(Settings(data_dir=data), tmp_path / "b2")
    monkeypatch.setattr(ops_backup.shutil, "copy2", full)
    with pytest.raises(OSError, match="No space"):
        ops_backup.restore(tmp_path / "b", data, force=True)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert not (tmp_path / "b2").exists() and sorted(p.name for p in data.iterdir()) == before


def test_a_backup_never_lands_in_a_folder_that_holds_something(tmp_path: Path):
    data = _data(tmp_path)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("mine")
    r = CliRunner().invoke(main, ["backup", "create", str(tmp_path / "b"), "--data-dir", str(data)])
    assert r.exit_code == 2 and "not empty" in r.output


def test_a_publish_during_the_copy_gives_the_new_build_whole(tmp_path: Path, monkeypatch):
    """Two publishes while a build is copied would remove it (two builds are kept): the copy starts again from the
    build CURRENT names then."""
    data = _data(tmp_path)
    engine = EmbeddedEngine(data)
    real = embedded_backup.copy_tree
    published: list[str] = []

    def copy_then_publish(src: Path, dst: Path, link: bool) -> int:
        n = real(src, dst, link)
        if not published and "collections/default" in str(src):
            for _ in range(2):
                build = engine.open_build("again", resume=False)
                for p in PAPERS:
                    build.add(p, split_passages(p))
                build.commit({})
                build.publish()
                published.append(build.id)
        return n

    monkeypatch.setattr(embedded_backup, "copy_tree", copy_then_publish)
    manifest = ops_backup.create(Settings(data_dir=data), tmp_path / "b")
    assert manifest["indexes"]["collections"]["default"]["build"] == published[-1]
    assert json.loads((tmp_path / "b" / "collections" / "default" / "CURRENT").read_text())["build"] == published[-1]
    r = CliRunner().invoke(main, ["backup", "restore", str(tmp_path / "b"), "--data-dir", str(tmp_path / "r")])
    assert r.exit_code == 0, r.output
    assert EmbeddedEngine(tmp_path / "r").stats().papers == len(PAPERS)
    r = CliRunner().invoke(main, ["doctor", "--data-dir", str(tmp_path / "r")])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("link", [True, False])
def test_index_files_are_linked_on_one_filesystem_and_copied_when_asked(tmp_path: Path, link):
    data = _data(tmp_path)
    ops_backup.create(Settings(data_dir=data), tmp_path / "b", link=link)
    src = next((data / "collections" / "default").rglob("papers.db"))
    dst = next((tmp_path / "b" / "collections" / "default").rglob("papers.db"))
    assert (src.stat().st_ino == dst.stat().st_ino) == link
    assert (tmp_path / "b" / "sessions.sqlite").stat().st_ino != (data / "sessions.sqlite").stat().st_ino
