"""How long hostile JSON bodies hold a worker for everyone else: ``/v1/health`` latency while bodies arrive.

A one-worker service with auth on gets ``--bodies`` concurrent unauthenticated 8 MB bodies of 4 million small
integers (the issue #28 case: the input guard used to parse and check them on the event loop, before auth), then the
same bodies from an authenticated caller to a search route (refused by size, before parsing). A poller calls
``/v1/health`` every 20 ms throughout; the script reports its worst and p99 latency per phase, the hostile calls'
statuses, and the server's CPU time. ``--repo`` runs another checkout's code (e.g. ``/work/main``) with this script,
so a change can be measured side by side:

    .venv/bin/python bench/bench_guard.py --work /tmp/bench-guard
    .venv/bin/python bench/bench_guard.py --work /tmp/bench-guard --repo /work/main

It also times what a legitimate large body costs the guard: ``parse_json_body`` (parse and bounds check) of a
build-like body of ``--values`` JSON values, in a fresh process of the checkout's code, CPU time, best of three;
``--parse-only`` measures only that (seconds, no server).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import psutil  # noqa: E402

from bench.common import free_port, latency_summary, machine, served, tree_cpu, write_json  # noqa: E402

HOSTILE = b"[" + b",".join([b"1"] * 4_000_000) + b"]"   # 8 MB, 4 million values


def prepare(work: Path) -> tuple[Path, str]:
    from search.sessions.keys import new_key
    from search.sessions.store import SqliteStore

    data = work / "data"
    if not (data / "collections" / "default" / "CURRENT").exists():
        from search.core.models import Paper
        from search.engines.embedded.engine import EmbeddedEngine
        from search.text.passages import split_passages

        build = EmbeddedEngine(data).open_build("bench-guard", resume=False)
        for i in range(50):
            p = Paper(pmcid=f"PMC{i + 1}", title=f"Wing disc growth {i}", abstract="Dpp controls growth. " * 20)
            build.add(p, split_passages(p))
        build.commit({})
        build.publish()
    store = SqliteStore(data / "sessions.sqlite")
    if "bench" not in store.list_teams():
        store.create_team("bench")
    key, record = new_key("bench", ["agent", "admin"])
    store.add_key(record)
    store.close()
    return data, key


def phase(url: str, server: psutil.Process, headers: dict[str, str], path: str, bodies: int) -> dict:
    """``bodies`` hostile bodies at once to ``path`` while ``/v1/health`` is polled."""
    latencies: list[float] = []
    statuses: list[int] = []
    stop = threading.Event()

    def poll() -> None:
        with httpx.Client(timeout=120) as c:
            while not stop.is_set():
                t0 = time.perf_counter()
                c.get(f"{url}/v1/health")
                latencies.append((time.perf_counter() - t0) * 1000)
                time.sleep(0.02)

    def send() -> None:
        with httpx.Client(timeout=300) as c:
            r = c.post(f"{url}{path}", content=HOSTILE, headers={**headers, "Content-Type": "application/json"})
            statuses.append(r.status_code)

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(0.5)
    cpu0, t0 = tree_cpu(server), time.perf_counter()
    senders = [threading.Thread(target=send) for _ in range(bodies)]
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    wall = time.perf_counter() - t0
    time.sleep(0.5)
    stop.set()
    poller.join()
    return {"health_ms": latency_summary(latencies), "statuses": sorted(statuses), "wall_s": round(wall, 2),
            "server_cpu_s": round(tree_cpu(server) - cpu0, 2)}


def legitimate_body(values: int) -> bytes:
    """A build-like body of about ``values`` JSON values: papers with a few fields and short paragraphs."""
    paper = {"pmcid": "PMC1", "title": "Wing disc growth", "year": 2001,
             "sections": [{"type": "RESULTS", "paragraphs": ["Dpp controls growth.", "Notch signalling."]}]}
    per_paper = 10   # the object, its 4 fields' values, the section list, the section and its 3 values
    return json.dumps({"papers": [dict(paper, pmcid=f"PMC{i + 1}") for i in range(values // per_paper)]}).encode()


#: run in the checkout measured: CPU seconds of its parse and check, and of the bounds check alone (best of three)
PARSE_TIMER = """
import json, sys, time
from search.core.inputs import check_json_value, parse_json_body
raw = open(sys.argv[1], "rb").read()
value = json.loads(raw)
def best(f, x):
    times = []
    for _ in range(3):
        t0 = time.process_time()
        f(x)
        times.append(time.process_time() - t0)
    return min(times)
print(json.dumps({"parse_and_check_cpu_s": round(best(parse_json_body, raw), 3),
                  "check_cpu_s": round(best(check_json_value, value), 3)}))
"""


def parse_cost(repo: Path, body: Path) -> dict[str, float]:
    """What the checkout's guard spends on ``body`` (in a fresh process of that checkout's code)."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    out = subprocess.run([sys.executable, "-c", PARSE_TIMER, str(body)], env=env, cwd=repo, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


def run(data: Path, key: str, repo: Path, bodies: int) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(repo), "FLYSIFT_AUTH": "true", "FLYSIFT_RATE_LIMIT_PER_MINUTE": "0"}
    cmd = [sys.executable, "-m", "search.cli.main", "serve", "--data-dir", str(data), "--port", str(port),
           "--workers", "1"]
    out: dict = {"repo": str(repo), "bodies": bodies, "body_bytes": len(HOSTILE)}
    os.chdir(repo)   # ``python -m`` puts the working directory first on the path: serve that checkout's code
    with served(cmd, f"{url}/v1/health", env=env) as proc:
        server = psutil.Process(proc.pid)
        out["unauthenticated"] = phase(url, server, {}, "/v1/papers/search", bodies)
        out["authenticated, search route"] = phase(url, server, {"Authorization": f"Bearer {key}"},
                                                   "/v1/papers/search", bodies)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-guard"))
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1],
                    help="Checkout whose code serves (default: this one)")
    ap.add_argument("--bodies", type=int, default=3)
    ap.add_argument("--values", type=int, default=1_000_000, help="JSON values of the legitimate body")
    ap.add_argument("--parse-only", action="store_true", help="Only time the guard's parse of a legitimate body")
    ap.add_argument("--out", type=Path, default=None, help="Write the results as JSON here")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    body = args.work / f"legitimate-{args.values}.json"
    if not body.exists():
        body.write_bytes(legitimate_body(args.values))
    parse = {"values": args.values, "body_bytes": body.stat().st_size, **parse_cost(args.repo.resolve(), body)}
    print(f"a legitimate body of {args.values:,} values ({parse['body_bytes'] / 1e6:.1f} MB): parse and check "
          f"{parse['parse_and_check_cpu_s']} s of CPU, the bounds check alone {parse['check_cpu_s']} s")
    if args.parse_only:
        if args.out:
            write_json(args.out, {"machine": machine(), "repo": str(args.repo.resolve()), "parse": parse})
        return
    data, key = prepare(args.work)
    result = {"machine": machine(), **run(data, key, args.repo.resolve(), args.bodies), "parse": parse}
    for phase in ("unauthenticated", "authenticated, search route"):
        r = result[phase]
        print(f"{phase}: {args.bodies} bodies of {len(HOSTILE) / 1e6:.0f} MB answered {r['statuses']} in "
              f"{r['wall_s']} s (server CPU {r['server_cpu_s']} s); /v1/health beside them: "
              f"p50 {r['health_ms']['p50_ms']:.1f} ms, p99 {r['health_ms']['p99_ms']:.1f} ms, "
              f"max {r['health_ms']['max_ms']:.1f} ms")
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
