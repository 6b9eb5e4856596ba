"""Soak: many agents for a long time on the embedded engine; is the service's memory flat, is every answer right, is
p99 stable?

``--agents`` simulated agents (default 64) run mixed traffic for ``--minutes`` (default 30) against ``flysift serve
--workers N`` on loopback: each creates a session for a gene, searches papers and passages with ``gene=``, reads the
top unread papers until ``budget_exhausted``, searches and looks up GO terms inside the session, submits a prediction
and closes the session, then starts over. The corpus is the generated FlyAOC-shaped one of bench/bench_sessions.py
(reused when the parameters match) with the ontology sample that ``flysift demo`` indexes.

Every ``--sample-s`` seconds the script records the RSS of the server's process tree (all workers); every
``--window-s`` seconds of traffic it closes a window of latencies. It reports RSS over time and its growth after the
warm-up (``--warmup-min``: growth = last window's mean RSS over the mean of the first window after warm-up), p50/p99
per window, and every error (a non-2xx answer other than the expected ``budget_exhausted``, or a failed connection).
The service's own ``/metrics`` are scraped at the end and checked against the client's counts.

    .venv/bin/python bench/soak.py --minutes 30 --agents 64 --work /tmp/soak
    .venv/bin/python bench/soak.py --minutes 2 --agents 16 --warmup-min 0.5 --window-s 30   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp  # noqa: E402
import httpx  # noqa: E402
import psutil  # noqa: E402

from bench.bench_sessions import BUDGET, build, prediction, warm_up  # noqa: E402
from bench.common import (  # noqa: E402
    AGENT_QUERIES,
    AgentCalls,
    agent_sessions,
    flysift_command,
    free_port,
    machine,
    markdown_table,
    percentile,
    read_papers,
    served,
    tree_cpu,
    unread_hits,
    write_json,
)
from search.core.models import Gene  # noqa: E402

TERM_QUERIES = ["nucleus", "transcription factor activity", "wing disc development", "cell adhesion", "apoptosis",
                "dorsal closure", "axon guidance", "imaginal disc", "mitochondrion", "signal transduction"]


class Windows(AgentCalls):
    """Latencies and statuses per window of ``window_s`` seconds, and every error."""

    def __init__(self, window_s: float):
        super().__init__()
        self.window_s = window_s
        self.t0 = time.monotonic()
        self.ms: dict[int, list[float]] = defaultdict(list)
        self.by_tool: dict[str, list[float]] = defaultdict(list)
        self.calls: Counter = Counter()
        self.statuses: Counter = Counter()
        self.sessions = 0

    def start(self) -> None:
        self.t0 = time.monotonic()

    def record(self, tool: str, status: int, ms: float) -> None:
        self.ms[int((time.monotonic() - self.t0) // self.window_s)].append(ms)
        self.by_tool[tool].append(ms)
        self.calls[tool] += 1
        self.statuses[status] += 1


async def agent(i: int, base: str, genes: list, w: Windows, deadline: float) -> None:
    rng = random.Random(1000 + i)

    async def session(c: aiohttp.ClientSession, gene: Gene, sid: str, h: dict[str, str]) -> None:
        read: list[str] = []
        exhausted, offset, dry = False, 0, 0
        while not exhausted and dry < 3 and time.monotonic() < deadline:
            q = rng.choice([*AGENT_QUERIES, gene.symbol])
            hits = await unread_hits(w, c, h, q, gene.symbol, offset, read)
            if hits is None:
                break
            offset = offset + 10 if hits else 0   # past the last hit: start again with another query
            dry = 0 if hits else dry + 1          # three searches in a row with nothing new: submit
            await w.call(c, "search_passages", "POST", "/v1/passages/search", headers=h,
                         json={"query": q, "gene": gene.symbol, "limit": 5})
            t = await w.call(c, "search_terms", "GET", "/v1/terms/search", headers=h,
                             params={"query": rng.choice(TERM_QUERIES), "ontology": "go", "limit": 5})
            if t is not None and t.status_code == 200 and t.json().get("hits"):
                term = rng.choice(t.json()["hits"])["id"]
                await w.call(c, "get_term", "GET", f"/v1/terms/{term}", headers=h)
            exhausted = await read_papers(w, c, h, hits[:2], read)
        await w.call(c, "submit", "POST", f"/v1/sessions/{sid}/submission", json=prediction(gene, read))
        await w.call(c, "close_session", "POST", f"/v1/sessions/{sid}/close")
        w.sessions += 1

    await agent_sessions(w, base, genes, rng, deadline,
                         lambda gene: {"gene": gene.id, "max_papers": BUDGET, "synonym_policy": "full",
                                       "team": f"team{i % 8}", "hidden_terms": {"set": "flyaoc"}},
                         session, timeout_s=120, pause_s=1)


async def sample_rss(server: psutil.Process, every_s: float, until: float, out: list[tuple[float, int, int]],
                     t0: float) -> None:
    while time.monotonic() < until:
        rss = anon = 0
        for p in [server, *server.children(recursive=True)]:
            try:
                m = p.memory_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            rss += m.rss
            anon += max(0, m.rss - getattr(m, "shared", 0))
        out.append((round(time.monotonic() - t0, 1), rss, anon))
        await asyncio.sleep(every_s)


async def drive(base: str, server: psutil.Process, args: argparse.Namespace, genes: list) -> dict[str, Any]:
    await warm_up(base, genes[0])
    w = Windows(args.window_s)
    seconds = args.minutes * 60
    rss: list[tuple[float, int, int]] = []
    w.start()
    deadline = time.monotonic() + seconds
    sampler = asyncio.create_task(sample_rss(server, args.sample_s, deadline + 1, rss, w.t0))
    await asyncio.gather(*(agent(i, base, genes, w, deadline) for i in range(args.agents)))
    await sampler
    return {"windows": w, "rss": rss}


def summarise(w: Windows, rss: list[tuple[float, int, int]], args: argparse.Namespace) -> dict[str, Any]:
    windows: list[dict[str, Any]] = []
    total = args.minutes * 60
    for k in sorted(w.ms):
        ms = w.ms[k]
        start, end = k * w.window_s, (k + 1) * w.window_s
        if end > total + 1:   # calls answered after the deadline: not a window of traffic
            continue
        in_window = [r for t, r, _ in rss if start <= t < end]
        windows.append({"from_s": start, "calls": len(ms), "calls_per_s": round(len(ms) / w.window_s, 1),
                        "p50_ms": round(percentile(ms, 50), 1), "p99_ms": round(percentile(ms, 99), 1),
                        "max_ms": round(max(ms), 1),
                        "rss_mib": round(sum(in_window) / len(in_window) / 2**20, 1) if in_window else None})
    warm = args.warmup_min * 60
    after = [win for win in windows if win["from_s"] >= warm and win["rss_mib"]]
    growth = (after[-1]["rss_mib"] / after[0]["rss_mib"] - 1) if len(after) >= 2 else None
    p99s = [win["p99_ms"] for win in windows if win["from_s"] >= warm]
    return {"windows": windows, "rss_growth_after_warmup": round(growth, 4) if growth is not None else None,
            "rss_samples": [(t, round(r / 2**20, 1), round(a / 2**20, 1)) for t, r, a in rss],
            "p99_after_warmup_min_max_ms": [min(p99s), max(p99s)] if p99s else None,
            "calls": dict(w.calls), "statuses": dict(w.statuses), "errors": dict(w.errors),
            "sessions": w.sessions,
            "latency_by_tool": {t: {"n": len(v), "p50_ms": round(percentile(v, 50), 1),
                                    "p99_ms": round(percentile(v, 99), 1)} for t, v in sorted(w.by_tool.items())}}


def scrape(base: str) -> dict[str, float]:
    """The service's own request counts by status, from /metrics (one scrape sums every worker)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = defaultdict(float)
    for fam in text_string_to_metric_families(httpx.get(f"{base}/metrics", timeout=60).text):
        for s in fam.samples:
            if s.name == "flysift_requests_total":
                out[s.labels["status"]] += s.value
    return dict(out)


