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
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

from curation.agent import ConfigError, GeneResult, GeneTask, make_agent
from curation.llm import write_transcript
from search.client import Client, ClientError

#: task fields a run configuration carries to every gene
_TASK_FIELDS = ("budget", "synonym_policy", "budget_policy", "hidden", "max_turns", "max_cost_usd", "timeout_s",
                "parity")


class GeneRow(NamedTuple):
    """One gene of a run: its id, the symbol the list gives (may be empty: the agent takes the service's) and
    FlyAOC's gene summary (the genes file's ``Summary`` column; may be empty)."""

    gene_id: str
    symbol: str = ""
    summary: str = ""


@dataclass
class RunConfig:
    agent: str
    budget: int = 16
    synonym_policy: str = "snapshot"
    budget_policy: str | None = None
    hidden: str | None = None
    max_turns: int = 50
    max_cost_usd: float | None = None
    timeout_s: float | None = None
    parity: bool = False
    batch_max_cost_usd: float | None = None
    concurrency: int = 1
    url: str = "http://127.0.0.1:8000"
    options: dict[str, Any] = field(default_factory=dict)

    def task(self, gene: GeneRow) -> GeneTask:
        return GeneTask(gene_id=gene.gene_id, symbol=gene.symbol, summary=gene.summary, extra=dict(self.options),
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


def read_genes(path: Path) -> list[GeneRow]:
    """Genes from FlyAOC's genes CSV (``FBgn_ID,Gene_Symbol,Summary``), a TSV/whitespace list (``FBgn… [symbol
    [summary]]``, the summary tab-separated; ``#`` comments) or a JSON list of ids or of objects with ``gene_id``
    and optionally ``gene_symbol`` and ``summary``."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        out = []
        for g in json.loads(text):
            out.append(GeneRow(g) if isinstance(g, str) else
                       GeneRow(g["gene_id"], g.get("gene_symbol") or "", g.get("summary") or ""))
        return out
    if text.startswith("FBgn_ID"):
        return [GeneRow(r["FBgn_ID"], r.get("Gene_Symbol") or "", (r.get("Summary") or "").strip())
                for r in csv.DictReader(text.splitlines())]
    out = []
    for line in text.splitlines():
        parts = line.split("\t") if "\t" in line else line.split()
        if parts and parts[0].strip() and not parts[0].startswith("#"):
            out.append(GeneRow(parts[0].strip(), parts[1].strip() if len(parts) > 1 else "",
                               parts[2].strip() if len(parts) > 2 else ""))
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


def run_info(config: RunConfig, client: Client, genes: list[GeneRow]) -> dict[str, Any]:
    """run.json: what ran, with what, against which index (keys never reach it: the config holds none)."""
    stats = client.stats()
    return {"config": asdict(config), "genes": [g.gene_id for g in genes], "created_at": time.time(),
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


def gene_rows(run: RunDir, genes: list[str], cited: dict[str, set[str]] | None = None) -> list[dict[str, Any]]:
    """One row per gene of a run for ``curate show``: status, papers read, turns, tokens, cost, items submitted,
    papers cited as evidence, error; with ``cited`` (curator-cited papers per gene) also ``refs_read``, the cited
    papers the session read of those cited (from its trace)."""
    recs = run.records()
    rows = []
    for gid in genes:
        rec = recs.get(gid)
        if rec is None:
            rows.append({"gene_id": gid, "status": "missing"})
            continue
        out = rec.get("output") or {}
        u = rec.get("usage") or {}
        syn = out.get("task3_synonyms") or {}
        evidence = {it["evidence"].get("pmcid") for key in ("task1_function", "task2_expression")
                    for it in out.get(key) or [] if isinstance(it, dict) and isinstance(it.get("evidence"), dict)}
        evidence.discard(None)
        cost = u.get("cost_usd")
        row: dict[str, Any] = {
            "gene_id": gid, "symbol": rec.get("gene_symbol"), "status": "failed" if failed(rec) else "ok",
            "papers_read": u.get("papers_read"), "turns": u.get("turns"),
            "tokens": (int(u.get("input_tokens") or 0) + int(u.get("output_tokens") or 0)) or None,
            "cost": None if cost is None else round(float(cost), 4),
            "go_items": len(out.get("task1_function") or []) if rec.get("output") is not None else None,
            "expression_items": len(out.get("task2_expression") or []) if rec.get("output") is not None else None,
            "synonym_items": (len(syn.get("fullname_synonyms") or []) + len(syn.get("symbol_synonyms") or [])
                              if rec.get("output") is not None else None),
            "evidence_papers": len(evidence), "error": rec.get("error")}
        if cited is not None and gid in cited:
            row["refs_read"] = f"{len(cited[gid] & _trace_reads(run, gid))}/{len(cited[gid])}"
        rows.append(row)
    return rows


def _trace_reads(run: RunDir, gene_id: str) -> set[str]:
    from eval.coverage import read_pmcids_from_trace

    path = run.traces / f"{gene_id}.json"
    if not path.exists():
        return set()
    return read_pmcids_from_trace(json.loads(path.read_text(encoding="utf-8")), str(path))


class BatchRunner:
    """Runs ``config.agent`` over genes with ``config.concurrency`` workers, each with its own client."""

    def __init__(self, config: RunConfig, run_dir: Path, client_factory: Callable[[], Client],
                 progress: Progress | None = None):
        self.config, self.run = config, RunDir(run_dir)
        self.client_factory = client_factory
        self.progress = progress
        self.spent = 0.0
        self._stop = threading.Event()

    def todo(self, genes: list[GeneRow], resume: bool, retry_failed: bool) -> list[GeneRow]:
        """Genes still to run. Without ``resume``/``retry_failed`` the directory must hold no predictions."""
        recs = self.run.records()
        if recs and not (resume or retry_failed):
            raise FileExistsError(f"{self.run.path} already holds {len(recs)} predictions: pass --resume to skip "
                                  "finished genes (and --retry-failed to rerun failed ones), or use a new --run-dir")
        return [g for g in genes if (rec := recs.get(g.gene_id)) is None or (retry_failed and failed(rec))]

    def run_gene(self, gene: GeneRow) -> GeneResult:
        """One gene, start to finish: agent, trace, transcript, then the prediction (the completion mark)."""
        gene_id, symbol = gene.gene_id, gene.symbol
        task = self.config.task(gene)
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
            write_transcript(self.run.transcripts / f"{gene_id}.jsonl", res.transcript)
        rec = res.to_run_record()
        rec["gene_symbol"] = symbol or res.extra.get("gene_symbol") or (res.output or {}).get("gene_symbol")
        rec["agent"] = self.config.agent
        write_json_atomic(self.run.predictions / f"{gene_id}.json", rec)
        return res

    def execute(self, genes: list[GeneRow], todo: list[GeneRow]) -> dict[str, Any]:
        started = time.time()
        note = None
        pool = ThreadPoolExecutor(max_workers=max(1, self.config.concurrency))
        pending: set[Future[GeneResult]] = set()
        queue = list(todo)
        try:
            while queue or pending:
                while queue and len(pending) < max(1, self.config.concurrency) and not self._stop.is_set():
                    pending.add(pool.submit(self.run_gene, queue.pop(0)))
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
                                  summarize(self.run, [g.gene_id for g in genes], started, note))
        except KeyboardInterrupt:
            note = "interrupted: running genes finished or were left unrecorded; rerun with --resume"
            pool.shutdown(wait=False, cancel_futures=True)
            write_json_atomic(self.run.path / "summary.json",
                              summarize(self.run, [g.gene_id for g in genes], started, note))
            raise
        pool.shutdown(wait=True)
        summary = summarize(self.run, [g.gene_id for g in genes], started, note)
        write_json_atomic(self.run.path / "summary.json", summary)
        return summary


#: what must match for ``--resume`` to continue a run directory: the genes done so far ran with these
RESUME_KEYS = ("agent", "budget", "synonym_policy", "budget_policy", "hidden", "parity")
MODEL_OPTIONS = ("model", "reader_model", "base_url")


def config_differences(prev: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """How run.json ``now`` differs from ``prev`` where it matters for resuming: the agent, the budget and policies,
    the model, the corpus (index build and size). Each difference as ``"what: before -> now"``."""
    pc, nc = prev.get("config") or {}, now.get("config") or {}
    out = [f"{k}: {pc.get(k)!r} -> {nc.get(k)!r}" for k in RESUME_KEYS if pc.get(k) != nc.get(k)]
    po, no = pc.get("options") or {}, nc.get("options") or {}
    out += [f"{k}: {po.get(k)!r} -> {no.get(k)!r}" for k in MODEL_OPTIONS if po.get(k) != no.get(k)]
    pi, ni = prev.get("index") or {}, now.get("index") or {}
    out += [f"corpus {k}: {pi.get(k)!r} -> {ni.get(k)!r}" for k in ("build", "papers") if pi.get(k) != ni.get(k)]
    return out


def preflight(config: RunConfig, genes: list[GeneRow]) -> None:
    """Mistakes every gene would meet, found before the first gene: the agent's own check (model, extra, key)."""
    if not genes:
        raise ConfigError("the gene list is empty")
    try:
        agent = make_agent(config.agent, config.options)
    except (ValueError, OSError) as exc:  # e.g. an unreadable or malformed prices file
        raise ConfigError(f"agent {config.agent!r}: {exc}") from None
    check = getattr(agent, "preflight", None)
    if check is not None:
        check(config.task(genes[0]))


def start_run(config: RunConfig, run_dir: Path, genes: list[GeneRow], client_factory: Callable[[], Client],
              resume: bool = False, retry_failed: bool = False, progress: Progress | None = None,
              force_config: bool = False) -> dict[str, Any]:
    """Prepare (or continue) a run directory and run what is left; returns the summary.

    Raises :class:`ConfigError` (the agent's configuration, or ``--resume`` of a directory made with another agent,
    budget, model or corpus unless ``force_config``) and ``ClientError`` (the service cannot be reached) before any
    gene runs."""
    preflight(config, genes)
    runner = BatchRunner(config, run_dir, client_factory, progress)
    todo = runner.todo(genes, resume, retry_failed)
    info_path = runner.run.path / "run.json"
    with client_factory() as client:
        info = run_info(config, client, genes)
    if info_path.exists():
        prev = json.loads(info_path.read_text(encoding="utf-8"))
        changed = config_differences(prev, info)
        if changed and runner.run.records() and not force_config:
            raise ConfigError(f"{run_dir} was made with another configuration ({'; '.join(changed)}): use a new "
                              "--run-dir, or pass --force-config to continue it anyway")
        info["created_at"] = prev.get("created_at", info["created_at"])
        info["resumed"] = prev.get("resumed", []) + [time.time()]
        if changed:
            info["forced_config"] = prev.get("forced_config", []) + [{"at": time.time(), "changed": changed}]
    write_json_atomic(info_path, info)
    if progress:
        progress.total = len(todo)
    return runner.execute(genes, todo)


def estimate(config: RunConfig, genes: list[GeneRow]) -> dict[str, Any]:
    """What a run would spend, without running it: papers from the budget; cost from the agent's ``estimate``
    (agents that call a model provide one) or zero for agents that call none."""
    agent = make_agent(config.agent, config.options)
    per_gene = getattr(agent, "estimate", None)
    gene_est = per_gene(config.task(genes[0])) if (per_gene and genes) else \
        {"cost_usd": 0.0 if config.agent == "lexical" else None}
    cost = gene_est.get("cost_usd")
    return {"agent": config.agent, "genes": len(genes), "max_papers": config.budget * len(genes),
            "per_gene": gene_est, "cost_usd": None if cost is None else round(cost * len(genes), 4),
            "batch_max_cost_usd": config.batch_max_cost_usd}
