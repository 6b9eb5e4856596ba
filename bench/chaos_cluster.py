"""Chaos under load: a three-node OpenSearch cluster, two API processes sharing sessions through the cluster store,
agents searching, reading within their budget and submitting, and a data node killed mid-run twice (the elected
master, then a node that is not), each restarted after a few seconds.

The script starts the cluster with deploy/cluster-local (``FLYSIFT_NODES=3``), or is given one (``--cluster-url`` of
its first node and ``--cluster-home``, the ``FLYSIFT_NODE_HOME`` it was started with, whose ``nodes`` file names each
node's pid), indexes a generated corpus into it under an index prefix of its own (``--shards`` primaries per index so
that every node holds some, one replica), starts ``flysift serve`` twice on the cluster, and drives ``--agents``
agents for at least ``--seconds`` (longer when a failover is slower: the load goes on until 15 % of ``--seconds``
after the second node is green again; ``seconds`` in the JSON is the real length): each agent's calls alternate
between the two API processes, so every session is written by both. An answer 503 with ``Retry-After`` is the
documented "retry later": the agent waits (at most 2 s) and sends the call again; every other failure is unexpected.

At the end every session is read back: ``budget_mismatches`` counts sessions whose charged budget differs from the
distinct papers the agent was answered (reads are ``distinct``-charged), ``trace_gaps`` counts missing sequence numbers
and calls the agent was answered that the trace lacks. Latency percentiles are per phase (before the first kill,
during a failover: from a kill until green again, after); ``cpu_seconds`` gives the CPU the API processes, the
nodes' JVMs and this script (the agents) used during the run. One JSON object goes to stdout (and ``--out``):

    .venv/bin/python bench/chaos_cluster.py --agents 64 --seconds 240 [--cluster-url URL --cluster-home DIR]

With ``--check`` the exit status is 1 unless ``unexpected_errors``, ``budget_mismatches`` and ``trace_gaps`` are 0
(CI's short form: ``--agents 16 --seconds 60 --papers 200 --check``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp  # noqa: E402
import httpx  # noqa: E402
import psutil  # noqa: E402

from bench.common import REPO, flysift_command, latency_summary, machine, served, tree_cpu  # noqa: E402
from indexer.synthetic import SyntheticConfig, bundled_genes, generate  # noqa: E402
from search.core.config import Settings  # noqa: E402
from search.engines import open_engine  # noqa: E402
from search.text.lexicon import Lexicon  # noqa: E402
from search.text.passages import split_passages  # noqa: E402

BUDGET = 8
START = REPO / "deploy" / "cluster-local" / "start.sh"
STOP = REPO / "deploy" / "cluster-local" / "stop.sh"
MAX_RETRY_WAIT_S = 2.0
TRACED_TOOLS = ("search_papers", "search_passages", "get_paper")


def say(msg: str) -> None:
    print(f"chaos: {msg}", file=sys.stderr, flush=True)


# ---- the cluster --------------------------------------------------------------------------------------------------
@dataclass
class Node:
    name: str
    url: str
    pid: int
    home: str


class Cluster:
    """The three nodes of deploy/cluster-local under ``home``: who they are, who is master, kill and restart."""

    def __init__(self, home: Path, port: int):
        self.home, self.port = home, port
        self.env = {**os.environ, "FLYSIFT_NODES": "3", "FLYSIFT_NODE_HOME": str(home),
                    "FLYSIFT_NODE_PORT": str(port)}

    def start(self) -> str:
        say(f"starting three nodes (home {self.home}, ports {self.port}-{self.port + 2})")
        t0 = time.monotonic()
        out = subprocess.run(["bash", str(START)], env=self.env, check=True, capture_output=True, text=True)
        self.start_seconds = round(time.monotonic() - t0, 1)
        return out.stdout.strip()

    def stop(self) -> None:
        subprocess.run(["bash", str(STOP)], env=self.env, check=False, capture_output=True)

    def nodes(self) -> list[Node]:
        """From start.sh's ``nodes`` file: name, URL, pid and home per line."""
        out = []
        for row in (self.home / "nodes").read_text().splitlines():
            if row.strip():
                name, url, pid, home = row.split(" ", 3)
                out.append(Node(name, url, int(pid), home))
        return out

    def call(self, path: str, avoid: str | None = None, timeout: float = 5) -> Any:
        """GET from the first node that answers (not ``avoid``)."""
        last: Exception | None = None
        for n in self.nodes():
            if n.name == avoid:
                continue
            try:
                r = httpx.get(n.url + path, timeout=timeout)
                r.raise_for_status()
                return r.json()
            except httpx.HTTPError as e:
                last = e
        raise RuntimeError(f"no node answered {path}: {last}")

    def master(self, avoid: str | None = None, local: bool = False) -> str:
        """The elected master's name ("" when none); ``local``: as the answering node sees it, at once."""
        got = self.call("/_cat/cluster_manager?format=json" + "&local=true" * local, avoid, 2 if local else 5)
        name = (got[0].get("node") or "") if got else ""
        return "" if name == "-" else name   # "-": the node knows of no elected master

    def primary_of(self, index: str) -> str:
        return next(s["node"] for s in self.call(f"/_cat/shards/{index}?format=json") if s["prirep"] == "p")

    def kill(self, name: str) -> None:
        node = next(n for n in self.nodes() if n.name == name)
        os.kill(node.pid, signal.SIGKILL)

    def restart(self) -> subprocess.Popen:
        """start.sh again: it starts the node whose process is gone and waits for green (in the background)."""
        return subprocess.Popen(["bash", str(START)], env=self.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    def rss(self) -> dict[str, int]:
        out = {}
        for n in self.nodes():
            with contextlib.suppress(psutil.Error):
                out[n.name] = psutil.Process(n.pid).memory_info().rss
        return out


class HealthWatch(threading.Thread):
    """Polls cluster health and the master every 0.5 s from a node other than the one killed last."""

    def __init__(self, cluster: Cluster, t0: float):
        super().__init__(daemon=True)
        self.cluster, self.t0 = cluster, t0
        #: (seconds since the start, health status, master, nodes in the cluster)
        self.samples: list[tuple[float, str, str, int]] = []
        self.avoid: str | None = None
        self.stop = threading.Event()
        #: per node process (pid): CPU seconds when first and last seen, so a killed node's CPU up to its kill counts
        self.cpu: dict[int, list[float]] = {}

    def sample_cpu(self) -> None:
        try:
            nodes = self.cluster.nodes()
        except (OSError, ValueError):   # the nodes file is rewritten by a restart (atomically; be safe)
            return
        for n in nodes:
            try:
                t = psutil.Process(n.pid).cpu_times()
            except psutil.Error:
                continue
            self.cpu.setdefault(n.pid, [t.user + t.system] * 2)[1] = t.user + t.system

    def nodes_cpu(self) -> float:
        """CPU seconds the nodes' JVMs used since the first sample (within 0.5 s of each kill)."""
        return sum(last - first for first, last in self.cpu.values())

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.monotonic() - self.t0
            self.sample_cpu()
            try:   # each node's own view (local): answered at once, also while no master is elected
                health = self.cluster.call("/_cluster/health?local=true", self.avoid, timeout=2)
                status, nodes = health["status"], health["number_of_nodes"]
                master = self.cluster.master(self.avoid, local=True)
            except Exception:
                status, master, nodes = "unreachable", "", 0
            self.samples.append((t, status, master, nodes))
            self.stop.wait(0.5)

    def first(self, after: float, pred) -> float | None:
        """The time of the first sample from ``after`` on for which ``pred(status, master, nodes)`` holds."""
        return next((t for t, s, m, n in list(self.samples) if t >= after and pred(s, m, n)), None)


# ---- the corpus and the API processes -----------------------------------------------------------------------------
def index_corpus(urls: str, prefix: str, shards: int, papers: int, words: int) -> dict[str, Any]:
    settings = Settings(data_dir=Path(tempfile.gettempdir()), cluster_url=urls, cluster_index_prefix=prefix,
                        cluster_shards=shards)
    engine = open_engine(settings)
    t0 = time.monotonic()
    build = engine.open_build("chaos", resume=False)
    for p in generate(SyntheticConfig(n_papers=papers, words_per_paper=words, seed=7)):
        build.add(p, split_passages(p))
    build.commit({})
    build.publish()
    st = engine.stats()
    engine.close()
    return {"papers": st.papers, "passages": st.passages, "seconds": round(time.monotonic() - t0, 1)}


# ---- agents -------------------------------------------------------------------------------------------------------
@dataclass
class Call:
    t: float          # seconds since the start of the run, when it was sent
    ms: float
    tool: str
    status: int
    code: str | None


@dataclass
class Stats:
    t0: float
    calls: list[Call] = field(default_factory=list)
    unexpected: Counter = field(default_factory=Counter)
    retried: Counter = field(default_factory=Counter)
    #: per session: the distinct pmcids answered 200, and (tool, status) of every answered call made in it
    reads: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    answered: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))


