"""Helpers shared by the bench scripts: timing, percentiles, peak memory of a child process, a served API on
loopback, simulated agents' sessions against it, the machine's description and markdown tables, so that every
benchmark reports numbers the same way.

Bench scripts are run as files (``python bench/bench_x.py``); they put the repository root (``REPO``) on
``sys.path`` first and then import this module as ``bench.common``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import platform
import random
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import psutil

if TYPE_CHECKING:
    import aiohttp

    from search.core.models import Gene
    from search.ontology.service import TermService

REPO = Path(__file__).resolve().parents[1]


def archive_ref(ref: str, dest: Path) -> tuple[str, Path]:
    """The tree of git ref ``ref`` of this repository extracted into ``dest`` (created), to run a baseline beside the
    working tree with the same virtual environment; returns ``("REF (short commit)", dest)``."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", ref], check=True, capture_output=True,
                            text=True).stdout.strip()
    return f"{ref} ({commit})", dest


# ------------------------------------------------------------------------------------------------- timing & stats

def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of an empty list")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def latency_summary(ms: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/mean/max of a list of latencies in milliseconds, rounded for tables."""
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 3), "p90_ms": round(percentile(ms, 90), 3),
            "p99_ms": round(percentile(ms, 99), 3), "mean_ms": round(sum(ms) / len(ms), 3),
            "max_ms": round(max(ms), 3)}


@contextmanager
def stopwatch() -> Iterator[dict[str, float]]:
    """``with stopwatch() as t: ...`` then ``t["s"]`` holds the elapsed wall seconds."""
    t: dict[str, float] = {}
    start = time.perf_counter()
    try:
        yield t
    finally:
        t["s"] = time.perf_counter() - start


