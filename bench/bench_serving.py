"""Serving at the engine's speed (issue #13): what a request costs in-process and over HTTP, in one run on one corpus.

1. In-process: CPU per call of ``SearchService`` (paper and passage search, answer serialised to JSON as the API
   does), of ``TermService`` term search and of a session read (``SessionService.get``), after a warm-up.
   The same requests through the API's ASGI app in this process (no sockets, no uvicorn): what the framework and
   the route add to each call.
2. HTTP: ``flysift serve --workers N`` (default: one per core) on loopback; for paper search, passage search, term
   search and a session read (``GET /v1/sessions/{id}``): requests/s, p50/p99 latency and errors at 1, 8, 32 and 128
   connections (wrk, one thread; an asyncio client when wrk is missing), and the server's CPU per request (user +
   system of the whole process tree, from /proc, divided by the requests wrk completed), beside the in-process
   call measured right before and after that row (the machine's speed drifts: a ratio needs adjacent figures).
3. The sessions benchmark (``bench/bench_sessions.py``: agents search, read to their budget, submit) against the same
   server, with 64 agents.
4. Resident memory of each worker at the end.

The corpus is generated (``indexer/synthetic.py``) and indexed once per parameter set (reused); term search uses
GO from ``/work/shared/data/ontologies/go-basic.obo.gz`` when it is there, else the test fixture ``mini.obo``. The
machine is whatever runs this: wrk and the server share its cores, so the numbers are for a client on the same host.

    .venv/bin/python bench/bench_serving.py --papers 2000 --work /tmp/bench-serving
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import psutil  # noqa: E402

from bench.bench_sessions import build, drive  # noqa: E402
from bench.bench_sessions import report as sessions_report  # noqa: E402
from bench.common import (  # noqa: E402
    REPO,
    flysift_command,
    free_port,
    latency_summary,
    machine,
    markdown_table,
    served,
    tree_cpu,
    write_json,
)

GO_SHARED = REPO.parent / "shared" / "data" / "ontologies" / "go-basic.obo.gz"   # ../shared beside the clone
GO_FIXTURE = REPO / "tests" / "fixtures" / "mini.obo"
WORDS = ["expression", "wing disc", "mutant phenotype", "signalling", "embryo", "eye development", "neuron",
         "transcription", "apoptosis", "germline"]
TERM_WORDS = ["wing", "nucleus", "cell cycle", "eye", "development", "binding", "transport", "membrane", "axon",
              "signaling"]


def index_terms(data: Path) -> str:
    """GO indexed into ``data`` (once); returns which file."""
    obo = GO_SHARED if GO_SHARED.exists() else GO_FIXTURE
    mark = data / f"terms-indexed-{obo.name}"
    if not mark.exists():
        subprocess.run([*flysift_command(), "index", "ontology", str(obo), "--name", "go", "--data-dir", str(data)],
                       check=True, stdout=subprocess.DEVNULL)
        mark.write_text("ok\n")
    return str(obo)


def queries(genes: list) -> list[str]:
    return [g.symbol for g in genes[:20]] + WORDS + [f"{g.symbol} {w}" for g, w in zip(genes, WORDS, strict=False)]


# ---- in-process ---------------------------------------------------------------------------------------------------

def cpu_per_call(fn, args: list, repeat: int) -> float:
    """Milliseconds of this process's CPU per call of ``fn`` over ``args`` (cycled), after one warm-up pass."""
    for a in args:
        fn(a)
    n = 0
    c0 = time.process_time()
    while n < repeat:
        for a in args:
            fn(a)
            n += 1
    return round((time.process_time() - c0) / n * 1000, 4)


