"""FlyAOC curation metrics, written from ``specs/flyaoc-compat.md`` §4 so that parity mode equals FlyAOC's evaluator.

Two modes: ``parity`` (default; FlyAOC's denominators, defects included, so published numbers compare) and
``corrected`` (§4.10: unique-id denominators, no null anatomy member, missing genes count as failures).
Similarity is injected (a callable ``sim(a, b) -> float``, e.g. ``search.ontology.model.WangSimilarity(...).sim``) so the
metric code never re-implements Wang. Bad prediction files never abort a run: problems are collected per gene as
``Issue`` records and the gene scores zero where its file is unusable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from search.core.errors import InputError

from eval.jsonl import read_jsonl

Similarity = Callable[[str, str], float]
Known = Callable[[str], bool]

#: FlyAOC's k list plus 30 (the paper's GO@30), §4.1.
DEFAULT_K: tuple[int, ...] = (1, 3, 5, 10, 20, 30, 50)
#: The paper's headline cutoff per task (§4.7); overridable.
HEADLINE_K: dict[str, int] = {"go": 30, "anatomy": 10, "synonyms": 20}
#: Scored tasks. ``synonyms`` is the combined list (the headline); fullname and symbol are reported too.
TASKS: tuple[str, ...] = ("go", "anatomy", "synonyms", "synonyms_fullname", "synonyms_symbol")
SEMANTIC_TASKS = frozenset({"go", "anatomy"})
MODES = ("parity", "corrected")
TASK_KEYS = ("task1_function", "task2_expression", "task3_synonyms")

_ID_FORMAT = {"go": re.compile(r"^GO:\d{7}$"), "anatomy": re.compile(r"^FBbt:\d{8}$"),
              "stage": re.compile(r"^FBdv:\d{8}$")}
_PMCID = re.compile(r"^PMC\d+$")


def normalize_synonym(s: str) -> str:
    """§4.2: strip and lower-case, nothing else (FlyAOC folds no hyphens, spaces or Greek letters)."""
    return s.strip().lower()


def _first_occurrences(items: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(items))


# ---------------------------------------------------------------------------------------------------------------
# Ground truth
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GeneTruth:
    """One gene's scored sets (§4.2). ``sets[t]`` is R (in-corpus; anatomy may hold ``None``), ``sets_all[t]`` every
    row's ids (for false positives), ``rows[t]`` the in-corpus row/entry count FlyAOC uses for failed genes."""

    gene_id: str
    gene_symbol: str
    sets: dict[str, frozenset]
    sets_all: dict[str, frozenset]
    rows: dict[str, int]
    #: distinct (anatomy_id, stage_start_id, stage_end_id) of in-corpus rows with an anatomy (our tuple supplement)
    tuples: frozenset[tuple[str, str | None, str | None]]
    #: PMCIDs of the papers curators cited for in-corpus rows (reference coverage)
    cited_pmcids: frozenset[str]


def _require(obj: Mapping, key: str, kind: type | tuple[type, ...], source: str, record: int, where: str) -> Any:
    if not isinstance(obj, Mapping) or key not in obj:
        raise InputError(f"missing field {where}.{key}", source=source, record=record, field=f"{where}.{key}")
    value = obj[key]
    if not isinstance(value, kind):
        raise InputError(f"{where}.{key} has type {type(value).__name__}", source=source, record=record,
                         field=f"{where}.{key}")
    return value