def report(res: dict[str, Any]) -> str:
    s = res["summary"]
    rows = [[f"{win['from_s'] / 60:g}", win["calls"], win["calls_per_s"], win["p50_ms"], win["p99_ms"],
             win["max_ms"], win["rss_mib"]] for win in s["windows"]]
    tools = [[t, v["n"], v["p50_ms"], v["p99_ms"]] for t, v in s["latency_by_tool"].items()]
    growth = s["rss_growth_after_warmup"]
    return "\n".join([
        f"{res['agents']} agents, {res['minutes']} min, {res['workers']} worker(s), corpus {res['papers']} papers; "
        f"{sum(s['calls'].values())} calls, {s['sessions']} sessions; errors: {sum(s['errors'].values())} "
        f"{s['errors']}; RSS growth after {res['warmup_min']} min warm-up: "
        f"{'-' if growth is None else f'{growth:+.1%}'}; p99 per window after warm-up: "
        f"{s['p99_after_warmup_min_max_ms']} ms; server CPU {res['server_cpu_s']:.0f} s, load average "
        f"{res['machine']['load_avg_1m']} → {res['load_avg_1m_end']}; /metrics statuses {res['metrics_statuses']}",
        "", markdown_table(["from minute", "calls", "calls/s", "p50 ms", "p99 ms", "max ms", "server RSS MiB"], rows),
        "", markdown_table(["call", "n", "p50 ms", "p99 ms"], tools)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--warmup-min", type=float, default=5)
    ap.add_argument("--window-s", type=float, default=300)
    ap.add_argument("--sample-s", type=float, default=15)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--papers", type=int, default=2000)
    ap.add_argument("--words", type=int, default=800)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--work", type=Path, default=Path("bench-work/soak"))
    args = ap.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    before = machine()   # the load average before the run: other jobs on a shared machine
    data, _, genes = build(args.work, args.papers, args.words, args.seed)
    if not (data / "terms" / "go").exists():
        from indexer.ontology_sample import sample_files
        from search.core.config import Settings
        from search.ontology.model import Ontology
        from search.services import Services

        terms = Services.open(Settings(data_dir=data)).terms
        for name, path in sample_files().items():
            terms.index_ontology(Ontology.load(path, name))
    store_db = args.work / f"sessions-{int(time.time())}.sqlite"
    env = {**os.environ, "FLYSIFT_DATA_DIR": str(data), "FLYSIFT_AUTH": "false", "FLYSIFT_ENGINE": "embedded",
           "FLYSIFT_SESSION_DB": str(store_db), "FLYSIFT_RATE_LIMIT_PER_MINUTE": "0"}
    port = args.port or free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [*flysift_command(), "serve", "--port", str(port), "--workers", str(args.workers)]
    with served(cmd, base + "/v1/ready", env=env) as proc:
        server = psutil.Process(proc.pid)
        cpu0 = tree_cpu(server)
        out = asyncio.run(drive(base, server, args, genes))
        server_cpu = tree_cpu(server) - cpu0
        statuses = scrape(base)
    res = {"machine": before, "agents": args.agents, "minutes": args.minutes, "workers": args.workers,
           "papers": args.papers, "warmup_min": args.warmup_min, "server_cpu_s": round(server_cpu, 1),
           "load_avg_1m_end": round(os.getloadavg()[0], 2), "metrics_statuses": statuses,
           "summary": summarise(out["windows"], out["rss"], args)}
    write_json(args.work / "soak.json", res)
    (args.work / "soak.md").write_text(report(res), encoding="utf-8")
    print(report(res))


if __name__ == "__main__":
    main()
