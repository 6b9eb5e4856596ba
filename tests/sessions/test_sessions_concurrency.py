"""Atomic budget spending across API processes: several single-worker uvicorn servers on loopback share one session
store (SQLite WAL file, or the cluster), and concurrent reads are spread over them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from search.core.models import Gene, Paper, Section
from search.text.lexicon import Lexicon

from helpers import ClusterNode, build_index

N_SERVERS = 3
N_PAPERS = 50
BUDGET = 16


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _data(root: Path) -> Path:
    d = root / "data"
    papers = [Paper(pmcid=f"PMC{200000 + i}", title=f"Paper {i}", abstract=f"Abstract {i} on Dl signalling.",
                    sections=[Section(type="RESULTS", paragraphs=[f"Result {i}."])]) for i in range(N_PAPERS)]
    build_index(d, papers)
    Lexicon([Gene(id="FBgn0000463", symbol="Dl", fullname="Delta")]).save(d / "lexicon.tsv")
    return d


class Servers:
    """``N_SERVERS`` uvicorn processes of the real app on free loopback ports, sharing ``env``'s store."""

    def __init__(self, env: dict[str, str], log_dir: Path):
        self.urls: list[str] = []
        self.procs: list[subprocess.Popen] = []
        for i in range(N_SERVERS):
            port = _port()
            log = open(log_dir / f"server{i}.log", "w")  # noqa: SIM115 - a server's output while it runs
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "search.api.app:create_app", "--factory", "--host", "127.0.0.1",
                 "--port", str(port), "--log-level", "warning"], env={**os.environ, **env}, stdout=log,
                stderr=subprocess.STDOUT))
            self.urls.append(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 120
        for url, proc in zip(self.urls, self.procs, strict=True):
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"server {url} exited: {(log_dir / 'server0.log').read_text()[-2000:]}")
                try:
                    if httpx.get(url + "/v1/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"server {url} did not start")
                time.sleep(0.2)

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()



def _servers(root: Path, store_env: dict[str, str]) -> Servers:
    env = {"FLYSIFT_DATA_DIR": str(_data(root)), "FLYSIFT_ENGINE": "embedded", "FLYSIFT_AUTH": "false", **store_env}
    return Servers(env, root)


@pytest.fixture(scope="module")
def sqlite_servers(tmp_path_factory) -> Iterator[Servers]:
    srv = _servers(tmp_path_factory.mktemp("conc-sqlite"), {"FLYSIFT_SESSION_STORE": "sqlite"})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def cluster_servers(cluster_node: ClusterNode, tmp_path_factory) -> Iterator[Servers]:
    prefix = f"fst-{uuid.uuid4().hex[:10]}"
    srv = _servers(tmp_path_factory.mktemp("conc-cluster"),
                   {"FLYSIFT_SESSION_STORE": "cluster", "FLYSIFT_CLUSTER_URL": cluster_node.url,
                    "FLYSIFT_CLUSTER_FLAVOUR": cluster_node.flavour, "FLYSIFT_CLUSTER_INDEX_PREFIX": prefix})
    yield srv
    srv.stop()
    cluster_node.cleanup(prefix)


def _concurrently(calls: list[tuple[str, str, str]]) -> list[httpx.Response]:
    """Run GETs (base url, path, session id) all at once, released by one barrier."""
    barrier = threading.Barrier(len(calls))

    def one(call):
        base, path, sid = call
        with httpx.Client(base_url=base, timeout=60) as c:
            barrier.wait()
            return c.get(path, headers={"X-Session-Id": sid})

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(one, calls))


def _session(servers: Servers, max_papers: int) -> str:
    r = httpx.post(servers.urls[0] + "/v1/sessions", json={"gene": "Dl", "max_papers": max_papers}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def fifty_concurrent_distinct_reads_spend_exactly_the_budget(servers: Servers):
    sid = _session(servers, BUDGET)
    pmcids = [f"PMC{200000 + i}" for i in range(N_PAPERS)]
    res = _concurrently([(servers.urls[i % N_SERVERS], f"/v1/papers/{p}", sid) for i, p in enumerate(pmcids)])
    statuses = Counter(r.status_code for r in res)
    assert statuses == {200: BUDGET, 409: N_PAPERS - BUDGET}, statuses
    refused = [r.json()["error"] for r in res if r.status_code == 409]
    assert {e["code"] for e in refused} == {"budget_exhausted"}
    assert {e["message"] for e in refused} == {f"Paper limit reached ({BUDGET}/{BUDGET}). Submit your annotations."}
    won = {p for p, r in zip(pmcids, res, strict=True) if r.status_code == 200}
    # every server answered some of the calls, and the store agrees with what the clients saw
    assert {servers.urls[i % N_SERVERS] for i in range(N_PAPERS)} == set(servers.urls)
    s = httpx.get(f"{servers.urls[1]}/v1/sessions/{sid}", timeout=30).json()
    assert s["budget_used"] == BUDGET and set(s["papers_read"]) == won
    events = httpx.get(f"{servers.urls[2]}/v1/sessions/{sid}/trace", timeout=30).json()["events"]
    assert [e["seq"] for e in events] == list(range(1, N_PAPERS + 1))
    assert Counter(e["status"] for e in events) == statuses


def concurrent_reads_of_one_paper_cost_one_unit(servers: Servers):
    sid = _session(servers, 1)
    res = _concurrently([(servers.urls[i % N_SERVERS], "/v1/papers/PMC200007", sid) for i in range(12)])
    assert [r.status_code for r in res] == [200] * 12
    s = httpx.get(f"{servers.urls[0]}/v1/sessions/{sid}", timeout=30).json()
    assert s["budget_used"] == 1 and s["papers_read"] == ["PMC200007"]


@pytest.mark.slow
def test_budget_is_atomic_across_processes_sqlite(sqlite_servers: Servers):
    fifty_concurrent_distinct_reads_spend_exactly_the_budget(sqlite_servers)
    concurrent_reads_of_one_paper_cost_one_unit(sqlite_servers)


@pytest.mark.slow
@pytest.mark.cluster
def test_budget_is_atomic_across_processes_cluster(cluster_servers: Servers):
    fifty_concurrent_distinct_reads_spend_exactly_the_budget(cluster_servers)
    concurrent_reads_of_one_paper_cost_one_unit(cluster_servers)