def _gene_truth(obj: Any, source: str, record: int) -> GeneTruth:
    if not isinstance(obj, dict):
        raise InputError("record is not a JSON object", source=source, record=record)
    gene_id = _require(obj, "gene_id", str, source, record, "gene")
    symbol = _require(obj, "gene_symbol", str, source, record, "gene")
    go_rows = _require(obj, "task1_function", list, source, record, "gene")
    ex_rows = _require(obj, "task2_expression", list, source, record, "gene")
    syn = _require(obj, "task3_synonyms", dict, source, record, "gene")

    go_in, go_all, cited = [], [], set()
    for i, row in enumerate(go_rows):
        where = f"task1_function[{i}]"
        go_id = _require(row, "go_id", str, source, record, where)
        if _require(row, "in_corpus", bool, source, record, where):
            go_in.append(go_id)
            if isinstance(row.get("pmcid"), str):
                cited.add(row["pmcid"])
        go_all.append(go_id)

    an_in, an_all, tuples, ex_in = [], [], set(), 0
    for i, row in enumerate(ex_rows):
        where = f"task2_expression[{i}]"
        anatomy = _require(row, "anatomy_id", (str, type(None)), source, record, where)
        if anatomy:
            an_all.append(anatomy)
        if _require(row, "in_corpus", bool, source, record, where):
            ex_in += 1
            an_in.append(anatomy or None)
            if anatomy:
                tuples.add((anatomy, row.get("stage_start_id"), row.get("stage_end_id")))
            if isinstance(row.get("pmcid"), str):
                cited.add(row["pmcid"])

    names: dict[str, tuple[list[str], list[str], int]] = {}
    for key, task in (("fullname_synonyms", "synonyms_fullname"), ("symbol_synonyms", "synonyms_symbol")):
        entries = _require(syn, key, list, source, record, "task3_synonyms")
        in_corpus, every = [], []
        for i, entry in enumerate(entries):
            where = f"task3_synonyms.{key}[{i}]"
            text = normalize_synonym(_require(entry, "synonym", str, source, record, where))
            if _require(entry, "in_corpus", bool, source, record, where):
                in_corpus.append(text)
            every.append(text)
        names[task] = (in_corpus, every, len(in_corpus))

    fn, sy = names["synonyms_fullname"], names["synonyms_symbol"]
    sets = {"go": frozenset(go_in), "anatomy": frozenset(an_in), "synonyms_fullname": frozenset(fn[0]),
            "synonyms_symbol": frozenset(sy[0])}
    sets["synonyms"] = sets["synonyms_fullname"] | sets["synonyms_symbol"]
    sets_all = {"go": frozenset(go_all), "anatomy": frozenset(an_all), "synonyms_fullname": frozenset(fn[1]),
                "synonyms_symbol": frozenset(sy[1])}
    sets_all["synonyms"] = sets_all["synonyms_fullname"] | sets_all["synonyms_symbol"]
    # Row counts for failed genes (§4.6); combined synonyms: FlyAOC gives a failed gene no denominator at all.
    rows = {"go": len(go_in), "anatomy": ex_in, "synonyms_fullname": fn[2], "synonyms_symbol": sy[2],
            "synonyms": 0}
    return GeneTruth(gene_id, symbol, sets, sets_all, rows, frozenset(tuples), frozenset(cited))


def load_ground_truth(path: str | Path) -> dict[str, GeneTruth]:
    """Read a FlyAOC ground-truth JSONL file (one gene per line), keeping file order."""
    path = Path(path)
    genes: dict[str, GeneTruth] = {}
    for n, obj in read_jsonl(path):
        gene = _gene_truth(obj, str(path), n)
        if gene.gene_id in genes:
            raise InputError(f"duplicate gene {gene.gene_id}", source=str(path), record=n, field="gene_id")
        genes[gene.gene_id] = gene
    if not genes:
        raise InputError("ground truth holds no genes", source=str(path))
    return genes


# ---------------------------------------------------------------------------------------------------------------
# Predictions
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Issue:
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
    issues: list[Issue] = field(default_factory=list)

    @property
    def scored_as_failure(self) -> bool:
        return self.status in ("failed", "invalid", "missing")


