"""A damaged data dir (issue #28): ``flysift serve`` stops with one line naming the file and what to run instead of a
27-44-line traceback, ``flysift doctor`` finds it, ``/v1/ready`` says why the service is not ready, and searches
answer 503 ``index_corrupt`` naming the file instead of 500 (a garbage ``build.json`` used to start a service that
answered 500 to every search)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import uvicorn
from click.testing import CliRunner
from fastapi.testclient import TestClient

from search.api.app import create_app
from search.cli.main import main
from search.core.config import Settings
from search.core.errors import FlysiftError
from search.sessions.store import SqliteStore

from helpers import build_index


def _build(data: Path) -> Path:
    current = json.loads((data / "collections" / "default" / "CURRENT").read_text())["build"]
    return data / "collections" / "default" / "builds" / current


def _garbage(path: Path) -> None:
    path.write_bytes(b"\x00garbage, not what flysift wrote\xff" * 10)


DAMAGE: dict[str, tuple[Callable[[Path], Path], bool]] = {
    # name: (what to damage -> the damaged file, whether searches can still be answered)
    "garbage papers.db": (lambda d: _build(d) / "papers.db", False),
    "deleted meta.json": (lambda d: _build(d) / "papers" / "meta.json", False),
    "garbage CURRENT": (lambda d: d / "collections" / "default" / "CURRENT", False),
    "garbage build.json": (lambda d: _build(d) / "build.json", False),
    "garbage sessions.sqlite": (lambda d: d / "sessions.sqlite", True),
}


@pytest.fixture
def damaged(request, tmp_path) -> tuple[Path, str, bool]:
    data = tmp_path / "data"
    build_index(data)
    SqliteStore(data / "sessions.sqlite").close()
    which, searchable = DAMAGE[request.param]
    path = which(data)
    if request.param.startswith("deleted"):
        path.unlink()
    else:
        _garbage(path)
    return data, str(path.relative_to(data)), searchable


@pytest.mark.parametrize("damaged", list(DAMAGE), indirect=True)
def test_serve_refuses_a_damaged_data_dir_in_one_line(damaged, monkeypatch):
    data, file, _ = damaged
    started: list[dict] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: started.append(kw))
    monkeypatch.setenv("FLYSIFT_DATA_DIR", str(data))   # serve sets it for its workers: restored afterwards
    r = CliRunner().invoke(main, ["serve", "--data-dir", str(data), "--port", "8281", "--workers", "1"])
    assert r.exit_code == 2 and not started
    assert "Traceback" not in r.output
    errors = [line for line in r.output.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and file in errors[0], r.output
    assert "restore" in errors[0] and "flysift" in errors[0]   # what to run
    assert "flysift doctor" in r.output


@pytest.mark.parametrize("damaged", list(DAMAGE), indirect=True)
def test_doctor_names_the_damaged_file(damaged):
    data, file, _ = damaged
    r = CliRunner().invoke(main, ["doctor", "--data-dir", str(data)])
    assert r.exit_code == 1, r.output
    failing = [line for line in r.output.splitlines() if line.startswith("fail")]
    assert failing and file in failing[0] and "→" in failing[0], r.output
    as_json = json.loads(CliRunner().invoke(main, ["doctor", "--data-dir", str(data), "--json"]).output)
    assert as_json["status"] == "not_ready" and any(c.get("file") == file for c in as_json["checks"])


@pytest.mark.parametrize("damaged", [d for d in DAMAGE if "sessions" not in d], indirect=True)
def test_a_service_on_a_damaged_index_answers_503_naming_the_file(damaged):
    data, file, _ = damaged
    with TestClient(create_app(Settings(data_dir=data)), raise_server_exceptions=False) as c:
        for _ in range(2):
            r = c.post("/v1/papers/search", json={"query": "wing"})
            assert r.status_code == 503, r.text
            err = r.json()["error"]
            assert err["code"] == "index_corrupt" and file in err["message"] and str(data) not in r.text
        ready = c.get("/v1/ready")
        assert ready.status_code == 503 and ready.json()["error"]["code"] == "not_ready"
        checks = ready.json()["error"]["details"]["checks"]
        assert any(ch["state"] == "fail" and ch.get("file") == file for ch in checks), checks
        assert c.get("/v1/health").status_code == 200   # alive, not ready


@pytest.mark.parametrize("damaged", ["garbage sessions.sqlite"], indirect=True)
def test_a_garbage_session_store_is_one_clear_error(damaged):
    data, file, _ = damaged
    with pytest.raises(FlysiftError) as e:
        create_app(Settings(data_dir=data))
    assert e.value.code == "store_corrupt" and file in e.value.message and "backup restore" in e.value.message


def test_a_sound_data_dir_is_ready(tmp_path):
    data = tmp_path / "data"
    build_index(data)
    with TestClient(create_app(Settings(data_dir=data))) as c:
        r = c.get("/v1/ready")
        assert r.status_code == 200 and r.json()["status"] == "ready", r.text
        names = {ch["name"] for ch in r.json()["checks"]}
        assert {"collection default", "session store", "disk"} <= names
    r = CliRunner().invoke(main, ["doctor", "--data-dir", str(data)])
    assert r.exit_code == 0 and "0 failed" in r.output, r.output


def test_a_data_dir_without_a_corpus_is_alive_but_not_ready(tmp_path):
    with TestClient(create_app(Settings(data_dir=tmp_path / "data"))) as c:
        assert c.get("/v1/health").status_code == 200
        r = c.get("/v1/ready")
        assert r.status_code == 503 and "flysift index corpus" in r.text


def test_an_unreachable_cluster_is_not_ready(tmp_path):
    """The cluster engine's part of readiness: does the cluster answer (its health is the cluster's own part)."""
    from search.engines import open_engine
    from search.ops.readiness import Readiness

    settings = Settings(data_dir=tmp_path / "data", cluster_url="http://127.0.0.1:9", cluster_timeout_s=2)
    engine = open_engine(settings)
    checks = engine.readiness()
    assert [c.state for c in checks] == ["fail"] and checks[0].name == "cluster" and "does not answer" in \
        checks[0].message
    ready = Readiness(settings, lambda: engine, lambda: None).checks()
    assert any(c.name == "cluster" and c.state == "fail" for c in ready)


@pytest.mark.parametrize("free_mib, status, state", [(10, 503, "fail"), (500, 200, "warn"), (50_000, 200, "ok")])
def test_a_disk_without_room_is_not_ready(tmp_path, monkeypatch, free_mib, status, state):
    """The store's probe rewrites one row in place, which a full disk may still take; the room left on the data
    dir's disk says whether session writes will (a disk about to be full is a warning, a full one is not ready)."""
    import shutil as shutil_module

    from search.ops import readiness

    data = tmp_path / "data"
    build_index(data)
    total = 100 << 30
    usage = shutil_module._ntuple_diskusage(total, total - (free_mib << 20), free_mib << 20)  # type: ignore[attr-defined]
    monkeypatch.setattr(readiness.shutil, "disk_usage", lambda path: usage)
    with TestClient(create_app(Settings(data_dir=data))) as c:
        r = c.get("/v1/ready")
    assert r.status_code == status, r.text
    checks = r.json()["checks"] if status == 200 else r.json()["error"]["details"]["checks"]
    disk = next(ch for ch in checks if ch["name"] == "disk")
    assert disk["state"] == state
    if state == "fail":
        assert "507 storage_full" in disk["message"] and disk["fix"]


@pytest.mark.cluster
def test_a_reachable_cluster_is_ready_and_its_store_takes_a_write(cluster_settings):
    """``/v1/ready`` of a service on the cluster engine: the cluster answers, the session store (the cluster's own,
    shared by every replica) takes a write, and no file of the data dir is asked for (the cluster holds the index)."""
    with TestClient(create_app(cluster_settings)) as c:
        r = c.get("/v1/ready")
    assert r.status_code == 200, r.text
    checks = {ch["name"]: ch for ch in r.json()["checks"]}
    assert checks["cluster"]["state"] in ("ok", "warn")   # one node: replicas of the store's indices may be unassigned
    assert checks["session store"]["state"] == "ok"
    assert not any(name.startswith(("collection ", "disk")) for name in checks)