async def call(stats: Stats, c: aiohttp.ClientSession, base: str, tool: str, method: str, path: str, *,
               sid: str | None = None, **kw: Any) -> tuple[int, Any]:
    """One call; a 503 with Retry-After is waited for and sent again (the documented retry); returns the last
    answer's status and JSON body (status 0 when the connection failed)."""
    headers = {"X-Session-Id": sid} if sid and tool in TRACED_TOOLS else None
    while True:
        t = time.monotonic()
        try:
            async with c.request(method, base + path, headers=headers, **kw) as r:
                raw = await r.read()
                status, retry_after = r.status, r.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError) as e:
            stats.unexpected[f"{tool}: {type(e).__name__}"] += 1
            return 0, None
        ms = (time.monotonic() - t) * 1000
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        code = body.get("error", {}).get("code") if isinstance(body, dict) and status >= 400 else None
        stats.calls.append(Call(t - stats.t0, ms, tool, status, code))
        if sid and (headers or tool == "submit"):
            stats.answered[sid][(tool, status)] += 1
        if status == 503 and retry_after:
            stats.retried[f"{tool}: 503 {code}"] += 1
            await asyncio.sleep(min(float(retry_after), MAX_RETRY_WAIT_S))
            continue
        if status >= 400 and not (status == 409 and code == "budget_exhausted"):
            stats.unexpected[f"{tool}: {status} {code}"] += 1
        return status, body