class _Parser:
    """Turns one file's JSON into a GenePrediction, recording every problem instead of raising."""

    def __init__(self, gene_id: str, file: str | None, known: Mapping[str, Known | None]):
        self.pred = GenePrediction(gene_id=gene_id, status="ok", file=file)
        self.known = known

    def issue(self, severity: str, where: str, message: str) -> None:
        self.pred.issues.append(Issue(self.pred.gene_id, self.pred.file, severity, where, message))

    def unusable(self, where: str, message: str) -> GenePrediction:
        self.pred.status = "invalid"
        self.issue("error", where, message + "; gene scored as zero")
        return self.pred

    def check_id(self, kind: str, value: str, where: str) -> None:
        if not _ID_FORMAT[kind].match(value):
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
        if isinstance(pmcid, str) and _PMCID.match(pmcid):
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
                     known: Mapping[str, Known | None] | None = None) -> tuple[dict[str, GenePrediction], list[Issue]]:
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
            out[gid].issues.append(Issue(gid, None, "error", "", "no prediction file"))
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            pred = GenePrediction(gene_id=gid, status="invalid", file=str(path))
            pred.issues.append(Issue(gid, str(path), "error", "", f"unreadable: {e}; gene scored as zero"))
            out[gid] = pred
            continue
        out[gid] = parse_prediction(gid, data, str(path), known)
    stray = [Issue(p.stem, str(p), "warning", "", "file matches no ground-truth gene; ignored")
             for p in sorted(directory.glob("*.json")) if p.stem not in out]
    return out, stray


# ---------------------------------------------------------------------------------------------------------------
# Per-gene scores
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class TaskScore:
    """One gene, one task. ``num_*[k]`` are micro numerators (recall × n), ``n`` the micro denominator."""

    n: int
    exact: dict[int, float]
    semantic: dict[int, float] | None
    tp: int
    fp: int
    fn: int
    #: semantic set metrics (§4.8): sums of best similarities, and the micro denominators for this mode
    sem_precision_sum: float = 0.0
    sem_recall_sum: float = 0.0
    sem_n_pred: int = 0
    sem_n_gt: int = 0
    #: gene-level semantic precision (over distinct predictions) and recall (over R)
    sem_precision: float = 0.0
    sem_recall: float = 0.0
    #: anatomy only: anatomy+stage tuple recall@k and its denominator
    tuple_recall: dict[int, float] | None = None
    n_tuples: int = 0

    @property
    def precision(self) -> float:
        return _ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float:
        return _ratio(self.tp, self.tp + self.fn)

    @property
    def f1(self) -> float:
        return _f1(self.precision, self.recall)

    @property
    def sem_f1(self) -> float:
        return _f1(self.sem_precision, self.sem_recall)

    def numerator(self, k: int, semantic: bool) -> float:
        values = self.semantic if semantic else self.exact
        return values[k] * self.n if values is not None else 0.0

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"n": self.n, "exact_at_k": _keyed(self.exact), "tp": self.tp, "fp": self.fp,
                             "fn": self.fn, "precision": self.precision, "recall": self.recall, "f1": self.f1}
        if self.semantic is not None:
            d.update(semantic_at_k=_keyed(self.semantic), semantic_precision=self.sem_precision,
                     semantic_recall=self.sem_recall, semantic_f1=self.sem_f1)
        if self.tuple_recall is not None:
            d.update(tuple_recall_at_k=_keyed(self.tuple_recall), n_tuples=self.n_tuples)
        return d


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def _keyed(d: Mapping[int, float]) -> dict[str, float]:
    return {str(k): v for k, v in d.items()}


def _best_so_far(truth: list, preds: list[str], sim: Similarity) -> np.ndarray:
    """best[r, i] = max similarity of truth item r to any of the first i+1 predictions (null truth → 0)."""
    m = np.zeros((len(truth), len(preds)))
    for r, t in enumerate(truth):
        if t is None:
            continue
        for i, p in enumerate(preds):
            m[r, i] = sim(p, t)
    return np.maximum.accumulate(m, axis=1) if preds else m


