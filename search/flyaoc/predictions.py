"""FlyAOC predictions (spec §3.3, §4.3): the issue types that report on them and the lenient parser that turns a
prediction file into ranked lists for scoring.

Two kinds of finding: :class:`search.schema.flyaoc.Issue` is one finding of the validator on one object (a path, a
code, a message; FlyAOC's ``errors`` are its ``str``); :class:`PredictionIssue` is one problem the evaluator met in
one gene's file (``error``: the file or a task is unusable; ``warning``: an item was skipped and scoring went on as
FlyAOC's evaluator would). The parser never raises on a bad prediction: it records issues, and a file it cannot use
scores zero.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from search.core.errors import InputError
from search.flyaoc.ids import PMCID, TERM_ID, well_formed

Known = Callable[[str], bool]

#: Scored tasks. ``synonyms`` is the combined list (the headline); fullname and symbol are reported too.
TASKS: tuple[str, ...] = ("go", "anatomy", "synonyms", "synonyms_fullname", "synonyms_symbol")
#: the keys of a prediction object that hold the three tasks
TASK_KEYS = ("task1_function", "task2_expression", "task3_synonyms")
#: FlyAOC's headline cut-offs (spec §4.7): ranked items past these are never scored
SCORED_K: dict[str, int] = {"go": 30, "anatomy": 10, "synonyms": 20}


def normalize_synonym(s: str) -> str:
    """§4.2: strip and lower-case, nothing else (FlyAOC folds no hyphens, spaces or Greek letters)."""
    return s.strip().lower()


def _first_occurrences(items: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(items))


@dataclass(frozen=True)
class PredictionIssue:
    """A problem with one prediction file: ``error`` = the file (or a whole task) is unusable, ``warning`` = an item
    was skipped or looks wrong but scoring went on as FlyAOC's evaluator would."""

    gene_id: str
    file: str | None
    severity: str
    where: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"gene_id": self.gene_id, "file": self.file, "severity": self.severity, "where": self.where,
                "message": self.message}


@dataclass
class GenePrediction:
    """One gene's ranked lists (§4.3) and what was wrong with its file. ``status``: ``ok``; ``failed`` (run record
    with ``output: null``); ``invalid`` (file unusable, scored as failed); ``missing`` (no file: skipped in parity
    mode, failed with --missing-as-failed or in corrected mode)."""

    gene_id: str
    status: str
    file: str | None = None
    lists: dict[str, list[str]] = field(default_factory=lambda: {t: [] for t in TASKS})
    #: number of expression records (FlyAOC's anatomy semantic-precision denominator in parity mode)
    expression_records: int = 0
    #: distinct (anatomy_id, stage_id) pairs of records with an anatomy, in rank order
    stage_pairs: list[tuple[str, str | None]] = field(default_factory=list)
    #: PMCIDs named in evidence fields (reference coverage from predictions)
    evidence_pmcids: set[str] = field(default_factory=set)
    issues: list[PredictionIssue] = field(default_factory=list)

    @property
    def scored_as_failure(self) -> bool:
        return self.status in ("failed", "invalid", "missing")


