"""Request ids, the JSON access log and ``/metrics`` (issue #28, Operate 1-2): one log line per request with its id,
route, status, duration, engine time, team and session, and never a key, a cookie, a query string or a body; the id
in ``X-Request-Id`` and in every error; metrics by route template for any route, protected like admin routes."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi import APIRouter
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from search.api.app import create_app
from search.core.config import Settings
from search.core.models import Gene
from search.ops import requestlog
from search.sessions.keys import new_key
from search.sessions.store import SqliteStore
from search.text.lexicon import Lexicon

from helpers import PAPERS, build_index

SECRET_BODY = "body-marker-7f3a"
SECRET_QUERY = "query-marker-91bc"
COOKIE = "session=cookie-marker-55de"


@pytest.fixture
def data(tmp_path) -> tuple[Path, dict[str, str]]:
    d = tmp_path / "data"
    build_index(d)
    Lexicon([Gene(id="FBgn0000463", symbol="Dl", fullname="Delta")]).save(d / "lexicon.tsv")
    store = SqliteStore(d / "sessions.sqlite")
    store.create_team("lab1")
    keys = {}
    for name, scopes in (("agent", ["agent"]), ("admin", ["agent", "admin"])):
        keys[name], record = new_key("lab1", scopes)
        store.add_key(record)
    store.close()
    return d, keys


@pytest.fixture
def log_stream():
    """The flysift loggers configured as ``flysift serve`` does (JSON, access log on), into a buffer."""
    loggers = [logging.getLogger(n) for n in ("flysift", requestlog.ACCESS)]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    stream = io.StringIO()
    requestlog.configure("json", "info", access_log=True, stream=stream, force=True)
    yield stream
    for lg, handlers, level, propagate in saved:
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate
    delattr(logging.getLogger("flysift"), requestlog._CONFIGURED)


def _lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_one_json_line_per_request_without_keys_cookies_queries_or_bodies(data, log_stream):
    d, keys = data
    app = create_app(Settings(data_dir=d, auth=True, access_log=True, rate_limit_per_minute=0))
    auth = {"Authorization": f"Bearer {keys['agent']}", "Cookie": COOKIE}
    with TestClient(app) as c:
        sid = c.post("/v1/sessions", json={"gene": "Dl", "label": SECRET_BODY}, headers=auth).json()["id"]
        ok = c.post("/v1/papers/search", params={"q": SECRET_QUERY}, json={"query": f"wing {SECRET_BODY}"},
                    headers={**auth, "X-Session-Id": sid})
        bad = c.post("/v1/papers/search", json={"query": SECRET_BODY, "limit": 1000}, headers=auth)
        unauth = c.get("/v1/stats", headers={"Authorization": "Bearer " + keys["agent"][:-3] + "xyz"})
        mine = c.get("/v1/health", headers={"X-Request-Id": "trace-me.42"})
        hostile = c.get("/v1/health", headers={"X-Request-Id": "bad id\twith spaces" + "x" * 100})
    text = log_stream.getvalue()
    for secret in (keys["agent"], keys["agent"][:-3], "cookie-marker", SECRET_BODY, SECRET_QUERY, "Bearer"):
        assert secret not in text, secret
    access = [line for line in _lines(log_stream) if line["logger"] == requestlog.ACCESS]
    assert len(access) == 6
    search = access[1]
    assert {k: search[k] for k in ("method", "route", "path", "status", "team", "session")} == {
        "method": "POST", "route": "/v1/papers/search", "path": "/v1/papers/search", "status": 200, "team": "lab1",
        "session": sid}
    assert search["request_id"] == ok.headers["X-Request-Id"] and search["duration_ms"] > 0
    assert search["engine_ms"] > 0 and search["engine_ms"] <= search["duration_ms"]
    assert access[2]["status"] == 422 and access[2]["error"] == "limit_exceeded"
    assert bad.json()["error"]["request_id"] == bad.headers["X-Request-Id"] == access[2]["request_id"]
    assert access[3]["status"] == 401 and access[3]["team"] == "-"
    assert unauth.json()["error"]["request_id"] == access[3]["request_id"]
    assert mine.headers["X-Request-Id"] == "trace-me.42" == access[4]["request_id"]
    assert hostile.headers["X-Request-Id"] != "" and " " not in hostile.headers["X-Request-Id"]
    assert len(hostile.headers["X-Request-Id"]) <= 64


def test_the_service_log_is_json_with_the_request_id(data, log_stream):
    d, _ = data
    app = create_app(Settings(data_dir=d))

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("exploded")

    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/boom")
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"
    errors = [line for line in _lines(log_stream) if line["level"] == "ERROR"]
    assert errors and errors[0]["request_id"] == r.json()["error"]["request_id"] and "exploded" in errors[0]["exc"]


def test_the_access_log_goes_to_its_file_and_the_service_log_may_be_text(data, log_stream, tmp_path):
    """``FLYSIFT_ACCESS_LOG_FILE``: access lines in the file, not in the service log; ``FLYSIFT_LOG_FORMAT=text``:
    the service log is for people (the access log stays JSON lines only in json format)."""
    d, _ = data
    access_file = tmp_path / "access.jsonl"
    requestlog.configure("text", "info", access_log=True, access_log_file=access_file, stream=log_stream, force=True)
    app = create_app(Settings(data_dir=d, access_log=True))

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("exploded")

    with TestClient(app, raise_server_exceptions=False) as c:
        ok = c.get("/v1/health")
        failed = c.get("/boom")
    for h in logging.getLogger(requestlog.ACCESS).handlers:
        h.flush()
    lines = access_file.read_text().splitlines()
    assert len(lines) == 2 and all("/v1/health" in line or "/boom" in line for line in lines)
    service = log_stream.getvalue()
    assert "/v1/health" not in service and ok.headers["X-Request-Id"] not in service
    assert "ERROR" in service and "exploded" in service and failed.json()["error"]["request_id"] in service
    assert not service.lstrip().startswith("{")


def _metrics(text: str) -> dict[tuple[str, frozenset], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _value(m: dict, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in m.items() if n == name and set(labels.items()) <= set(ls))


def test_metrics_by_route_team_and_code_protected_like_admin_routes(data):
    d, keys = data
    app = create_app(Settings(data_dir=d, auth=True, rate_limit_per_minute=0))

    pages = APIRouter()

    @pages.get("/genes/{gene}")   # routes added later (the curator workbench): measured like the others
    def page(gene: str) -> dict:
        return {"gene": gene}

    app.include_router(pages, prefix="/pages")

    agent = {"Authorization": f"Bearer {keys['agent']}"}
    admin = {"Authorization": f"Bearer {keys['admin']}"}
    with TestClient(app) as c:
        assert c.get("/metrics").status_code == 401
        assert c.get("/metrics", headers=agent).status_code == 403
        sid = c.post("/v1/sessions", json={"gene": "Dl", "max_papers": 1}, headers=agent).json()["id"]
        head = {**agent, "X-Session-Id": sid}
        assert c.post("/v1/papers/search", json={"query": "wing"}, headers=head).status_code == 200
        assert c.get(f"/v1/papers/{PAPERS[0].pmcid}", headers=head).status_code == 200
        refused = c.get(f"/v1/papers/{PAPERS[1].pmcid}", headers=head)
        assert refused.json()["error"]["code"] == "budget_exhausted"
        for i in range(3):
            assert c.get(f"/nothing/here/{i}", headers=agent).status_code == 404
            assert c.get(f"/pages/genes/g{i}", headers=agent).status_code == 200
        r = c.get("/metrics", headers=admin)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    m = _metrics(r.text)
    assert _value(m, "flysift_requests_total", route="/v1/papers/search", method="POST", status="200",
                  team="lab1") == 1
    assert _value(m, "flysift_requests_total", route="/v1/papers/{pmcid}", status="409") == 1
    assert _value(m, "flysift_requests_total", route="/metrics", status="401", team="-") == 1
    assert _value(m, "flysift_requests_total", route="unmatched", status="404") == 3
    assert _value(m, "flysift_requests_total", route="/pages/genes/{gene}", status="200") == 3
    assert not any("/nothing/here" in str(labels) or "g1" in str(labels) for _, labels in m)   # no label per URL
    assert _value(m, "flysift_request_seconds_count", route="/v1/papers/search") == 1
    assert _value(m, "flysift_engine_seconds_count", operation="search_papers") == 1
    assert _value(m, "flysift_engine_seconds_count", operation="get_paper") >= 1
    assert _value(m, "flysift_budget_charges_total") == 1 and _value(m, "flysift_budget_refusals_total") == 1
    assert _value(m, "flysift_errors_total", code="budget_exhausted") == 1
    assert _value(m, "flysift_errors_total", code="unauthorized") == 1
    assert _value(m, "flysift_sessions_open") == 1 and _value(m, "flysift_ready") == 1
    assert _value(m, "flysift_collection_papers", collection="default") == len(PAPERS)
    assert _value(m, "flysift_collection_published_timestamp_seconds", collection="default") > time.time() - 3600
    exposed = {re.sub(r"_(bucket|sum|count)$", "", name) for name, _ in m}
    root = Path(__file__).parents[2]
    for where in (root / "docs" / "operations.md", root / "deploy" / "grafana" / "flysift.json"):
        named = {re.sub(r"_(bucket|sum|count)$", "", n) for n in re.findall(r"flysift_[a-z_]+", where.read_text())}
        assert named <= exposed | {"flysift_api_builds_open", "flysift_collection_builds_unfinished",
                                   "flysift_collection_build_records"}, (where, named - exposed)
    documented = set(re.findall(r"flysift_[a-z_]+", (root / "docs" / "operations.md").read_text()))
    assert exposed <= documented, exposed - documented   # every metric is in the runbook


@pytest.mark.slow
def test_metrics_of_several_workers_are_summed(data, tmp_path):
    """``flysift serve --workers 2``: a scrape of either worker counts the requests both answered."""
    d, _ = data
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "FLYSIFT_AUTH": "false"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    proc = subprocess.Popen([sys.executable, "-m", "search.cli.main", "serve", "--data-dir", str(d), "--port",
                             str(port), "--workers", "2"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        n = 40
        for _ in range(n):   # a new connection each: uvicorn's workers share the socket and take turns
            assert httpx.post(f"{url}/v1/papers/search", json={"query": "wing"}, timeout=30).status_code == 200
        for _ in range(4):
            m = _metrics(httpx.get(f"{url}/metrics", timeout=30).text)
            assert _value(m, "flysift_requests_total", route="/v1/papers/search") == n
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def test_the_kubernetes_probes_call_health_and_ready_without_a_key(data):
    """deploy/k8s/api.yaml: liveness on /v1/health, readiness on /v1/ready, and a service with auth on answers both
    to a probe, which carries no key."""
    yaml = pytest.importorskip("yaml", reason="PyYAML comes with uvicorn[standard]")
    d, _ = data
    manifest = Path(__file__).parents[2] / "deploy" / "k8s" / "api.yaml"
    containers = [c for doc in yaml.safe_load_all(manifest.read_text()) if doc and doc.get("kind") == "Deployment"
                  for c in doc["spec"]["template"]["spec"]["containers"]]
    assert containers
    probes = {(kind, c[kind]["httpGet"]["path"]) for c in containers for kind in ("livenessProbe", "readinessProbe")}
    assert probes == {("livenessProbe", "/v1/health"), ("readinessProbe", "/v1/ready")}
    with TestClient(create_app(Settings(data_dir=d, auth=True))) as c:
        assert c.get("/v1/health").status_code == 200
        assert c.get("/v1/ready").status_code == 200
        assert c.get("/v1/stats").status_code == 401


def test_metrics_show_an_indexing_run_in_progress(data):
    """Build progress per collection: a build being written (or left by a killed run) and the input records it has
    committed, from its resume state."""
    from search.engines.embedded.engine import EmbeddedEngine
    from search.text.passages import split_passages

    d, keys = data
    build = EmbeddedEngine(d, "ir").open_build("progress-test", resume=False)
    for p in PAPERS[:2]:
        build.add(p, split_passages(p))
    build.commit({"consumed": 2})
    build.abort()   # stop writing: the partial build stays for a later resume, as after a killed run
    with TestClient(create_app(Settings(data_dir=d, auth=True))) as c:
        m = _metrics(c.get("/metrics", headers={"Authorization": f"Bearer {keys['admin']}"}).text)
    assert _value(m, "flysift_collection_builds_unfinished", collection="ir") == 1
    assert _value(m, "flysift_collection_build_records", collection="ir") == 2
    assert _value(m, "flysift_collection_builds_unfinished", collection="default") == 0