class Scorer:
    """Scores genes under one mode with one k list. ``similarity[task]`` is needed for GO and anatomy."""

    def __init__(self, similarity: Mapping[str, Similarity], *, k_values: Iterable[int] = DEFAULT_K,
                 mode: str = "parity"):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
        missing = SEMANTIC_TASKS - set(similarity)
        if missing:
            raise ValueError(f"no similarity given for {sorted(missing)}")
        self.similarity = dict(similarity)
        self.k_values = tuple(sorted(set(int(k) for k in k_values)))
        if not self.k_values or self.k_values[0] < 1:
            raise ValueError("k values must be positive integers")
        self.mode = mode

    def truth_set(self, truth: GeneTruth, task: str) -> frozenset:
        """R for a task; corrected mode drops the unmatched null anatomy member (§4.10)."""
        r = truth.sets[task]
        return r - {None} if self.mode == "corrected" else r

    def failed(self, truth: GeneTruth, task: str) -> TaskScore:
        """Zero score; parity keeps FlyAOC's row-count denominators, corrected the unique-set sizes."""
        unique = len(self.truth_set(truth, task))
        n = truth.rows[task] if self.mode == "parity" else unique
        zeros = dict.fromkeys(self.k_values, 0.0)
        semantic = task in SEMANTIC_TASKS
        fn_count = truth.rows[task] if self.mode == "parity" else unique
        if self.mode == "parity" and task == "synonyms":
            fn_count = truth.rows["synonyms_fullname"] + truth.rows["synonyms_symbol"]
        score = TaskScore(n=n, exact=zeros, semantic=dict(zeros) if semantic else None, tp=0, fp=0, fn=fn_count,
                          sem_n_gt=n if semantic else 0)
        if task == "anatomy":
            score.tuple_recall, score.n_tuples = dict(zeros), len(truth.tuples)
        return score

    def score(self, truth: GeneTruth, pred: GenePrediction, task: str) -> TaskScore:
        if pred.scored_as_failure:
            return self.failed(truth, task)
        r = self.truth_set(truth, task)
        r_list = sorted(r, key=lambda x: (x is None, x or ""))
        preds = pred.lists[task]
        top = {k: set(preds[:k]) for k in self.k_values}
        exact = {k: _ratio(len(top[k] & r), len(r)) for k in self.k_values}
        pred_set = set(preds)
        score = TaskScore(n=len(r), exact=exact, semantic=None, tp=len(pred_set & r),
                          fp=len(pred_set - truth.sets_all[task]), fn=len(r - pred_set))
        if task in SEMANTIC_TASKS:
            self._semantic(score, truth, pred, task, r_list, preds)
        if task == "anatomy":
            score.tuple_recall, score.n_tuples = self._tuples(truth, pred), len(truth.tuples)
        return score

    def _semantic(self, score: TaskScore, truth: GeneTruth, pred: GenePrediction, task: str, r_list: list,
                  preds: list[str]) -> None:
        sim = self.similarity[task]
        best = _best_so_far(r_list, preds, sim)
        n = len(r_list)
        score.semantic = {k: (_ratio(float(best[:, min(k, len(preds)) - 1].sum()), n) if preds else 0.0)
                          for k in self.k_values}
        recall_sum = float(best[:, -1].sum()) if preds else 0.0
        # precision: each distinct prediction's best similarity to R (out-of-corpus matches are penalised)
        precision_sum = sum(max((sim(p, t) for t in r_list if t is not None), default=0.0) for p in preds)
        score.sem_recall_sum, score.sem_precision_sum = recall_sum, precision_sum
        score.sem_recall, score.sem_precision = _ratio(recall_sum, n), _ratio(precision_sum, len(preds))
        score.sem_n_pred, score.sem_n_gt = len(preds), n
        if task == "anatomy" and self.mode == "parity":
            # FlyAOC's defect (§4.8): records and in-corpus rows, not distinct ids, in the micro denominators
            score.sem_n_pred, score.sem_n_gt = pred.expression_records, truth.rows["anatomy"]

    def _tuples(self, truth: GeneTruth, pred: GenePrediction) -> dict[int, float]:
        """Our supplement: a (anatomy, stage_start, stage_end) row is recalled when a top-k record names the same
        anatomy and a stage equal to either end of the row's range (FBdv has no usable order to test 'inside')."""
        out = {}
        for k in self.k_values:
            top = pred.stage_pairs[:k]
            hits = sum(1 for a, s0, s1 in truth.tuples
                       if any(pa == a and ps is not None and ps in (s0, s1) for pa, ps in top))
            out[k] = _ratio(hits, len(truth.tuples))
        return out