def in_process_calls(data: Path, qs: list[str], sid: str) -> dict[str, tuple[Callable[[Any], Any], list]]:
    """The in-process calls measured, each with the arguments it cycles through."""
    from search.core.config import Settings
    from search.services import Services
    from search.sessions.keys import LOCAL

    services = Services.open(Settings(data_dir=data))
    svc, terms, sessions = services.search, services.terms, services.sessions
    return {
        "paper search (engine + planner)": (lambda q: svc.search_papers(q, limit=10), qs),
        "paper search + JSON": (lambda q: svc.search_papers(q, limit=10).model_dump_json(), qs),
        "passage search + JSON": (lambda q: svc.search_passages(q, limit=10).model_dump_json(), qs),
        "term search + JSON": (lambda q: terms.search("go", q, limit=10).model_dump_json(), TERM_WORDS),
        "session read + JSON": (lambda s: sessions.get(s, LOCAL).model_dump_json(), [sid]),
    }


#: each HTTP endpoint's in-process counterpart, measured again right before and after its every HTTP row
HTTP_PEERS = {"paper search": "paper search + JSON", "passage search": "passage search + JSON",
              "term search": "term search + JSON", "session read": "session read + JSON"}
#: in-process calls per adjacent measurement (~0.1–0.5 s)
ADJACENT_CALLS = 300


# ---- the ASGI app alone -------------------------------------------------------------------------------------------

def _stored(fn):
    """``fn`` answering each distinct call from the first answer (so that what is measured around it is the rest)."""
    answers: dict[str, Any] = {}

    def call(*args: Any, **kwargs: Any) -> Any:
        key = repr((args, sorted(kwargs.items())))
        if key not in answers:
            answers[key] = fn(*args, **kwargs)
        return answers[key]

    return call


def asgi_cost(data: Path, reqs_by_endpoint: dict[str, list[dict[str, Any]]], repeat: int
              ) -> dict[str, dict[str, float]]:
    """Milliseconds of CPU per request of the API's ASGI app in this process, without sockets or uvicorn, by endpoint:
    ``app`` (the whole request), then the framework alone, with the searches answered from stored results, on the lean
    path (``search.api.fast``) and on FastAPI's own (the lean routes switched off)."""
    from search.api.app import create_app
    from search.api.fast import FastPath
    from search.core.config import Settings

    app = create_app(Settings(data_dir=data))

    async def one(r: dict[str, Any]) -> None:
        path, _, query = r["path"].partition("?")
        body = (r.get("body") or "").encode()
        headers = [(b"host", b"bench"), (b"content-type", b"application/json")]
        if body:
            headers.append((b"content-length", str(len(body)).encode()))
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": r["method"],
                 "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
                 "query_string": query.encode(), "headers": headers, "client": ("127.0.0.1", 1),
                 "server": ("127.0.0.1", 80), "state": {}}
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        status: list[int] = []

        async def receive() -> dict[str, Any]:
            return messages.pop() if messages else {"type": "http.disconnect"}

        async def send(msg: MutableMapping[str, Any]) -> None:
            if msg["type"] == "http.response.start":
                status.append(msg["status"])

        await app(scope, receive, send)
        if status != [200]:
            raise RuntimeError(f"{r['method']} {r['path']} answered {status}")

    async def measure(reqs: list[dict[str, Any]]) -> float:
        for r in reqs:  # warm-up
            await one(r)
        c0 = time.process_time()
        for i in range(repeat):
            await one(reqs[i % len(reqs)])
        return round((time.process_time() - c0) / repeat * 1000, 4)

    async def run() -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {name: {} for name in reqs_by_endpoint}
        for name, reqs in reqs_by_endpoint.items():
            out[name]["app"] = await measure(reqs)
        search, terms = app.state.search, app.state.terms
        search.search_papers = _stored(search.search_papers)
        search.search_passages = _stored(search.search_passages)
        terms.search = _stored(terms.search)
        layer: Any = app.middleware_stack
        while not isinstance(layer, FastPath):
            layer = layer.app
        for path, plans in (("framework, lean path", None), ("framework, FastAPI's path", {})):
            layer.plans = plans
            for name, reqs in reqs_by_endpoint.items():
                out[name][path] = await measure(reqs)
        layer.plans = None
        return out

    return asyncio.run(run())


# ---- HTTP ---------------------------------------------------------------------------------------------------------

