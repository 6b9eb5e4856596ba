"""Curation run directories for the run review pages: found by name under ``FLYSIFT_RUNS_DIR``, read within bounds.

A run directory is what ``flysift curate batch`` writes (``curation/runs.py``): ``run.json``, ``summary.json``,
``predictions/<gene>.json`` (FlyAOC run records), ``traces/<gene>.json`` (``{"session_id", "events"}``), and the
report of ``flysift coverage --run-dir RUN --out RUN/coverage`` when one was written there (``coverage.json``, at the
top or in ``coverage/``). A request names a run and a gene; both are **looked up** in listings of the configured
root and of the run's directories, never joined into a path, so ``..``, absolute paths and symbolic links out of the
root name nothing. Files are read with a size bound, and a file that does not parse is reported on the page, never a
500.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from search.core.errors import NotFound
from search.flyaoc.groundtruth import GeneRecord
from search.flyaoc.predictions import GenePrediction, normalize_synonym, parse_prediction
from search.schema.sessions import TraceEvent

#: run and gene names a listing shows (anything else in the root is ignored)
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
GENE_FILE = re.compile(r"(FBgn[0-9]{7})\.json")
MAX_RUNS = 1000
MAX_GENES = 20_000
#: the largest file read: a prediction record, run.json, summary.json; a trace may be larger
MAX_RECORD_BYTES = 5_000_000
MAX_TRACE_BYTES = 50_000_000
MAX_TRACE_EVENTS = 100_000


def _children(directory: Path) -> dict[str, Path]:
    """Name → entry of ``directory``: entries only, real (no symbolic links), their names as listed."""
    try:
        entries = list(directory.iterdir())
    except OSError:
        return {}
    return {p.name: p for p in entries if not p.is_symlink()}


def list_runs(root: Path | None) -> dict[str, Path]:
    """The run directories under ``root`` by name (those holding ``run.json`` or ``predictions/``), sorted."""
    if root is None:
        return {}
    out = {}
    for name, p in sorted(_children(root).items()):
        if RUN_NAME.fullmatch(name) and p.is_dir() and ({"run.json", "predictions"} & set(_children(p))):
            out[name] = p
            if len(out) >= MAX_RUNS:
                break
    return out


def find_run(root: Path | None, name: str) -> Path:
    """The run called ``name``, looked up in the listing of ``root`` (404 ``run_not_found`` otherwise)."""
    runs = list_runs(root)
    if name not in runs:
        shown = name[:80]
        raise NotFound(f"No run named {shown!r}" + ("" if root else ": FLYSIFT_RUNS_DIR is not set") + ".",
                       code="run_not_found", details={"run": shown})
    return runs[name]


def _read_json(path: Path | None, limit: int = MAX_RECORD_BYTES) -> tuple[Any, str | None]:
    """(value, None) or (None, a readable problem) for a JSON file read within ``limit`` bytes."""
    if path is None:
        return None, "missing"
    try:
        size = path.stat().st_size
        if size > limit:
            return None, f"{path.name} is {size:,} bytes; at most {limit:,} are read"
        return json.loads(path.read_text(encoding="utf-8")), None
    except (OSError, UnicodeDecodeError) as e:
        return None, f"{path.name} cannot be read ({type(e).__name__})"
    except (json.JSONDecodeError, RecursionError) as e:
        return None, f"{path.name} is not valid JSON ({getattr(e, 'msg', type(e).__name__)})"


@dataclass
class GeneRun:
    """One gene of a run: its record, parsed prediction and trace, and what did not read."""

    gene_id: str
    record: dict[str, Any] | None
    prediction: GenePrediction
    trace: list[TraceEvent] = field(default_factory=list)
    session_id: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def symbol(self) -> str:
        rec = self.record or {}
        out = rec.get("output") if isinstance(rec.get("output"), dict) else {}
        sym = rec.get("gene_symbol") or (out or {}).get("gene_symbol")
        return sym if isinstance(sym, str) else ""

    @property
    def usage(self) -> dict[str, Any]:
        u = (self.record or {}).get("usage")
        return u if isinstance(u, dict) else {}

    @property
    def error(self) -> str | None:
        e = (self.record or {}).get("error")
        return str(e)[:500] if e else None

    @property
    def output(self) -> dict[str, Any]:
        out = (self.record or {}).get("output")
        return out if isinstance(out, dict) else {}


#: the largest coverage report read
MAX_REPORT_BYTES = 50_000_000


@dataclass
class Reference:
    """One cited paper of a gene with the reason ``flysift coverage`` gave for it."""

    pmcid: str
    reason: str
    title: str | None = None
    year: int | None = None
    detail: str = ""


@dataclass
class CoverageReport:
    """The reasons of ``flysift coverage --run-dir RUN --out RUN/coverage`` (``eval.coverage.run_reasons``: the one
    home of the rule; this only shows its report): the reason names in order, per gene the counts and the
    references."""

    reasons: list[str]
    counts: dict[str, dict[str, int]]
    references: dict[str, list[Reference]]
    depth: int | None = None
    stale: bool = False


def _detail(reason: str, d: Any) -> str:
    """What reached a reference, in words (as ``flysift coverage``'s Markdown writes it)."""
    if not isinstance(d, dict):
        return ""
    if reason == "surfaced_not_read":
        return f"rank {d.get('rank')} in {d.get('tool')} call #{d.get('call')} ({str(d.get('query', ''))[:200]!r})"
    if reason == "beyond_budget":
        return (f"best rank {d.get('best_rank')} ({d.get('from')} query {str(d.get('query', ''))[:200]!r}, policy "
                f"{d.get('policy')})" + ("; within the budget" if d.get("within_budget") else ""))
    return ""


def read_coverage(data: Any) -> CoverageReport | None:
    """A coverage report's run part, or None when it does not have the report's shape (it is then not shown)."""
    run = data.get("run") if isinstance(data, dict) else None
    if not isinstance(run, dict) or not isinstance(run.get("genes"), dict) or not isinstance(run.get("reasons"), list):
        return None
    reasons = [str(r)[:40] for r in run["reasons"] if isinstance(r, str)]
    counts: dict[str, dict[str, int]] = {}
    refs: dict[str, list[Reference]] = {}
    for gid, g in list(run["genes"].items())[:MAX_GENES]:
        if not isinstance(g, dict) or not isinstance(g.get("references"), list):
            continue
        raw = g.get("counts")
        c: dict[str, Any] = raw if isinstance(raw, dict) else {}
        counts[str(gid)] = {r: int(c[r]) for r in reasons if isinstance(c.get(r), int) and c[r]}
        refs[str(gid)] = [Reference(pmcid=str(r["pmcid"])[:256], reason=str(r["reason"])[:40],
                                    title=str(r["title"])[:1000] if isinstance(r.get("title"), str) else None,
                                    year=r["year"] if isinstance(r.get("year"), int) else None,
                                    detail=_detail(str(r["reason"]), r.get("detail")))
                          for r in g["references"] if isinstance(r, dict)
                          and isinstance(r.get("pmcid"), str) and isinstance(r.get("reason"), str)]
    depth = run.get("depth") if isinstance(run.get("depth"), int) else None
    return CoverageReport(reasons=reasons, counts=counts, references=refs, depth=depth)


@dataclass
class Run:
    name: str
    info: dict[str, Any]
    summary: dict[str, Any]
    genes: dict[str, Path]
    traces: dict[str, Path]
    problems: list[str] = field(default_factory=list)
    coverage: CoverageReport | None = None

    def gene(self, gene_id: str) -> GeneRun:
        """One gene's files, looked up in the run's listings (404 ``gene_not_in_run`` otherwise)."""
        path = self.genes.get(gene_id)
        if path is None:
            raise NotFound(f"Run {self.name!r} has no prediction for {gene_id[:40]!r}.", code="gene_not_in_run",
                           details={"run": self.name, "gene": gene_id[:40]})
        data, problem = _read_json(path)
        problems = [problem] if problem else []
        pred = parse_prediction(gene_id, data if problem is None else {}, file=path.name)
        record = data if isinstance(data, dict) else None
        trace: list[TraceEvent] = []
        session_id = None
        raw, tproblem = _read_json(self.traces.get(gene_id), MAX_TRACE_BYTES)
        if tproblem and tproblem != "missing":
            problems.append(tproblem)
        if isinstance(raw, dict):
            session_id = raw.get("session_id") if isinstance(raw.get("session_id"), str) else None
            events = raw.get("events")
            for ev in events[:MAX_TRACE_EVENTS] if isinstance(events, list) else []:
                try:
                    trace.append(TraceEvent.model_validate(ev))
                except ValueError:
                    problems.append("a trace event does not have the shape of a session trace event; skipped")
        return GeneRun(gene_id=gene_id, record=record, prediction=pred, trace=trace, session_id=session_id,
                       problems=problems)


def open_run(root: Path | None, name: str) -> Run:
    path = find_run(root, name)
    files = _children(path)
    info, p1 = _read_json(files.get("run.json"))
    summary, p2 = _read_json(files.get("summary.json"))
    problems = [p for p in (p1, p2) if p and p != "missing"]
    genes = {m.group(1): p for n, p in sorted(_children(files["predictions"]).items())
             if (m := GENE_FILE.fullmatch(n))} if "predictions" in files else {}
    traces = {m.group(1): p for n, p in sorted(_children(files["traces"]).items())
              if (m := GENE_FILE.fullmatch(n))} if "traces" in files else {}
    if len(genes) > MAX_GENES:
        problems.append(f"{len(genes):,} genes; the first {MAX_GENES:,} are shown")
        genes = dict(list(genes.items())[:MAX_GENES])
    report_file = files.get("coverage.json")
    if report_file is None and "coverage" in files and files["coverage"].is_dir():
        report_file = _children(files["coverage"]).get("coverage.json")
    coverage = None
    if report_file is not None:
        data, p3 = _read_json(report_file, MAX_REPORT_BYTES)
        coverage = read_coverage(data) if p3 is None else None
        if p3 is not None:
            problems.append(p3)
        elif coverage is None:
            problems.append(f"{report_file.name} is not a report of `flysift coverage --run-dir`; not shown")
        else:
            coverage.stale = any(p.stat().st_mtime > report_file.stat().st_mtime for p in genes.values())
    return Run(name=name, info=info if isinstance(info, dict) else {}, summary=summary if isinstance(summary, dict)
               else {}, genes=genes, traces=traces, problems=problems, coverage=coverage)


@dataclass
class Comparison:
    """Predicted ids beside the ground truth's (in-corpus rows, exact ids): hits, misses and wrong ids."""

    task: str
    hits: list[str]
    misses: list[str]
    wrong: list[str]


def compare(pred: GenePrediction, truth: GeneRecord | None) -> list[Comparison]:
    """Exact comparison per task of FlyAOC's scored sets: in-corpus GO and anatomy ids, and in-corpus synonyms as
    FlyAOC normalises them (``normalize_synonym``); the evaluator (``flysift eval``) gives the scores, with semantic
    credit for terms."""
    if truth is None:
        return []
    out = []
    synonyms = [normalize_synonym(e.synonym) for e in (*truth.fullname_synonyms, *truth.symbol_synonyms) if e.in_corpus]
    for task, rows in (("go", [r.go_id for r in truth.go if r.in_corpus]),
                       ("anatomy", [r.anatomy_id for r in truth.expression if r.in_corpus and r.anatomy_id]),
                       ("synonyms", synonyms)):
        want = list(dict.fromkeys(rows))
        got = pred.lists.get(task, [])
        out.append(Comparison(task=task, hits=[i for i in got if i in want], misses=[i for i in want if i not in got],
                              wrong=[i for i in got if i not in want]))
    return out