class _Parser:
    """Turns one file's JSON into a GenePrediction, recording every problem instead of raising."""

    def __init__(self, gene_id: str, file: str | None, known: Mapping[str, Known | None]):
        self.pred = GenePrediction(gene_id=gene_id, status="ok", file=file)
        self.known = known

    def issue(self, severity: str, where: str, message: str) -> None:
        self.pred.issues.append(PredictionIssue(self.pred.gene_id, self.pred.file, severity, where, message))

    def unusable(self, where: str, message: str) -> GenePrediction:
        self.pred.status = "invalid"
        self.issue("error", where, message + "; gene scored as zero")
        return self.pred

    def check_id(self, kind: str, value: str, where: str) -> None:
        if not well_formed(value, TERM_ID[kind]):
            self.issue("warning", where, f"{value!r} is not a well-formed {kind} id")
            return
        known = self.known.get(kind)
        if known is not None and not known(value):
            self.issue("warning", where, f"{value} is not a live term of the {kind} ontology (no semantic credit)")

    def items(self, obj: dict, key: str, where: str = "") -> list:
        where = where or key
        if key not in obj:
            self.issue("warning", where, "missing; scored as empty")
            return []
        value = obj[key]
        if not isinstance(value, list):
            self.issue("error", where, f"expected a list, got {type(value).__name__}; scored as empty")
            return []
        return value

    def evidence(self, item: dict, where: str) -> None:
        ev = item.get("evidence")
        if ev is None:
            return
        if not isinstance(ev, dict):
            self.issue("warning", f"{where}.evidence", "not an object; ignored")
            return
        pmcid = ev.get("pmcid")
        if well_formed(pmcid, PMCID):
            self.pred.evidence_pmcids.add(pmcid)
        elif pmcid is not None:
            self.issue("warning", f"{where}.evidence.pmcid", f"{pmcid!r} is not a PMCID; ignored")

    def parse(self, data: Any) -> GenePrediction:
        if isinstance(data, dict) and "output" in data:  # a run record (§3.2)
            if data["output"] is None:
                self.pred.status = "failed"
                err = data.get("error")
                self.issue("error", "output", f"run failed (output is null){': ' + str(err) if err else ''}")
                return self.pred
            data = data["output"]
        if not isinstance(data, dict):
            return self.unusable("", f"expected a prediction object, got {type(data).__name__}")
        unknown = sorted(set(data) - set(TASK_KEYS) - {"gene_id", "gene_symbol"})
        for key in unknown:
            self.issue("warning", key, f"unknown key (tasks are {', '.join(TASK_KEYS)})")
        gid = data.get("gene_id")
        if gid is not None and gid != self.pred.gene_id:
            self.issue("warning", "gene_id", f"{gid!r} differs from the file's gene {self.pred.gene_id}")
        self.go(self.items(data, "task1_function"))
        self.expression(self.items(data, "task2_expression"))
        self.synonyms(data)
        return self.pred

    def go(self, items: list) -> None:
        ids = []
        for i, item in enumerate(items):
            where = f"task1_function[{i}]"
            if not isinstance(item, dict):
                self.issue("warning", where, "not an object; skipped")
                continue
            go_id = item.get("go_id")
            if go_id is None or go_id == "":
                if "description" not in item:
                    self.issue("warning", where, "no go_id; skipped")
                continue  # description items score nothing without resolution (§4.9)
            if not isinstance(go_id, str):
                self.issue("warning", f"{where}.go_id", f"not a string ({go_id!r}); skipped")
                continue
            self.check_id("go", go_id, f"{where}.go_id")
            self.evidence(item, where)
            ids.append(go_id)
        self.pred.lists["go"] = _first_occurrences(ids)

    def expression(self, items: list) -> None:
        ids, pairs, records = [], [], 0
        for i, item in enumerate(items):
            where = f"task2_expression[{i}]"
            if not isinstance(item, dict):
                self.issue("warning", where, "not an object; skipped")
                continue
            records += 1
            anatomy, stage = item.get("anatomy_id"), item.get("stage_id")
            if stage is not None and not isinstance(stage, str):
                self.issue("warning", f"{where}.stage_id", f"not a string ({stage!r}); ignored")
                stage = None
            elif stage:
                self.check_id("stage", stage, f"{where}.stage_id")
            self.evidence(item, where)
            if anatomy is None or anatomy == "":
                continue
            if not isinstance(anatomy, str):
                self.issue("warning", f"{where}.anatomy_id", f"not a string ({anatomy!r}); skipped")
                continue
            self.check_id("anatomy", anatomy, f"{where}.anatomy_id")
            ids.append(anatomy)
            pairs.append((anatomy, stage or None))
        self.pred.lists["anatomy"] = _first_occurrences(ids)
        self.pred.stage_pairs = _first_occurrences(pairs)
        self.pred.expression_records = records

    def synonyms(self, data: dict) -> None:
        if "task3_synonyms" not in data:
            self.issue("warning", "task3_synonyms", "missing; scored as empty")
            return
        syn = data["task3_synonyms"]
        if not isinstance(syn, dict):
            self.issue("error", "task3_synonyms", f"expected an object, got {type(syn).__name__}; task scored as zero")
            return
        for key in sorted(set(syn) - {"fullname_synonyms", "symbol_synonyms"}):
            self.issue("warning", f"task3_synonyms.{key}", "unknown key; ignored")
        for key, task in (("fullname_synonyms", "synonyms_fullname"), ("symbol_synonyms", "synonyms_symbol")):
            names = []
            for i, s in enumerate(self.items(syn, key, f"task3_synonyms.{key}")):
                if isinstance(s, str):
                    names.append(normalize_synonym(s))
                else:
                    self.issue("warning", f"task3_synonyms.{key}[{i}]", f"not a string ({s!r}); skipped")
            self.pred.lists[task] = _first_occurrences(names)
        # every fullname synonym outranks every symbol synonym (§4.3)
        self.pred.lists["synonyms"] = _first_occurrences(self.pred.lists["synonyms_fullname"]
                                                          + self.pred.lists["synonyms_symbol"])


def parse_prediction(gene_id: str, data: Any, file: str | None = None,
                     known: Mapping[str, Known | None] | None = None) -> GenePrediction:
    """Read one gene's prediction (an output object or a run record). ``known[kind](id)`` flags unknown ids."""
    return _Parser(gene_id, file, known or {}).parse(data)


def load_predictions(directory: str | Path, gene_ids: Iterable[str],
                     known: Mapping[str, Known | None] | None = None
                     ) -> tuple[dict[str, GenePrediction], list[PredictionIssue]]:
    """Read ``<gene_id>.json`` for each gene. Returns per-gene predictions (status ``missing`` where there is no
    file) and issues about files that belong to no ground-truth gene."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"prediction directory not found: {directory}", source=str(directory))
    wanted = list(gene_ids)
    out: dict[str, GenePrediction] = {}
    for gid in wanted:
        path = directory / f"{gid}.json"
        if not path.exists():
            out[gid] = GenePrediction(gene_id=gid, status="missing")
            out[gid].issues.append(PredictionIssue(gid, None, "error", "", "no prediction file"))
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            pred = GenePrediction(gene_id=gid, status="invalid", file=str(path))
            pred.issues.append(PredictionIssue(gid, str(path), "error", "", f"unreadable: {e}; gene scored as zero"))
            out[gid] = pred
            continue
        out[gid] = parse_prediction(gid, data, str(path), known)
    stray = [PredictionIssue(p.stem, str(p), "warning", "", "file matches no ground-truth gene; ignored")
             for p in sorted(directory.glob("*.json")) if p.stem not in out]
    return out, stray