def self_peak_rss() -> int:
    """Peak resident memory of this process so far, in bytes (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def tree_cpu(proc: psutil.Process) -> float:
    """CPU seconds (user + system) of a process and its children so far (a server's workers)."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def current_rss() -> int:
    return psutil.Process().memory_info().rss


# ------------------------------------------------------------------------------------------------ child processes

@dataclass
class ChildRun:
    """What ``run_measured`` saw: exit status, wall seconds, CPU seconds (user + system of the child and the
    descendants it waited for; on a shared machine a steadier measure than wall time), peak RSS (the child and its
    descendants together)."""

    cmd: list[str]
    returncode: int
    seconds: float
    cpu_seconds: float
    peak_rss: int
    stdout: str
    stderr: str
    #: peak of the tree's anonymous memory (RSS less mapped files), polled; 0 when not measured
    peak_anon: int = 0

    def check(self) -> ChildRun:
        if self.returncode != 0:
            raise RuntimeError(f"command failed with exit status {self.returncode}: {' '.join(self.cmd)}\n"
                               f"{self.stderr[-4000:]}")
        return self


def _tree_rss(proc: psutil.Process) -> tuple[int, int]:
    """RSS of a process tree, and its anonymous part (RSS less file-backed and shared pages: what the processes
    allocated, without the index files they map, which the kernel can drop at any time)."""
    total = anon = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            m = p.memory_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += m.rss
        anon += max(0, m.rss - getattr(m, "shared", 0))
    return total, anon


def run_measured(cmd: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
                 poll_s: float = 0.05, timeout_s: float | None = None) -> ChildRun:
    """Run ``cmd`` to completion, polling the RSS of its process tree every ``poll_s`` seconds.

    Polling can miss a spike shorter than ``poll_s``; for a single process the kernel's own high-water mark
    (``ru_maxrss`` of the reaped child, via ``os.wait4``) is exact, so the larger of the two is reported.
    Output goes to temporary files, not pipes, so a chatty child cannot block.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        popen = subprocess.Popen(list(cmd), stdout=out, stderr=err, env=env, cwd=cwd)
        proc = psutil.Process(popen.pid)
        peak = peak_anon = 0
        status = None
        while status is None:
            try:
                rss, anon = _tree_rss(proc)
                peak, peak_anon = max(peak, rss), max(peak_anon, anon)
            except psutil.NoSuchProcess:
                pass
            pid, wstatus, usage = os.wait4(popen.pid, os.WNOHANG)
            if pid:
                status = os.waitstatus_to_exitcode(wstatus)
                break
            if timeout_s is not None and time.perf_counter() - start > timeout_s:
                popen.kill()
                _, _, usage = os.wait4(popen.pid, 0)
                status = -9
                break
            time.sleep(poll_s)
        seconds = time.perf_counter() - start
        popen.returncode = status      # reaped by wait4; keep Popen from waiting again
        out.seek(0)
        err.seek(0)
        return ChildRun(list(cmd), status, seconds, usage.ru_utime + usage.ru_stime,
                        max(peak, usage.ru_maxrss * 1024), out.read(), err.read(), peak_anon)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(cmd: Sequence[str], ready_url: str, *, env: dict[str, str] | None = None,
           timeout_s: float = 120.0) -> Iterator[subprocess.Popen]:
    """Start a server process, wait until ``ready_url`` answers 2xx, and stop it (SIGTERM, then SIGKILL) on exit."""
    import httpx

    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - the server's output, read after it stops
    proc = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"server exited with status {proc.returncode}: {' '.join(cmd)}\n"
                                   f"{log.read()[-4000:]}")
            try:
                if httpx.get(ready_url, timeout=2.0).is_success:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not ready after {timeout_s:.0f} s: {ready_url}")
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def flysift_command() -> list[str]:
    """How to call the ``flysift`` CLI of this checkout: the venv's console script, else the one on PATH."""
    here = Path(sys.executable).with_name("flysift")
    found = str(here) if here.exists() else shutil.which("flysift")
    if not found:
        raise RuntimeError("the flysift command is not installed; run `.venv/bin/pip install -e .` in the repository")
    return [found]


# ---------------------------------------------------------------------------------------- agents on a served API

#: what a simulated agent searches papers for, besides its gene's symbol
AGENT_QUERIES = ("expression", "mutant phenotype", "signaling", "localization")


class Answer(NamedTuple):
    """What an agent keeps of a response (read whole before the call is timed as done)."""

    status_code: int
    body: Any
    content_type: str

    def json(self) -> Any:
        return self.body


_parse_json = json.loads   # (``call``'s ``json`` is the request's body, as in aiohttp)


class AgentCalls(ABC):
    """The timed calls of simulated agents (bench_sessions.py, soak.py): a failed connection, or a non-2xx answer
    other than the expected ``budget_exhausted``, is counted in ``errors``; every answered call goes to
    :meth:`record`, which each script defines to keep what it reports."""

    def __init__(self) -> None:
        self.errors: Counter = Counter()

    @abstractmethod
    def record(self, tool: str, status: int, ms: float) -> None:
        """One answered call: its tool, HTTP status and milliseconds."""

    async def call(self, client: aiohttp.ClientSession, tool: str, method: str, url: str, *, json: Any = None,
                   params: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> Answer | None:
        import aiohttp  # the bench extra, which only the agents' scripts need

        t0 = time.perf_counter()
        try:
            async with client.request(method, url, json=json, params=params, headers=headers) as r:
                raw = await r.read()
                ctype = r.headers.get("content-type", "")
        except (TimeoutError, aiohttp.ClientError) as e:
            self.errors[f"{tool}: {type(e).__name__}"] += 1
            return None
        self.record(tool, r.status, (time.perf_counter() - t0) * 1000)
        body = _parse_json(raw) if ctype.startswith("application/json") and raw else None
        if r.status >= 400:
            code = body.get("error", {}).get("code", "?") if isinstance(body, dict) else "?"
            if code != "budget_exhausted":
                self.errors[f"{tool}: {r.status} {code}"] += 1
        return Answer(r.status, body, ctype)


#: one session of an agent: (client, gene, session id, the session's headers)
Session = Callable[["aiohttp.ClientSession", "Gene", str, dict[str, str]], Awaitable[None]]


async def agent_sessions(calls: AgentCalls, base: str, genes: Sequence[Gene], rng: random.Random, deadline: float,
                         body: Callable[[Gene], dict[str, Any]], session: Session, *, timeout_s: float,
                         pause_s: float = 0.0) -> None:
    """One agent until ``deadline``: create a session (``body(gene)``) for a gene ``rng`` draws, run
    ``session`` in it, start over; a create that fails is tried again with another gene after ``pause_s``."""
    import aiohttp

    # aiohttp, not httpx: the agents share the two cores with the server, and httpx's client cost 1.5–1.7 ms of CPU
    # per request against ~0.5 ms here, CPU the server could not use (the report gives both)
    async with aiohttp.ClientSession(base_url=base, timeout=aiohttp.ClientTimeout(total=timeout_s)) as c:
        while time.monotonic() < deadline:
            gene = rng.choice(genes)
            r = await calls.call(c, "create_session", "POST", "/v1/sessions", json=body(gene))
            if r is None or r.status_code != 201:
                if pause_s:
                    await asyncio.sleep(pause_s)
                continue
            sid = r.json()["id"]
            await session(c, gene, sid, {"X-Session-Id": sid})


async def unread_hits(calls: AgentCalls, c: aiohttp.ClientSession, headers: dict[str, str], query: str, gene: str,
                      offset: int, read: list[str]) -> list[str] | None:
    """A page of ten papers for ``query`` about ``gene`` from ``offset``: those not in ``read``; None when the
    search failed."""
    r = await calls.call(c, "search_papers", "POST", "/v1/papers/search", headers=headers,
                         json={"query": query, "gene": gene, "limit": 10, "offset": offset})
    if r is None or r.status_code != 200:
        return None
    return [x["pmcid"] for x in r.json()["hits"] if x["pmcid"] not in read]


async def read_papers(calls: AgentCalls, c: aiohttp.ClientSession, headers: dict[str, str], pmcids: Sequence[str],
                      read: list[str]) -> bool:
    """Read ``pmcids`` in turn (abstract and results, 4,000 characters), adding each to ``read``; True when the
    session's budget ran out (409), which ends the reading."""
    for pmcid in pmcids:
        r = await calls.call(c, "get_paper", "GET", f"/v1/papers/{pmcid}", headers=headers,
                             params={"sections": "ABSTRACT,RESULTS", "max_chars": 4000})
        if r is not None and r.status_code == 409:
            return True
        read.append(pmcid)
    return False


# ---------------------------------------------------------------------------------------------------------- files

def dir_bytes(path: Path) -> int:
    """Bytes of all regular files under ``path`` (what the index costs on disk)."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def machine() -> dict[str, object]:
    """The facts a reader needs to compare numbers across runs (the load average says how shared the machine was)."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform(terse=True),
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def write_json(path: Path, data: object) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table; cells are str()-ed and ``|`` inside them escaped."""
    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def folder_terms(data_dir: Path) -> TermService:
    """The term service of a data folder on the embedded engine, wired as the service wires it (the benchmarks of
    term ranking hold a folder, not a deployment)."""
    from search.core.config import Settings
    from search.services import Services

    return Services.open(Settings(data_dir=data_dir, engine="embedded")).terms
