"""Batch runs of a curation agent over many genes, into a run directory that survives a kill.

Layout of a run directory::

    run.json                  configuration, versions, git commit, index stats (never an API key)
    predictions/<gene>.json   FlyAOC run records {output, usage, error, ...} (FlyAOC's evaluator and ours read them)
    traces/<gene>.json        {"session_id", "events": [...]} pulled from the session trace through the API
    transcripts/<gene>.jsonl  the agent's model exchanges (replayable); absent for agents without a model
    summary.json              totals: genes done/failed/missing, papers, turns, tokens, cost, genes per minute

Every file is written atomically (temp file + rename) and a gene's prediction is written last, so a gene counts as
finished exactly when its prediction exists: Ctrl-C or a kill leaves a directory that ``--resume`` continues.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from curation.agent import GeneResult, GeneTask, make_agent
from search.client import Client, ClientError

#: task fields a run configuration carries to every gene
_TASK_FIELDS = ("budget", "synonym_policy", "budget_policy", "hidden", "max_turns", "max_cost_usd", "timeout_s",
                "parity")


@dataclass
class RunConfig:
    agent: str
    budget: int = 16
    synonym_policy: str = "snapshot"
    budget_policy: str = "distinct"
    hidden: str | None = None
    max_turns: int = 50
    max_cost_usd: float | None = None
    timeout_s: float | None = None
    parity: bool = False
    batch_max_cost_usd: float | None = None
    concurrency: int = 1
    url: str = "http://127.0.0.1:8000"
    options: dict[str, Any] = field(default_factory=dict)

    def task(self, gene_id: str, symbol: str) -> GeneTask:
        return GeneTask(gene_id=gene_id, symbol=symbol, extra=dict(self.options),
                        **{k: getattr(self, k) for k in _TASK_FIELDS})


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, ensure_ascii=False)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_lines_atomic(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, path)


def read_genes(path: Path) -> list[tuple[str, str]]:
    """(gene id, symbol) from FlyAOC's genes CSV (``FBgn_ID,Gene_Symbol,…``), a TSV/whitespace list
    (``FBgn… [symbol]``; ``#`` comments) or a JSON list of ids or objects with ``gene_id``/``gene_symbol``."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        out = []
        for g in json.loads(text):
            out.append((g, "") if isinstance(g, str) else (g["gene_id"], g.get("gene_symbol", "")))
        return out
    if text.startswith("FBgn_ID"):
        return [(r["FBgn_ID"], r["Gene_Symbol"]) for r in csv.DictReader(text.splitlines())]
    out = []
    for line in text.splitlines():
        parts = line.split("\t") if "\t" in line else line.split()
        if parts and parts[0].strip() and not parts[0].startswith("#"):
            out.append((parts[0].strip(), parts[1].strip() if len(parts) > 1 else ""))
    return out


class RunDir:
    """Paths of a run directory and what has been finished in it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.predictions, self.traces = self.path / "predictions", self.path / "traces"
        self.transcripts = self.path / "transcripts"

    def record(self, gene_id: str) -> dict[str, Any] | None:
        p = self.predictions / f"{gene_id}.json"
        try:
            return json.loads(p.read_text(encoding="utf-8")) if p.exists() else None
        except json.JSONDecodeError:
            return None

    def records(self) -> dict[str, dict[str, Any]]:
        out = {}
        for p in sorted(self.predictions.glob("*.json")):
            rec = self.record(p.stem)
            if rec is not None:
                out[p.stem] = rec
        return out

    def config(self) -> dict[str, Any]:
        return json.loads((self.path / "run.json").read_text(encoding="utf-8"))


def failed(rec: dict[str, Any]) -> bool:
    return rec.get("output") is None


def git_commit() -> dict[str, Any]:
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10)
        return {"commit": head.stdout.strip() or None, "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for pkg in ("flysift", "openai", "httpx"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def run_info(config: RunConfig, client: Client, genes: list[tuple[str, str]]) -> dict[str, Any]:
    """run.json: what ran, with what, against which index (keys never reach it: the config holds none)."""
    stats = client.stats()
    return {"config": asdict(config), "genes": [g for g, _ in genes], "created_at": time.time(),
            "versions": versions(), "git": git_commit(), "argv": sys.argv[1:] if _safe_argv() else None,
            "index": stats.model_dump(mode="json")}


def _safe_argv() -> bool:
    """argv is recorded unless it could hold a secret (a key passed on the command line)."""
    return not any("key" in a.lower() or "token" in a.lower() for a in sys.argv[1:])


def pull_trace(client: Client, session_id: str) -> list[dict[str, Any]]:
    """Every trace event of a session, following ``after`` pages."""
    events: list[dict[str, Any]] = []
    after: int | None = None
    while True:
        page = client.get_trace(session_id, after=after, limit=500)
        events += [e.model_dump(mode="json") for e in page]
        if len(page) < 500:
            return events
        after = page[-1].seq


@dataclass
class Progress:
    """One line per finished gene: readable on a TTY, JSON lines otherwise."""

    total: int
    stream: Any = None
    done: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def gene(self, res: GeneResult) -> None:
        out = self.stream or sys.stderr
        u = res.usage
        with self._lock:
            self.done += 1
            if out.isatty():
                cost = f"${u['cost_usd']:.4f}" if u.get("cost_usd") is not None else "-"
                status = "ok" if res.output is not None else f"FAILED {res.error or ''}"[:80]
                out.write(f"[{self.done}/{self.total}] {res.gene_id} {status} papers={u.get('papers_read', 0)} "
                          f"turns={u.get('turns', 0)} tokens={u.get('input_tokens', 0)}+{u.get('output_tokens', 0)} "
                          f"cost={cost} {res.elapsed_s:.1f}s\n")
            else:
                out.write(json.dumps({"event": "gene", "n": self.done, "total": self.total, "gene_id": res.gene_id,
                                      "ok": res.output is not None, "error": res.error, "usage": u,
                                      "elapsed_s": res.elapsed_s}) + "\n")
            out.flush()


def summarize(run: RunDir, genes: list[str], started: float | None = None, note: str | None = None) -> dict[str, Any]:
    recs = run.records()
    done = [g for g in genes if g in recs]
    usage = {k: 0 for k in ("papers_read", "turns", "input_tokens", "output_tokens")}
    cost, costs_known = 0.0, True
    for g in done:
        u = recs[g].get("usage") or {}
        for k in usage:
            usage[k] += int(u.get(k) or 0)
        if u.get("cost_usd") is None:
            costs_known = False
        else:
            cost += float(u["cost_usd"])
    elapsed = sum(float(recs[g].get("elapsed_s") or 0) for g in done)
    out: dict[str, Any] = {
        "genes": len(genes), "finished": len(done), "succeeded": sum(not failed(recs[g]) for g in done),
        "failed": sorted(g for g in done if failed(recs[g])), "missing": sorted(set(genes) - set(done)),
        "usage": usage, "cost_usd": round(cost, 6) if costs_known else None, "gene_seconds": round(elapsed, 2),
        "errors": {g: recs[g].get("error") for g in done if recs[g].get("error")}, "updated_at": time.time()}
    if started is not None:
        wall = time.time() - started
        out["wall_s"] = round(wall, 2)
    if note:
        out["note"] = note
    return out


class BatchRunner:
    """Runs ``config.agent`` over genes with ``config.concurrency`` workers, each with its own client."""

    def __init__(self, config: RunConfig, run_dir: Path, client_factory: Callable[[], Client],
                 progress: Progress | None = None):
        self.config, self.run = config, RunDir(run_dir)
        self.client_factory = client_factory
        self.progress = progress
        self.spent = 0.0
        self._stop = threading.Event()

    def todo(self, genes: list[tuple[str, str]], resume: bool, retry_failed: bool) -> list[tuple[str, str]]:
        """Genes still to run. Without ``resume``/``retry_failed`` the directory must hold no predictions."""
        recs = self.run.records()
        if recs and not (resume or retry_failed):
            raise FileExistsError(f"{self.run.path} already holds {len(recs)} predictions: pass --resume to skip "
                                  "finished genes (and --retry-failed to rerun failed ones), or use a new --run-dir")
        out = []
        for gid, sym in genes:
            rec = recs.get(gid)
            if rec is None or (retry_failed and failed(rec)):
                out.append((gid, sym))
        return out

    def run_gene(self, gene_id: str, symbol: str) -> GeneResult:
        """One gene, start to finish: agent, trace, transcript, then the prediction (the completion mark)."""
        task = self.config.task(gene_id, symbol)
        with self.client_factory() as client:
            try:
                res = make_agent(self.config.agent, self.config.options).run(task, client)
            except Exception as e:  # an agent bug must not end the batch; the gene is recorded as failed
                res = GeneResult(gene_id=gene_id, output=None, error=f"{type(e).__name__}: {e}")
            if res.session_id:
                try:
                    events = pull_trace(client, res.session_id)
                    write_json_atomic(self.run.traces / f"{gene_id}.json",
                                      {"session_id": res.session_id, "events": events})
                except ClientError as e:
                    res.extra["trace_error"] = str(e)
        if res.transcript:
            write_lines_atomic(self.run.transcripts / f"{gene_id}.jsonl", res.transcript)
        rec = res.to_run_record()
        rec["gene_symbol"] = symbol or (res.output or {}).get("gene_symbol")
        rec["agent"] = self.config.agent
        write_json_atomic(self.run.predictions / f"{gene_id}.json", rec)
        return res

    def execute(self, genes: list[tuple[str, str]], todo: list[tuple[str, str]]) -> dict[str, Any]:
        started = time.time()
        note = None
        pool = ThreadPoolExecutor(max_workers=max(1, self.config.concurrency))
        pending: set[Future[GeneResult]] = set()
        queue = list(todo)
        try:
            while queue or pending:
                while queue and len(pending) < max(1, self.config.concurrency) and not self._stop.is_set():
                    pending.add(pool.submit(self.run_gene, *queue.pop(0)))
                if not pending:
                    break
                finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for fut in finished:
                    res = fut.result()
                    self.spent += float(res.usage.get("cost_usd") or 0.0)
                    if self.progress:
                        self.progress.gene(res)
                    cap = self.config.batch_max_cost_usd
                    if cap is not None and self.spent >= cap and not self._stop.is_set():
                        self._stop.set()
                        note = f"stopped: batch cost ${self.spent:.4f} reached the cap ${cap:.4f}"
                write_json_atomic(self.run.path / "summary.json",
                                  summarize(self.run, [g for g, _ in genes], started, note))
        except KeyboardInterrupt:
            note = "interrupted: running genes finished or were left unrecorded; rerun with --resume"
            pool.shutdown(wait=False, cancel_futures=True)
            write_json_atomic(self.run.path / "summary.json", summarize(self.run, [g for g, _ in genes], started, note))
            raise
        pool.shutdown(wait=True)
        summary = summarize(self.run, [g for g, _ in genes], started, note)
        write_json_atomic(self.run.path / "summary.json", summary)
        return summary


def start_run(config: RunConfig, run_dir: Path, genes: list[tuple[str, str]], client_factory: Callable[[], Client],
              resume: bool = False, retry_failed: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """Prepare (or continue) a run directory and run what is left; returns the summary."""
    runner = BatchRunner(config, run_dir, client_factory, progress)
    todo = runner.todo(genes, resume, retry_failed)
    info_path = runner.run.path / "run.json"
    with client_factory() as client:
        info = run_info(config, client, genes)
    if info_path.exists():
        prev = json.loads(info_path.read_text(encoding="utf-8"))
        info["created_at"] = prev.get("created_at", info["created_at"])
        info["resumed"] = prev.get("resumed", []) + [time.time()]
    write_json_atomic(info_path, info)
    if progress:
        progress.total = len(todo)
    return runner.execute(genes, todo)


def estimate(config: RunConfig, genes: list[tuple[str, str]]) -> dict[str, Any]:
    """What a run would spend, without running it: papers from the budget; cost from the agent's ``estimate``
    (agents that call a model provide one) or zero for agents that call none."""
    agent = make_agent(config.agent, config.options)
    per_gene = getattr(agent, "estimate", None)
    gene_est = per_gene(config.task(genes[0][0], genes[0][1])) if (per_gene and genes) else \
        {"cost_usd": 0.0 if config.agent == "lexical" else None}
    cost = gene_est.get("cost_usd")
    return {"agent": config.agent, "genes": len(genes), "max_papers": config.budget * len(genes),
            "per_gene": gene_est, "cost_usd": None if cost is None else round(cost * len(genes), 4),
            "batch_max_cost_usd": config.batch_max_cost_usd}