def endpoints(qs: list[str], sid: str) -> dict[str, list[dict[str, Any]]]:
    """Per benchmark: the requests wrk cycles through (method, path, body)."""
    return {
        "paper search": [{"method": "POST", "path": "/v1/papers/search", "body": json.dumps({"query": q})}
                         for q in qs],
        "passage search": [{"method": "POST", "path": "/v1/passages/search", "body": json.dumps({"query": q})}
                           for q in qs],
        "term search": [{"method": "GET", "path": "/v1/terms/search?" + str(httpx.QueryParams({"q": q, "limit": 10}))}
                        for q in TERM_WORDS],
        "session read": [{"method": "GET", "path": f"/v1/sessions/{sid}"}],
    }


def lua_script(reqs: list[dict[str, Any]], path: Path) -> Path:
    """A wrk script that cycles through ``reqs`` and counts non-2xx answers."""
    lines = ["local reqs = {}"]
    for i, r in enumerate(reqs, 1):
        body = json.dumps(r.get("body")) if r.get("body") else "nil"
        lines.append(f"reqs[{i}] = wrk.format({json.dumps(r['method'])}, {json.dumps(r['path'])}, "
                     f"{{[\"Content-Type\"] = \"application/json\"}}, {body})")
    lines += ["local i = 0",
              "request = function() i = i % #reqs + 1; return reqs[i] end"]
    path.write_text("\n".join(lines) + "\n")
    return path


def _ms(v: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", v)
    if not m:
        return float("nan")
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]


def run_wrk(base: str, script: Path, connections: int, seconds: float) -> dict[str, Any]:
    out = subprocess.run(["wrk", "-t", "1", "-c", str(connections), "-d", f"{seconds:g}s", "--latency",
                          "--timeout", "10s", "-s", str(script), base], capture_output=True, text=True, check=True
                         ).stdout
    reqs = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    dist = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", out, flags=re.M))
    return {"requests": reqs, "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore
            "p50_ms": round(_ms(dist.get("50", "")), 2), "p99_ms": round(_ms(dist.get("99", "")), 2),
            "errors": (int(non2xx.group(1)) if non2xx else 0) + (sum(map(int, sock.groups())) if sock else 0)}


async def _asyncio_load(base: str, reqs: list[dict[str, Any]], connections: int, seconds: float) -> dict[str, Any]:
    ms: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds

    async def conn(k: int) -> None:
        nonlocal errors
        async with httpx.AsyncClient(base_url=base, timeout=10, limits=httpx.Limits(max_connections=1)) as c:
            i = k
            while time.monotonic() < deadline:
                r = reqs[i % len(reqs)]
                i += 1
                t0 = time.perf_counter()
                try:
                    resp = await c.request(r["method"], r["path"], content=r.get("body"),
                                           headers={"Content-Type": "application/json"})
                    errors += resp.status_code >= 300
                except httpx.HTTPError:
                    errors += 1
                ms.append((time.perf_counter() - t0) * 1000)

    t0 = time.perf_counter()
    await asyncio.gather(*(conn(k) for k in range(connections)))
    lat = latency_summary(ms)
    return {"requests": len(ms), "rps": round(len(ms) / (time.perf_counter() - t0), 1), "p50_ms": lat["p50_ms"],
            "p99_ms": lat["p99_ms"], "errors": errors}