def prediction(gene, read: list[str]) -> dict:
    return {"gene_id": gene.id, "gene_symbol": gene.symbol,
            "task1_function": [{"go_id": "GO:0005634", "qualifier": "located_in", "aspect": "C",
                                "evidence": {"pmcid": read[0] if read else "PMC1", "text": "nuclear"}}],
            "task2_expression": [], "task3_synonyms": {"fullname_synonyms": [], "symbol_synonyms": []}}


class Deadline:
    """When the agents stop: open until both failovers are over, then set by the chaos thread."""

    at = float("inf")


async def agent(i: int, apis: list[str], genes: list, stats: Stats, deadline: Deadline, sessions: list[str]) -> None:
    rng = random.Random(i)
    turn = i
    # idle connections are dropped after 3 s, before the server's keep-alive (uvicorn: 5 s) closes them under a
    # request in flight (which aiohttp reports as ServerDisconnectedError: a client artefact, not the service)
    connector = aiohttp.TCPConnector(keepalive_timeout=3)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120), connector=connector) as c:
        def api() -> str:
            nonlocal turn
            turn += 1
            return apis[turn % len(apis)]

        while time.monotonic() < deadline.at:
            gene = rng.choice(genes)
            status, body = await call(stats, c, api(), "create_session", "POST", "/v1/sessions",
                                      json={"gene": gene.id, "max_papers": BUDGET, "team": f"agent{i % 8}"})
            if status != 201:
                await asyncio.sleep(0.5)
                continue
            sid = body["id"]
            sessions.append(sid)
            read: list[str] = []
            exhausted, offset = False, 0
            while not exhausted and time.monotonic() < deadline.at:
                q = rng.choice(["expression", "mutant phenotype", "signaling", "localization", gene.symbol])
                status, body = await call(stats, c, api(), "search_papers", "POST", "/v1/papers/search", sid=sid,
                                          json={"query": q, "gene": gene.symbol, "limit": 10, "offset": offset})
                if status != 200:
                    break
                hits = [x["pmcid"] for x in body["hits"] if x["pmcid"] not in read]
                offset = min(offset + 10, 200)
                if not hits:
                    continue
                await call(stats, c, api(), "search_passages", "POST", "/v1/passages/search", sid=sid,
                           json={"query": q, "gene": gene.symbol, "limit": 5})
                for pmcid in hits[:3]:
                    status, _ = await call(stats, c, api(), "get_paper", "GET", f"/v1/papers/{pmcid}", sid=sid,
                                           params={"sections": "ABSTRACT,RESULTS", "max_chars": 4000})
                    if status == 409:
                        exhausted = True
                        break
                    if status == 200:
                        stats.reads[sid].add(pmcid)
                        read.append(pmcid)
            await call(stats, c, api(), "submit", "POST", f"/v1/sessions/{sid}/submission", sid=sid,
                       json=prediction(gene, read))