# ---------------------------------------------------------------------------------------------------------------
# Aggregation and bootstrap
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class Evaluation:
    """Everything one run produced: per-gene scores, aggregates, statuses and issues."""

    mode: str
    missing_as_failed: bool
    k_values: tuple[int, ...]
    headline_k: dict[str, int]
    genes: list[str]                                   # evaluated genes, ground-truth order
    statuses: dict[str, str]                           # every ground-truth gene
    scores: dict[str, dict[str, TaskScore]]            # gene -> task -> score (evaluated genes only)
    issues: list[Issue]
    aggregate: dict[str, Any]
    bootstrap: dict[str, Any]

    def genes_with(self, *statuses: str) -> list[str]:
        return [g for g, s in self.statuses.items() if s in statuses]


def _micro(scores: list[TaskScore], k: int, semantic: bool) -> float:
    """§4.6: Σ recall_k · n / Σ n, the numerator recovered per gene exactly as FlyAOC does."""
    total = sum(s.n for s in scores)
    return sum(s.numerator(k, semantic) for s in scores) / total if total > 0 else 0.0


def _macro(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def aggregate_task(scores: list[TaskScore], task: str, k_values: Iterable[int], headline_k: int) -> dict[str, Any]:
    """Micro and macro recall@k (exact, semantic, tuple) and set metrics for one task over the evaluated genes."""
    semantic = task in SEMANTIC_TASKS
    at_k: dict[str, dict[str, float]] = {}
    for k in k_values:
        row = {"exact_micro": _micro(scores, k, False), "exact_macro": _macro([s.exact[k] for s in scores])}
        if semantic:
            row["semantic_micro"] = _micro(scores, k, True)
            row["semantic_macro"] = _macro([s.semantic[k] for s in scores])
        if task == "anatomy":
            n_t = sum(s.n_tuples for s in scores)
            row["tuple_micro"] = _ratio(sum(s.tuple_recall[k] * s.n_tuples for s in scores), n_t)
            row["tuple_macro"] = _macro([s.tuple_recall[k] for s in scores])
        at_k[str(k)] = row
    tp, fp, fn = (sum(getattr(s, a) for s in scores) for a in ("tp", "fp", "fn"))
    exact_p, exact_r = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    head = at_k[str(headline_k)]
    canon = "semantic" if semantic else "exact"
    out: dict[str, Any] = {
        "k": headline_k,
        "canonical": canon,
        "recall_micro": head[f"{canon}_micro"],
        "recall_macro": head[f"{canon}_macro"],
        "exact_recall_micro": head["exact_micro"],
        "exact_recall_macro": head["exact_macro"],
        "n_ground_truth": sum(s.n for s in scores),
        "n_genes": len(scores),
        "exact_set": {"tp": tp, "fp": fp, "fn": fn, "precision_micro": exact_p, "recall_micro": exact_r,
                      "f1_micro": _f1(exact_p, exact_r),
                      "precision_macro": _macro([s.precision for s in scores]),
                      "recall_macro": _macro([s.recall for s in scores]),
                      "f1_macro": _macro([s.f1 for s in scores])},
        "recall_at_k": at_k,
    }
    if semantic:
        n_pred, n_gt = sum(s.sem_n_pred for s in scores), sum(s.sem_n_gt for s in scores)
        sp = _ratio(sum(s.sem_precision_sum for s in scores), n_pred)
        sr = _ratio(sum(s.sem_recall_sum for s in scores), n_gt)
        out["semantic_recall_micro"], out["semantic_recall_macro"] = head["semantic_micro"], head["semantic_macro"]
        out["semantic_set"] = {"precision_micro": sp, "recall_micro": sr, "f1_micro": _f1(sp, sr),
                               "precision_macro": _macro([s.sem_precision for s in scores]),
                               "recall_macro": _macro([s.sem_recall for s in scores]),
                               "f1_macro": _macro([s.sem_f1 for s in scores]),
                               "n_predictions": n_pred, "n_ground_truth": n_gt}
        out["precision_micro"], out["f1_micro"] = sp, _f1(sp, sr)
    else:
        out["precision_micro"], out["f1_micro"] = exact_p, _f1(exact_p, exact_r)
    if task == "anatomy":
        out["tuple_recall_micro"] = head["tuple_micro"]
        out["n_tuples"] = sum(s.n_tuples for s in scores)
    return out


def bootstrap(scores_by_task: Mapping[str, list[TaskScore]], k_values: Iterable[int], *, n_resamples: int = 1000,
              seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Gene-bootstrap percentile intervals for micro and macro recall@k. One index matrix is drawn from ``seed`` and
    shared by every metric, so intervals are reproducible and comparable across tasks."""
    n_genes = len(next(iter(scores_by_task.values()), []))
    if n_genes == 0 or n_resamples <= 0:
        return {"n_resamples": n_resamples, "seed": seed, "level": level, "intervals": {}}
    idx = np.random.default_rng(seed).integers(0, n_genes, size=(n_resamples, n_genes))
    lo_q, hi_q = 100 * (1 - level) / 2, 100 * (1 + level) / 2

    def interval(samples: np.ndarray) -> list[float]:
        return [float(np.percentile(samples, lo_q)), float(np.percentile(samples, hi_q))]

    intervals: dict[str, Any] = {}
    for task, scores in scores_by_task.items():
        den = np.array([s.n for s in scores], dtype=float)[idx].sum(axis=1)
        kinds = ["exact"] + (["semantic"] if task in SEMANTIC_TASKS else [])
        per_k: dict[str, Any] = {}
        for k in k_values:
            cell = {}
            for kind in kinds:
                num = np.array([s.numerator(k, kind == "semantic") for s in scores])[idx].sum(axis=1)
                vals = np.array([(s.semantic if kind == "semantic" else s.exact)[k] for s in scores])[idx]
                cell[f"{kind}_micro"] = interval(np.divide(num, den, out=np.zeros_like(num), where=den > 0))
                cell[f"{kind}_macro"] = interval(vals.mean(axis=1))
            per_k[str(k)] = cell
        intervals[task] = per_k
    return {"n_resamples": n_resamples, "seed": seed, "level": level, "intervals": intervals}


def evaluate(truth: Mapping[str, GeneTruth], predictions: Mapping[str, GenePrediction], scorer: Scorer, *,
             headline_k: Mapping[str, int] | None = None, missing_as_failed: bool = False,
             extra_issues: Iterable[Issue] = (), n_resamples: int = 1000, seed: int = 0) -> Evaluation:
    """Score every ground-truth gene. Missing genes are skipped (FlyAOC) unless ``missing_as_failed`` or the
    corrected mode; failed and invalid genes always score zero with their denominators kept."""
    heads = {**HEADLINE_K, **(headline_k or {})}
    heads["synonyms_fullname"] = heads["synonyms_symbol"] = heads["synonyms"]
    k_values = tuple(sorted(set(scorer.k_values) | set(heads.values())))
    if k_values != scorer.k_values:
        scorer = Scorer(scorer.similarity, k_values=k_values, mode=scorer.mode)
    count_missing = missing_as_failed or scorer.mode == "corrected"
    statuses, genes, scores = {}, [], {}
    issues = list(extra_issues)
    for gid, gt in truth.items():
        pred = predictions.get(gid) or GenePrediction(gene_id=gid, status="missing")
        statuses[gid] = pred.status
        issues.extend(pred.issues)
        if pred.status == "missing" and not count_missing:
            continue
        genes.append(gid)
        scores[gid] = {t: scorer.score(gt, pred, t) for t in TASKS}
    by_task = {t: [scores[g][t] for g in genes] for t in TASKS}
    aggregate = {t: aggregate_task(by_task[t], t, k_values, heads[t]) for t in TASKS}
    boot = bootstrap(by_task, k_values, n_resamples=n_resamples, seed=seed)
    for t in TASKS:
        cell = boot["intervals"].get(t, {}).get(str(heads[t]), {})
        canon = aggregate[t]["canonical"]
        aggregate[t]["ci95"] = {"recall_micro": cell.get(f"{canon}_micro"), "recall_macro": cell.get(f"{canon}_macro")}
    return Evaluation(mode=scorer.mode, missing_as_failed=count_missing, k_values=k_values, headline_k=heads,
                      genes=genes, statuses=statuses, scores=scores, issues=issues, aggregate=aggregate,
                      bootstrap=boot)