def http_matrix(base: str, server: psutil.Process, eps: dict[str, list[dict[str, Any]]], conns: list[int],
                seconds: float, work: Path, calls: dict[str, tuple[Callable[[Any], Any], list]]
                ) -> list[dict[str, Any]]:
    """One row per endpoint and connection count. Each row's ratio compares the server's CPU per request with the
    in-process call measured right before and right after it: this machine's speed drifts by up to half within
    minutes (other tenants), so a ratio against a figure taken minutes earlier says more about the drift."""
    wrk = shutil.which("wrk")
    rows = []
    for name, reqs in eps.items():
        script = lua_script(reqs, work / f"wrk-{name.replace(' ', '-')}.lua")
        peer = calls.get(HTTP_PEERS.get(name, ""))
        for c in conns:
            before = cpu_per_call(*peer, ADJACENT_CALLS) if peer else None
            cpu0 = tree_cpu(server)
            r = run_wrk(base, script, c, seconds) if wrk else asyncio.run(_asyncio_load(base, reqs, c, seconds))
            cpu = tree_cpu(server) - cpu0
            r |= {"endpoint": name, "connections": c, "client": "wrk" if wrk else "asyncio",
                  "server_cpu_ms_per_request": round(cpu / max(1, r["requests"]) * 1000, 3)}
            if peer and before:
                adjacent = (before + cpu_per_call(*peer, ADJACENT_CALLS)) / 2
                r |= {"in_process_ms": round(adjacent, 4),
                      "ratio": round(r["server_cpu_ms_per_request"] / adjacent, 2)}
            rows.append(r)
            print(f"  {name:15} c={c:<4} {r['rps']:>8.0f} req/s  p50 {r['p50_ms']:>7} ms  p99 {r['p99_ms']:>7} ms  "
                  f"errors {r['errors']}  server CPU {r['server_cpu_ms_per_request']} ms/req  "
                  f"in-process {r.get('in_process_ms', '-')} ms  ratio {r.get('ratio', '-')}", flush=True)
    return rows


def res_workers_hint() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def worker_rss(server: psutil.Process) -> list[int]:
    """RSS of each worker (spawned children; the server itself when it has none)."""
    workers = [p for p in server.children(recursive=True) if "resource_tracker" not in " ".join(p.cmdline())]
    return sorted(p.memory_info().rss for p in workers or [server])


