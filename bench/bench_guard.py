"""How long hostile JSON bodies hold a worker for everyone else: ``/v1/health`` latency while bodies arrive.

A one-worker service with auth on gets ``--bodies`` concurrent unauthenticated 8 MB bodies of 4 million small
integers (the issue #28 case: the input guard used to parse and check them on the event loop, before auth), then the
same bodies from an authenticated caller to a search route (refused by size, before parsing). A poller calls
``/v1/health`` every 20 ms throughout; the script reports its worst and p99 latency per phase, the hostile calls'
statuses, and the server's CPU time. ``--repo`` runs another checkout's code (e.g. ``/work/main``) with this script,
so a change can be measured side by side:

    .venv/bin/python bench/bench_guard.py --work /tmp/bench-guard
    .venv/bin/python bench/bench_guard.py --work /tmp/bench-guard --repo /work/main
"""

from __future__ import annotations

import argparse
import os
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
    ap.add_argument("--out", type=Path, default=None, help="Write the results as JSON here")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    data, key = prepare(args.work)
    result = {"machine": machine(), **run(data, key, args.repo.resolve(), args.bodies)}
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