def audit(api: str, sessions: list[str], stats: Stats) -> dict[str, Any]:
    """Every session read back: charged budget against the distinct papers answered, trace against the calls."""
    mismatches, gaps, examples = 0, 0, []
    with httpx.Client(base_url=api, timeout=60) as c:
        for sid in sessions:
            s = c.get(f"/v1/sessions/{sid}").json()
            events = c.get(f"/v1/sessions/{sid}/trace", params={"limit": 10_000}).json()["events"]
            if s["budget_used"] != len(stats.reads[sid]) or set(s["papers_read"]) != stats.reads[sid]:
                mismatches += 1
                examples.append({"session": sid, "budget_used": s["budget_used"],
                                 "answered_reads": len(stats.reads[sid])})
            seqs = [e["seq"] for e in events]
            missing = len(set(range(1, max(seqs, default=0) + 1)) - set(seqs))
            traced = Counter((e["tool"], e["status"]) for e in events)
            lacking = sum((stats.answered[sid] - traced).values())
            if missing or lacking:
                gaps += missing + lacking
                examples.append({"session": sid, "missing_seqs": missing, "calls_not_traced": lacking})
    return {"budget_mismatches": mismatches, "trace_gaps": gaps, "examples": examples[:10]}


def phase_latency(stats: Stats, windows: list[tuple[float, float]], first_kill: float) -> dict[str, Any]:
    buckets: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    for cl in stats.calls:
        if cl.t < first_kill:
            buckets["before"].append(cl.ms)
        elif any(a <= cl.t <= b for a, b in windows):
            buckets["during"].append(cl.ms)
        else:
            buckets["after"].append(cl.ms)
    return {k: ({"n": len(v), "p50_ms": latency_summary(v)["p50_ms"], "p99_ms": latency_summary(v)["p99_ms"]}
                if v else {"n": 0}) for k, v in buckets.items()}


