"""``flysift serve --workers 2``: one port, two worker processes, one data dir. Budgets stay exact and teams stay
apart whichever worker answers (the session store is shared); the rate limit is per worker, as documented
(``search.sessions.keys``); the CLI defaults to one worker per core."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from search.core.models import Gene, Paper, Section
from search.sessions.keys import new_key
from search.sessions.store import SqliteStore
from search.text.lexicon import Lexicon

from helpers import build_index

psutil = pytest.importorskip("psutil", reason="psutil (in the test extra) is not installed")

N_PAPERS = 50
BUDGET = 16
BURST = 200  # per worker and key


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """``python -m search.cli.main serve --workers 2`` on a free port, with auth on and two teams' keys."""

    def __init__(self, root: Path):
        self.data = root / "data"
        papers = [Paper(pmcid=f"PMC{300000 + i}", title=f"Paper {i}", abstract=f"Abstract {i} on Dl signalling.",
                        sections=[Section(type="RESULTS", paragraphs=[f"Result {i}."])]) for i in range(N_PAPERS)]
        build_index(self.data, papers)
        Lexicon([Gene(id="FBgn0000463", symbol="Dl", fullname="Delta")]).save(self.data / "lexicon.tsv")
        store = SqliteStore(self.data / "sessions.sqlite")
        self.keys: dict[str, str] = {}
        for team in ("alpha", "beta", "gamma"):
            store.create_team(team)
            key, record = new_key(team, ["agent"])
            store.add_key(record)
            self.keys[team] = key
        store.close()
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "FLYSIFT_ENGINE": "embedded", "FLYSIFT_AUTH": "true", "FLYSIFT_SESSION_STORE": "sqlite",
               "FLYSIFT_RATE_LIMIT_PER_MINUTE": "6", "FLYSIFT_RATE_LIMIT_BURST": str(BURST)}
        self.log = root / "serve.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "search.cli.main", "serve", "--data-dir",
                                          str(self.data), "--port", str(self.port), "--workers", "2"],
                                         env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while len(self.workers()) < 2:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"serve did not start two workers: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)
        while True:  # both workers listen on the one socket; the health route answers once one is ready
            try:
                if httpx.get(self.url + "/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"serve did not answer: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)

    def workers(self) -> list[psutil.Process]:
        """The worker processes: children of the server that hold the listening socket."""
        out = []
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if any(c.laddr and c.laddr.port == self.port and c.status == psutil.CONN_LISTEN
                       for c in child.net_connections("tcp")):
                    out.append(child)
            except psutil.Error:
                pass
        return out

    def connections_per_worker(self) -> list[int]:
        return [sum(1 for c in w.net_connections("tcp") if c.laddr and c.laddr.port == self.port
                    and c.status == psutil.CONN_ESTABLISHED) for w in self.workers()]

    def headers(self, team: str, sid: str | None = None) -> dict[str, str]:
        h = {"Authorization": f"Bearer {self.keys[team]}"}
        return {**h, "X-Session-Id": sid} if sid else h

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    srv = Served(tmp_path_factory.mktemp("workers"))
    yield srv
    srv.stop()


def _clients_on_both_workers(srv: Served, n: int) -> list[httpx.Client]:
    """``n`` or more keep-alive connections, opened until each worker holds at least one of them."""
    clients: list[httpx.Client] = []
    while True:
        while len(clients) < n:
            c = httpx.Client(base_url=srv.url, timeout=60)
            assert c.get("/v1/health").status_code == 200  # public: opens the connection, spends no rate limit
            clients.append(c)
        counts = srv.connections_per_worker()
        if len(counts) == 2 and min(counts) > 0:
            return clients
        if len(clients) >= 400:
            raise AssertionError(f"the kernel never gave the second worker a connection: {counts}")
        n = len(clients) + 10


