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
import json as json_module
import os
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp  # noqa: E402
import httpx  # noqa: E402
import psutil  # noqa: E402

from bench.common import (  # noqa: E402
    flysift_command,
    free_port,
    latency_summary,
    machine,
    markdown_table,
    served,
    stopwatch,
    tree_cpu,
    write_json,
)
from indexer.synthetic import SyntheticConfig, answer_key, bundled_genes, generate  # noqa: E402
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


class Answer(NamedTuple):
    """What an agent keeps of a response (read whole before the call is timed as done)."""

    status_code: int
    body: Any
    content_type: str

    def json(self) -> Any:
        return self.body


class Stats:
    def __init__(self):
        self.ms: dict[str, list[float]] = defaultdict(list)
        self.status: dict[str, Counter] = defaultdict(Counter)
        self.errors: Counter = Counter()
        self.sessions_done = 0

    async def call(self, client: aiohttp.ClientSession, tool: str, method: str, url: str, *,
                   json: Any = None, params: dict[str, Any] | None = None,
                   headers: dict[str, str] | None = None) -> Answer | None:
        t0 = time.perf_counter()
        try:
            async with client.request(method, url, json=json, params=params, headers=headers) as r:
                raw = await r.read()
                ctype = r.headers.get("content-type", "")
        except (TimeoutError, aiohttp.ClientError) as e:
            self.errors[f"{tool}: {type(e).__name__}"] += 1
            return None
        self.ms[tool].append((time.perf_counter() - t0) * 1000)
        body = json_module.loads(raw) if ctype.startswith("application/json") and raw else None
        out = Answer(r.status, body, ctype)
        self.status[tool][r.status] += 1
        if r.status >= 400:
            code = body.get("error", {}).get("code", "?") if isinstance(body, dict) else "?"
            if code != "budget_exhausted":
                self.errors[f"{tool}: {r.status} {code}"] += 1
        return out


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
    # aiohttp, not httpx: the agents share the two cores with the server, and httpx's client cost 1.5–1.7 ms of CPU
    # per request against ~0.5 ms here, CPU the server could not use (the report gives both)
    async with aiohttp.ClientSession(base_url=base, timeout=aiohttp.ClientTimeout(total=60)) as c:
        while time.monotonic() < deadline:
            gene = rng.choice(genes)
            r = await stats.call(c, "create_session", "POST", "/v1/sessions",
                                 json={"gene": gene.id, "max_papers": BUDGET, "synonym_policy": "full",
                                       "team": f"agent{i % 8}"})
            if r is None or r.status_code != 201:
                continue
            sid = r.json()["id"]
            h = {"X-Session-Id": sid}
            read: list[str] = []
            exhausted, offset = False, 0
            while not exhausted and time.monotonic() < deadline:
                q = rng.choice(["expression", "mutant phenotype", "signaling", "localization", gene.symbol])
                r = await stats.call(c, "search_papers", "POST", "/v1/papers/search", headers=h,
                                     json={"query": q, "gene": gene.symbol, "limit": 10, "offset": offset})
                if r is None or r.status_code != 200:
                    break
                hits = [x["pmcid"] for x in r.json()["hits"] if x["pmcid"] not in read]
                offset = min(offset + 10, 900)
                if not hits:
                    continue
                await stats.call(c, "search_passages", "POST", "/v1/passages/search", headers=h,
                                 json={"query": q, "gene": gene.symbol, "limit": 5})
                for pmcid in hits[:3]:
                    r = await stats.call(c, "get_paper", "GET", f"/v1/papers/{pmcid}", headers=h,
                                         params={"sections": "ABSTRACT,RESULTS", "max_chars": 4000})
                    if r is not None and r.status_code == 409:
                        exhausted = True
                        break
                    read.append(pmcid)
            await stats.call(c, "submit", "POST", f"/v1/sessions/{sid}/submission", json=prediction(gene, read))
            cited = key.get(gene.id, [])[:60]
            if cited:
                r = await stats.call(c, "coverage", "GET", f"/v1/sessions/{sid}/coverage",
                                     params={"pmcids": ",".join(cited)})
                if r is not None and r.status_code == 200 and exhausted:
                    coverages[gene.symbol] = r.json()
            await stats.call(c, "close_session", "POST", f"/v1/sessions/{sid}/close")
            stats.sessions_done += exhausted


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