def report(res: dict[str, Any]) -> str:
    m = res["machine"]
    out = [f"Corpus: {res['papers']} generated papers × ~{res['words']} words; {res['workers']} worker(s); "
           f"{m['cores']} cores ({m['cpu']}), load average {m['load_avg_1m']} before, {res['load_avg_1m_end']} "
           f"after; terms: {Path(res['ontology']).name}; client: {res['http'][0]['client'] if res['http'] else '-'}.",
           "", "In-process CPU per call (ms):", "",
           markdown_table(["call", "CPU ms"], list(res["in_process"].items())), "",
           "The API's ASGI app alone (no sockets, no uvicorn), CPU per request (ms); the framework alone answers the "
           "searches from stored results:", "",
           markdown_table(["endpoint", "app", "framework, lean path", "framework, FastAPI's path"],
                          [[k, *v.values()] for k, v in res.get("asgi", {}).items()]), "", "HTTP:", "",
           markdown_table(["endpoint", "connections", "req/s", "p50 ms", "p99 ms", "errors", "server CPU ms/req",
                           "in-process ms, adjacent", "ratio"],
                          [[r["endpoint"], r["connections"], round(r["rps"]), r["p50_ms"], r["p99_ms"], r["errors"],
                            r["server_cpu_ms_per_request"], r.get("in_process_ms", "-"), r.get("ratio", "-")]
                           for r in res["http"]]),
           "", f"Worker RSS: {', '.join(f'{b / 2**20:.0f} MiB' for b in res['worker_rss'])}"]
    if res.get("sessions"):
        out += ["", "Sessions benchmark:", "", sessions_report(res["sessions"])]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--papers", type=int, default=2000)
    ap.add_argument("--words", type=int, default=800)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--workers", type=int, default=None, help="API workers (default: flysift serve's, one per core)")
    ap.add_argument("--connections", default="1,8,32,128")
    ap.add_argument("--seconds", type=float, default=8.0, help="per endpoint and connection count")
    ap.add_argument("--repeat", type=int, default=2000, help="in-process calls per measurement")
    ap.add_argument("--agents", type=int, default=64, help="sessions benchmark agents (0: skip it)")
    ap.add_argument("--session-seconds", type=float, default=30.0)
    ap.add_argument("--work", type=Path, default=Path("bench-work/serving"))
    args = ap.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    data, key, genes = build(args.work, args.papers, args.words, args.seed)
    ontology = index_terms(data)
    qs = queries(genes)
    store_db = args.work / f"sessions-{int(time.time())}.sqlite"
    env = {**os.environ, "FLYSIFT_DATA_DIR": str(data), "FLYSIFT_AUTH": "false", "FLYSIFT_ENGINE": "embedded",
           "FLYSIFT_SESSION_STORE": "sqlite", "FLYSIFT_SESSION_DB": str(store_db),
           "FLYSIFT_RATE_LIMIT_PER_MINUTE": "0"}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [*flysift_command(), "serve", "--port", str(port)] + (["--workers", str(args.workers)]
                                                                  if args.workers else [])
    res: dict[str, Any] = {"machine": machine(), "papers": args.papers, "words": args.words, "ontology": ontology}
    os.environ["FLYSIFT_SESSION_DB"] = str(store_db)
    with served(cmd, base + "/v1/health", env=env) as proc:
        server = psutil.Process(proc.pid)
        with httpx.Client(base_url=base, timeout=60) as c:
            sid = c.post("/v1/sessions", json={"gene": genes[0].id, "max_papers": 16}).json()["id"]
            for q in qs[:5]:  # a session that has read and searched, as an agent's would be
                hits = c.post("/v1/papers/search", json={"query": q}, headers={"X-Session-Id": sid}).json()["hits"]
                if hits:
                    c.get(f"/v1/papers/{hits[0]['pmcid']}", headers={"X-Session-Id": sid})
        for _ in range(4 * res_workers_hint()):  # warm every worker's readers: new connections reach each worker
            with httpx.Client(base_url=base, timeout=120) as c:
                for reqs in endpoints(qs, sid).values():
                    for r in reqs:
                        c.request(r["method"], r["path"], content=r.get("body"),
                                  headers={"Content-Type": "application/json"})
        res["workers"] = len(worker_rss(server))
        print("in-process CPU per call:", flush=True)
        calls = in_process_calls(data, qs, sid)
        res["in_process"] = {k: cpu_per_call(fn, a, args.repeat) for k, (fn, a) in calls.items()}
        for k, v in res["in_process"].items():
            print(f"  {k}: {v} ms", flush=True)
        print("ASGI app alone, CPU per request:", flush=True)
        res["asgi"] = asgi_cost(data, endpoints(qs, sid), args.repeat)
        for k, v in res["asgi"].items():
            print(f"  {k}: " + ", ".join(f"{what} {ms} ms" for what, ms in v.items()), flush=True)
        print("HTTP:", flush=True)
        res["http"] = http_matrix(base, server, endpoints(qs, sid), [int(c) for c in args.connections.split(",")],
                                  args.seconds, args.work, calls)
        if args.agents:
            print(f"sessions benchmark, {args.agents} agents:", flush=True)
            cpu0 = tree_cpu(server)
            stats, coverages, secs, client_cpu = asyncio.run(drive(base, args.agents, args.session_seconds, genes,
                                                                   key))
            total = sum(len(v) for v in stats.ms.values())
            res["sessions"] = {
                "machine": res["machine"], "agents": args.agents, "seconds": secs, "workers": res["workers"],
                "store": "sqlite", "papers": args.papers, "words": args.words, "requests": total,
                "throughput_rps": round(total / secs, 1), "sessions_done": stats.sessions_done,
                "latency": {k: latency_summary(v) for k, v in stats.ms.items()},
                "status": {k: dict(v) for k, v in stats.status.items()}, "errors": dict(stats.errors),
                "coverage": coverages, "store_ops": "-", "load_avg_1m_end": round(os.getloadavg()[0], 2),
                "server_cpu_ms_per_request": round((tree_cpu(server) - cpu0) / max(1, total) * 1000, 3),
                "client_cpu_ms_per_request": round(client_cpu / max(1, total) * 1000, 3)}
        res["worker_rss"] = worker_rss(server)
    res["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    write_json(args.work / "results.json", res)
    (args.work / "results.md").write_text(report(res), encoding="utf-8")
    print(report(res))


if __name__ == "__main__":
    main()