@pytest.mark.slow
def test_budget_is_exact_across_two_workers(served: Served):
    r = httpx.post(served.url + "/v1/sessions", json={"gene": "Dl", "max_papers": BUDGET},
                   headers=served.headers("alpha"), timeout=30)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    pmcids = [f"PMC{300000 + i}" for i in range(N_PAPERS)]
    clients = _clients_on_both_workers(served, N_PAPERS)
    barrier = threading.Barrier(N_PAPERS)

    def read(i: int) -> httpx.Response:
        barrier.wait()
        return clients[i].get(f"/v1/papers/{pmcids[i]}", headers=served.headers("alpha", sid))

    try:
        with ThreadPoolExecutor(N_PAPERS) as pool:
            res = list(pool.map(read, range(N_PAPERS)))
    finally:
        for c in clients:
            c.close()
    statuses = Counter(r.status_code for r in res)
    assert statuses == {200: BUDGET, 409: N_PAPERS - BUDGET}, statuses
    assert {r.json()["error"]["code"] for r in res if r.status_code == 409} == {"budget_exhausted"}
    assert sorted(int(r.headers["X-Budget-Used"]) for r in res if r.status_code == 200) == list(range(1, BUDGET + 1))
    won = {p for p, r in zip(pmcids, res, strict=True) if r.status_code == 200}
    s = httpx.get(f"{served.url}/v1/sessions/{sid}", headers=served.headers("alpha"), timeout=30).json()
    assert s["budget_used"] == BUDGET and set(s["papers_read"]) == won
    trace = httpx.get(f"{served.url}/v1/sessions/{sid}/trace", headers=served.headers("alpha"), timeout=30).json()
    assert [e["seq"] for e in trace["events"]] == list(range(1, N_PAPERS + 1))
    assert Counter(e["status"] for e in trace["events"]) == statuses


@pytest.mark.slow
def test_teams_stay_apart_on_every_worker(served: Served):
    r = httpx.post(served.url + "/v1/sessions", json={"gene": "Dl", "max_papers": 4},
                   headers=served.headers("alpha"), timeout=30)
    sid = r.json()["id"]
    clients = _clients_on_both_workers(served, 8)
    try:
        for c in clients:
            assert c.get(f"/v1/sessions/{sid}", headers=served.headers("beta")).json()["error"]["code"] == \
                "session_not_found"
            refused = c.get("/v1/papers/PMC300001", headers=served.headers("beta", sid))
            assert refused.status_code == 404 and refused.json()["error"]["code"] == "session_not_found"
            assert c.get(f"/v1/sessions/{sid}", headers=served.headers("alpha")).status_code == 200
    finally:
        for c in clients:
            c.close()
    s = httpx.get(f"{served.url}/v1/sessions/{sid}", headers=served.headers("alpha"), timeout=30).json()
    assert s["budget_used"] == 0 and s["papers_read"] == []


@pytest.mark.slow
def test_rate_limit_is_per_worker(served: Served):
    """Each worker keeps its own bucket: a key gets more than one burst through two workers, never more than two
    bursts (plus the trickle the rate refills: 6 a minute), and the refusals are 429 with Retry-After."""
    clients = _clients_on_both_workers(served, 16)
    per_client = (2 * BURST + 40) // len(clients) + 1
    codes: Counter[int] = Counter()
    refusal = None
    t0 = time.monotonic()
    try:
        for c in clients:
            for _ in range(per_client):
                r = c.post("/v1/papers/search", json={"query": "signalling"}, headers=served.headers("gamma"))
                codes[r.status_code] += 1
                if r.status_code == 429:
                    refusal = r
    finally:
        for c in clients:
            c.close()
    refill = 2 * (time.monotonic() - t0) * 6 / 60 + 2
    assert set(codes) == {200, 429}, codes
    assert BURST < codes[200] <= 2 * BURST + refill, codes
    assert refusal is not None and refusal.json()["error"]["code"] == "rate_limited"
    assert int(refusal.headers["Retry-After"]) >= 1


def test_serve_defaults_to_one_worker_per_core(monkeypatch, tmp_path):
    from click.testing import CliRunner

    import search.cli.main as cli

    seen: dict = {}
    monkeypatch.setenv("FLYSIFT_DATA_DIR", str(tmp_path))  # serve sets it for its workers; restored after the test
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)  # so does serve with several workers
    monkeypatch.setattr("uvicorn.run", lambda *a, **kw: seen.update(kw))
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2}, raising=False)
    assert CliRunner().invoke(cli.main, ["serve"]).exit_code == 0
    assert seen["workers"] == 3
    assert CliRunner().invoke(cli.main, ["serve", "--workers", "2"]).exit_code == 0
    assert seen["workers"] == 2
    assert CliRunner().invoke(cli.main, ["serve", "--workers", "0"]).exit_code != 0