# ---- the run ------------------------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--cluster-url", help="the first node of a running three-node cluster (needs --cluster-home)")
    ap.add_argument("--cluster-home", type=Path, help="its FLYSIFT_NODE_HOME (the nodes file: pids, to kill)")
    ap.add_argument("--port", type=int, default=int(os.environ.get("FLYSIFT_NODE_PORT", "9230")),
                    help="first HTTP port of the cluster this script starts (three: PORT..PORT+2)")
    ap.add_argument("--api-port", type=int, default=8290, help="the two API processes listen on this port and +1")
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=240)
    ap.add_argument("--down", type=float, default=5, help="seconds a killed node stays down before its restart")
    ap.add_argument("--papers", type=int, default=500)
    ap.add_argument("--words", type=int, default=800)
    ap.add_argument("--shards", type=int, default=3, help="primaries per papers/passages index")
    ap.add_argument("--work", type=Path, default=Path("bench-work/chaos"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--check", action="store_true", help="exit 1 unless the three error counts are 0")
    return ap


def _open_cluster(ap: argparse.ArgumentParser, args: argparse.Namespace, stack: ExitStack,
                  result: dict[str, Any]) -> tuple[Cluster, list[Node]]:
    """The given three-node cluster, or three nodes started here (stopped when ``stack`` closes)."""
    if args.cluster_url:
        if not args.cluster_home:
            ap.error("--cluster-url needs --cluster-home (the FLYSIFT_NODE_HOME of start.sh: pids to kill)")
        cluster = Cluster(args.cluster_home, int(args.cluster_url.rsplit(":", 1)[1].split("/")[0]))
    else:
        cluster = Cluster((args.work / "cluster").resolve(), args.port)
        stack.callback(cluster.stop)
        cluster.start()
        result["cluster_start_seconds"] = cluster.start_seconds
    nodes = cluster.nodes()
    if len(nodes) != 3:
        raise SystemExit(f"chaos: the cluster at {cluster.home} has {len(nodes)} nodes; it needs three")
    return cluster, nodes


def _serve(args: argparse.Namespace, stack: ExitStack, urls: str, prefix: str,
           genes: list) -> tuple[list[str], list[subprocess.Popen]]:
    """Two ``flysift serve`` processes on the cluster store, warmed up (a session each, so lazy loads are not
    timed); stopped when ``stack`` closes."""
    data = args.work / "data"
    data.mkdir(parents=True, exist_ok=True)
    Lexicon(genes).save(data / "lexicon.tsv")
    env = {**os.environ, "FLYSIFT_DATA_DIR": str(data), "FLYSIFT_AUTH": "false", "FLYSIFT_CLUSTER_URL": urls,
           "FLYSIFT_CLUSTER_INDEX_PREFIX": prefix, "FLYSIFT_SESSION_STORE": "cluster"}
    apis = [f"http://127.0.0.1:{args.api_port + k}" for k in range(2)]
    procs = [stack.enter_context(served([*flysift_command(), "serve", "--port", str(args.api_port + k),
                                         "--workers", "1"], apis[k] + "/v1/health", env=env))
             for k in range(2)]
    for api in apis:
        with httpx.Client(base_url=api, timeout=60) as c:
            sid = c.post("/v1/sessions", json={"gene": genes[0].id, "team": "warmup"}).json()["id"]
            c.post("/v1/papers/search", json={"query": "expression"}, headers={"X-Session-Id": sid})
    return apis, procs


def _drop_indices(cluster: Cluster, nodes: list[Node], prefix: str) -> None:
    """The run's indices go; the cluster stays as it was found."""
    try:
        names = cluster.call(f"/{prefix}-*/_settings/index.uuid")
        if names:
            httpx.delete(f"{nodes[0].url}/{','.join(sorted(names))}", timeout=60)
    except Exception as e:
        say(f"could not delete the indices of {prefix}: {e}")


def _report(args: argparse.Namespace, result: dict[str, Any]) -> None:
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.check and (result["unexpected_errors"] or result["budget_mismatches"] or result["trace_gaps"]
                       or result.get("chaos_error") or len(result["kills"]) != 2):
        say("FAILED: unexpected errors, budget mismatches or trace gaps (see the JSON)")
        raise SystemExit(1)


def main() -> None:
    ap = _parser()
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    prefix = f"chaos{int(time.time())}"
    result: dict[str, Any] = {"machine": machine(), "agents": args.agents, "papers": args.papers, "prefix": prefix}
    with ExitStack() as stack:
        cluster, nodes = _open_cluster(ap, args, stack, result)
        urls = ",".join(n.url for n in nodes)
        result["node_rss_mib"] = {k: round(v / 2**20) for k, v in cluster.rss().items()}
        say(f"indexing {args.papers} generated papers under prefix {prefix}")
        result["indexing"] = index_corpus(urls, prefix, args.shards, args.papers, args.words)
        genes = bundled_genes()
        apis, procs = _serve(args, stack, urls, prefix, genes)
        cpu0 = [tree_cpu(psutil.Process(p.pid)) for p in procs]

        t0 = time.monotonic()
        own0 = time.process_time()
        stats = Stats(t0)
        watch = HealthWatch(cluster, t0)
        watch.sample_cpu()
        watch.start()
        kills: list[dict[str, Any]] = []
        windows: list[tuple[float, float]] = []
        store_index = f"{prefix}-sessions-sessions"

        deadline = Deadline()

        def chaos() -> None:
            """Kill a node at 25 % of the run and another at 55 % (or once the cluster is green again): once the
            master, once a non-master, in the order that makes one of them the holder of the session store's primary
            (so a primary moves under the budget writes); restart each after ``--down`` seconds; record the times.
            The load goes on for 15 % of the run after the second node is back."""
            try:
                order = ["master", "non-master"]
                for k, at in enumerate((0.25 * args.seconds, 0.55 * args.seconds)):
                    while time.monotonic() - t0 < at:
                        time.sleep(0.2)
                    if k == 0 and cluster.primary_of(store_index) != cluster.master():
                        order.reverse()   # the store's primary on a non-master: that node goes first
                    kills.append(failover(order[k]))
            except Exception as e:   # reported in the JSON (and fails --check), the load still ends cleanly
                result["chaos_error"] = f"{type(e).__name__}: {e}"
            finally:
                deadline.at = max(t0 + args.seconds, time.monotonic() + 0.15 * args.seconds)

        def failover(role: str) -> dict[str, Any]:
            master = cluster.master()
            holder = cluster.primary_of(store_index)
            victim = master if role == "master" else (
                holder if holder != master else next(n.name for n in cluster.nodes() if n.name != master))
            info: dict[str, Any] = {"role": role, "node": victim, "held_session_store_primary": holder == victim}
            watch.avoid = victim
            killed = time.monotonic() - t0
            cluster.kill(victim)
            info["killed_at_s"] = round(killed, 1)
            time.sleep(args.down)
            restart = cluster.restart()
            info["restarted_at_s"] = round(time.monotonic() - t0, 1)
            if restart.wait() != 0:
                raise RuntimeError(f"start.sh could not restart {victim}; see {cluster.home}")
            lost = watch.first(killed, lambda s, m, n: n < 3 or s != "green")
            while (green := watch.first(max(lost or killed, killed + args.down),
                                        lambda s, m, n: s == "green" and n == 3)) is None:
                time.sleep(0.5)
            info["seconds_to_yellow"] = _delta(watch.first(killed, lambda s, m, n: s == "yellow"), killed)
            if role == "master":
                moved = watch.first(killed, lambda s, m, n: bool(m) and m != victim)
                info["new_master"] = next((m for t, s, m, n in watch.samples if moved is not None and t == moved),
                                          None)
                info["seconds_to_new_master"] = _delta(moved, killed)
            info["seconds_to_green"] = round(green - killed, 1)
            windows.append((killed, green))
            say(f"killed {victim} ({role}) at {killed:.1f}s; green again with 3 nodes after {green - killed:.1f}s")
            watch.avoid = None
            return info

        chaos_thread = threading.Thread(target=chaos, daemon=True)
        chaos_thread.start()

        async def run() -> list[str]:
            sessions: list[str] = []
            await asyncio.gather(*(agent(i, apis, genes, stats, deadline, sessions) for i in range(args.agents)))
            return sessions

        say(f"{args.agents} agents for ~{args.seconds:.0f} s on {apis[0]} and {apis[1]}")
        sessions = asyncio.run(run())
        seconds = time.monotonic() - t0
        own_cpu = time.process_time() - own0
        watch.stop.set()
        watch.join()
        watch.sample_cpu()
        server_cpu = sum(tree_cpu(psutil.Process(p.pid)) - c for p, c in zip(procs, cpu0, strict=True))
        say(f"auditing {len(sessions)} sessions")
        result.update(audit(apis[0], sessions, stats))
        by_class = Counter(f"{c.tool}: {c.status}{' ' + c.code if c.code else ''}" for c in stats.calls
                           if c.status >= 400)
        result.update({
            "seconds": round(seconds, 1), "requests": len(stats.calls), "sessions": len(sessions),
            "unexpected_errors": sum(stats.unexpected.values()), "unexpected_by_class": dict(stats.unexpected),
            "answers_by_class": dict(by_class), "retried_503": dict(stats.retried),
            "latency": phase_latency(stats, windows, kills[0]["killed_at_s"] if kills else seconds),
            "kills": kills, "seconds_to_green": [k["seconds_to_green"] for k in kills],
            "cpu_seconds": {"api_processes": round(server_cpu, 1), "nodes": round(watch.nodes_cpu(), 1),
                            "agents_and_watcher": round(own_cpu, 1)},
            "server_cpu_ms_per_request": round(server_cpu / max(1, len(stats.calls)) * 1000, 2),
            "load_avg_1m_end": round(os.getloadavg()[0], 2)})
        _drop_indices(cluster, nodes, prefix)
    _report(args, result)


def _delta(t: float | None, since: float) -> float | None:
    return round(t - since, 1) if t is not None else None


if __name__ == "__main__":
    main()
