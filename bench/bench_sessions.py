"""Sessions under load: simulated agents run search → read → submit loops against a served API on loopback.

Each agent creates a session for a gene (budget 16), searches with ``gene=`` expansion, reads the top unread hits
until the service refuses with ``budget_exhausted``, submits a FlyAOC prediction, reads its coverage against the
generator's answer key, closes the session and starts over with another gene. The script reports throughput,
p50/p99 latency per tool and errors (every non-2xx answer except the expected ``budget_exhausted``), and coverage
reports of a few genes. The corpus is generated (``indexer/synthetic.py``) and indexed in-process; the API runs as
``flysift serve --workers N`` with the SQLite store (``--store cluster --cluster-url URL`` for the shared store).

    .venv/bin/python bench/bench_sessions.py --agents 64 --seconds 60 --work /tmp/bench-sessions
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp  # noqa: E402
import httpx  # noqa: E402
import psutil  # noqa: E402

from bench.common import (  # noqa: E402
    AGENT_QUERIES,
    AgentCalls,
    agent_sessions,
    flysift_command,
    free_port,
    latency_summary,
    machine,
    markdown_table,
    read_papers,
    served,
    stopwatch,
    tree_cpu,
    unread_hits,
    write_json,
)
from indexer.synthetic import SyntheticConfig, answer_key, bundled_genes, generate  # noqa: E402
from search.core.models import Gene  # noqa: E402
from search.engines.embedded.engine import EmbeddedEngine  # noqa: E402
from search.text.lexicon import Lexicon  # noqa: E402
from search.text.passages import split_passages  # noqa: E402

BUDGET = 16


def build(work: Path, papers: int, words: int, seed: int) -> tuple[Path, dict[str, list[str]], list]:
    """Index the generated corpus (reused when the parameters match) and write the lexicon next to it."""
    cfg = SyntheticConfig(n_papers=papers, words_per_paper=words, seed=seed)
    data = work / f"data-{papers}-{words}-{seed}"
    engine = EmbeddedEngine(data)
    if not engine.has_index():
        build = engine.open_build("bench-sessions", resume=False)
        for p in generate(cfg):
            build.add(p, split_passages(p))
        build.commit({})
        build.publish()
    genes = bundled_genes()
    Lexicon(genes).save(data / "lexicon.tsv")
    return data, answer_key(cfg), genes


class Stats(AgentCalls):
    def __init__(self):
        super().__init__()
        self.ms: dict[str, list[float]] = defaultdict(list)
        self.status: dict[str, Counter] = defaultdict(Counter)
        self.sessions_done = 0

    def record(self, tool: str, status: int, ms: float) -> None:
        self.ms[tool].append(ms)
        self.status[tool][status] += 1


def prediction(gene, read: list[str]) -> dict:
    return {"gene_id": gene.id, "gene_symbol": gene.symbol,
            "task1_function": [{"go_id": "GO:0005634", "qualifier": "located_in", "aspect": "C",
                                "evidence": {"pmcid": read[0] if read else "PMC1", "text": "nuclear"}}],
            "task2_expression": [{"expression_type": "polypeptide", "anatomy_id": "FBbt:00000001"}],
            "task3_synonyms": {"fullname_synonyms": gene.fullname_synonyms[:2],
                               "symbol_synonyms": gene.symbol_synonyms[:3]}}


async def agent(i: int, base: str, genes: list, key: dict[str, list[str]], stats: Stats, deadline: float,
                coverages: dict[str, dict]) -> None:
    rng = random.Random(i)

    async def session(c: aiohttp.ClientSession, gene: Gene, sid: str, h: dict[str, str]) -> None:
        read: list[str] = []
        exhausted, offset = False, 0
        while not exhausted and time.monotonic() < deadline:
            q = rng.choice([*AGENT_QUERIES, gene.symbol])
            hits = await unread_hits(stats, c, h, q, gene.symbol, offset, read)
            if hits is None:
                break
            offset = min(offset + 10, 900)
            if not hits:
                continue
            await stats.call(c, "search_passages", "POST", "/v1/passages/search", headers=h,
                             json={"query": q, "gene": gene.symbol, "limit": 5})
            exhausted = await read_papers(stats, c, h, hits[:3], read)
        await stats.call(c, "submit", "POST", f"/v1/sessions/{sid}/submission", json=prediction(gene, read))
        cited = key.get(gene.id, [])[:60]
        if cited:
            r = await stats.call(c, "coverage", "GET", f"/v1/sessions/{sid}/coverage",
                                 params={"pmcids": ",".join(cited)})
            if r is not None and r.status_code == 200 and exhausted:
                coverages[gene.symbol] = r.json()
        await stats.call(c, "close_session", "POST", f"/v1/sessions/{sid}/close")
        stats.sessions_done += exhausted

    await agent_sessions(stats, base, genes, rng, deadline,
                         lambda gene: {"gene": gene.id, "max_papers": BUDGET, "synonym_policy": "full",
                                       "team": f"agent{i % 8}"}, session, timeout_s=60)


async def warm_up(base: str, gene) -> None:
    """One call of each kind per worker-ish, so that lazy loads (index readers, lexicon) are not timed."""
    async with httpx.AsyncClient(base_url=base, timeout=120) as c:
        for _ in range(8):
            sid = (await c.post("/v1/sessions", json={"gene": gene.id, "team": "warmup"})).json()["id"]
            h = {"X-Session-Id": sid}
            hits = (await c.post("/v1/papers/search", json={"query": "expression", "gene": gene.symbol},
                                 headers=h)).json()["hits"]
            await c.post("/v1/passages/search", json={"query": "expression"}, headers=h)
            await c.get(f"/v1/papers/{hits[0]['pmcid']}", headers=h)


def store_ops(path: Path, n: int) -> dict[str, float]:
    """Microseconds per store operation on an idle SQLite store (what a session adds to a call)."""
    from search.core.models import Gene
    from search.schema.sessions import Session, TraceEvent
    from search.sessions.store import SqliteStore

    st = SqliteStore(path)
    st.create_session(Session(id="ses_bench", team="b", gene=Gene(id="FBgn0000001", symbol="x"), max_papers=n,
                              created_at=time.time()))
    ev = TraceEvent(time=time.time(), tool="search_papers", arguments={"body": {"query": "x"}},
                    returned_ids=[f"PMC{i}" for i in range(10)], latency_ms=1.0, status=200)
    out = {}
    for name, op in (("get_session", lambda i: st.get_session("ses_bench")),
                     ("charge_read", lambda i: st.charge_read("ses_bench", f"PMC{i}")),
                     ("append_trace", lambda i: st.append_trace("ses_bench", ev))):
        with stopwatch() as t:
            for i in range(n):
                op(i)
        out[name + "_us"] = round(t["s"] / n * 1e6, 1)
    return out


async def drive(base: str, agents: int, seconds: float, genes: list, key: dict[str, list[str]]):
    await warm_up(base, genes[0])
    stats = Stats()
    coverages: dict[str, dict] = {}
    deadline = time.monotonic() + seconds
    cpu0 = time.process_time()
    with stopwatch() as t:
        await asyncio.gather(*(agent(i, base, genes, key, stats, deadline, coverages) for i in range(agents)))
    # the agents share the machine with the server: what their client costs is what the server could not use
    return stats, coverages, t["s"], time.process_time() - cpu0


def report(res: dict) -> str:
    rows = [[tool, s["n"], round(s["n"] / res["seconds"], 1), s["p50_ms"], s["p99_ms"], s["max_ms"],
             " ".join(f"{k}:{v}" for k, v in sorted(res["status"][tool].items()))]
            for tool, s in res["latency"].items()]
    out = [f"{res['agents']} agents, {res['seconds']:.0f} s, {res['workers']} API worker(s), store {res['store']}, "
           f"corpus {res['papers']} papers × ~{res['words']} words; {res['requests']} requests = "
           f"{res['throughput_rps']} req/s; sessions that read their whole budget: {res['sessions_done']}; "
           f"errors (non-2xx other than budget_exhausted): {sum(res['errors'].values())} {dict(res['errors'])}; "
           f"load average (1 min) before/after: {res['machine']['load_avg_1m']}/{res['load_avg_1m_end']}; "
           f"SQLite store alone, µs per op: {res['store_ops']}; CPU ms per request: server "
           f"{res.get('server_cpu_ms_per_request', '-')}, agents' client {res.get('client_cpu_ms_per_request', '-')}",
           "", markdown_table(["tool", "calls", "calls/s", "p50 ms", "p99 ms", "max ms", "statuses"], rows),
           "Coverage of the generator's answer-key papers (first 60 per gene) by one budget-16 session each:", "",
           markdown_table(["gene", "cited", "read", "surfaced, not read", "never surfaced", "read fraction"],
                          [[g, len(c["cited"]), len(c["read"]), len(c["surfaced_not_read"]), len(c["never_surfaced"]),
                            c["read_fraction"]] for g, c in sorted(res["coverage"].items())[:6]])]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--workers", type=int, default=2, help="API worker processes (flysift serve --workers)")
    ap.add_argument("--papers", type=int, default=2000)
    ap.add_argument("--words", type=int, default=800)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--store", choices=("sqlite", "cluster"), default="sqlite")
    ap.add_argument("--cluster-url", help="Elasticsearch/OpenSearch URL for --store cluster")
    ap.add_argument("--work", type=Path, default=Path("bench-work/sessions"))
    args = ap.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    with stopwatch() as tb:
        data, key, genes = build(args.work, args.papers, args.words, args.seed)
    store_db = args.work / f"sessions-{int(time.time())}.sqlite"
    env = {**os.environ, "FLYSIFT_DATA_DIR": str(data), "FLYSIFT_AUTH": "false", "FLYSIFT_ENGINE": "embedded",
           "FLYSIFT_SESSION_STORE": args.store, "FLYSIFT_SESSION_DB": str(store_db)}
    if args.store == "cluster":
        env |= {"FLYSIFT_CLUSTER_URL": args.cluster_url, "FLYSIFT_CLUSTER_INDEX_PREFIX": f"bench{int(time.time())}"}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [*flysift_command(), "serve", "--port", str(port), "--workers", str(args.workers)]
    with served(cmd, base + "/v1/health", env=env) as proc:
        server = psutil.Process(proc.pid)
        cpu0 = tree_cpu(server)
        stats, coverages, secs, client_cpu = asyncio.run(drive(base, args.agents, args.seconds, genes, key))
        server_cpu = tree_cpu(server) - cpu0
    total = sum(len(v) for v in stats.ms.values())
    ops = store_ops(args.work / f"store-ops-{int(time.time())}.sqlite", 2000)
    res = {"machine": machine(), "agents": args.agents, "seconds": secs, "workers": args.workers, "store": args.store,
           "papers": args.papers, "words": args.words, "build_seconds": round(tb["s"], 1), "requests": total,
           "throughput_rps": round(total / secs, 1), "sessions_done": stats.sessions_done,
           "latency": {k: latency_summary(v) for k, v in stats.ms.items()},
           "status": {k: dict(v) for k, v in stats.status.items()}, "errors": dict(stats.errors),
           "coverage": coverages, "store_ops": ops, "load_avg_1m_end": round(os.getloadavg()[0], 2),
           "server_cpu_ms_per_request": round(server_cpu / max(1, total) * 1000, 3),
           "client_cpu_ms_per_request": round(client_cpu / max(1, total) * 1000, 3)}
    write_json(args.work / "results.json", res)
    (args.work / "results.md").write_text(report(res), encoding="utf-8")
    print(report(res))


if __name__ == "__main__":
    main()
