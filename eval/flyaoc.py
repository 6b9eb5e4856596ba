"""FlyAOC curation metrics, written from ``specs/flyaoc-compat.md`` §4 so that parity mode equals FlyAOC's evaluator.

Two modes: ``parity`` (default; FlyAOC's denominators, defects included, so published numbers compare) and
``corrected`` (§4.10: unique-id denominators, no null anatomy member, missing genes count as failures).
Similarity is injected (a callable ``sim(a, b) -> float``, e.g. ``search.ontology.model.WangSimilarity(...).sim``) so
the metric code never re-implements Wang. Bad prediction files never abort a run: problems are collected per gene as
``PredictionIssue`` records and the gene scores zero where its file is unusable. The ground truth and the predictions
are read by ``search.flyaoc`` (``groundtruth``, ``predictions``), the one home of FlyAOC's file rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from search.flyaoc import groundtruth
from search.flyaoc.groundtruth import GeneRecord
from search.flyaoc.predictions import (
    SCORED_K,
    TASK_KEYS,
    TASKS,
    GenePrediction,
    Known,
    PredictionIssue,
    load_predictions,
    normalize_synonym,
    parse_prediction,
)

Similarity = Callable[[str, str], float]
#: what eval's callers import from here; the parsing of predictions lives in search.flyaoc.predictions
__all__ = ["DEFAULT_K", "HEADLINE_K", "MODES", "SEMANTIC_TASKS", "TASKS", "TASK_KEYS", "Evaluation",
           "GenePrediction", "GeneTruth", "Known", "PredictionIssue", "Scorer", "TaskScore", "aggregate_task",
           "bootstrap", "evaluate", "gene_truth", "load_ground_truth", "load_predictions", "normalize_synonym",
           "parse_prediction"]

#: FlyAOC's k list plus 30 (the paper's GO@30), §4.1.
DEFAULT_K: tuple[int, ...] = (1, 3, 5, 10, 20, 30, 50)
#: The paper's headline cutoff per task (§4.7; the validator's SCORED_K); overridable.
HEADLINE_K: dict[str, int] = SCORED_K
SEMANTIC_TASKS = frozenset({"go", "anatomy"})
MODES = ("parity", "corrected")


# ---------------------------------------------------------------------------------------------------------------
# Ground truth (read by search.flyaoc.groundtruth; here the scored sets)
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


def gene_truth(gene: GeneRecord) -> GeneTruth:
    """The scored sets of one ground-truth gene."""
    go_in = [r.go_id for r in gene.go if r.in_corpus]
    go_all = [r.go_id for r in gene.go]
    an_all = [r.anatomy_id for r in gene.expression if r.anatomy_id]
    in_corpus = [r for r in gene.expression if r.in_corpus]
    an_in = [r.anatomy_id or None for r in in_corpus]
    tuples = {(r.anatomy_id, r.stage_start_id, r.stage_end_id) for r in in_corpus if r.anatomy_id}
    names = {}
    for task, entries in (("synonyms_fullname", gene.fullname_synonyms), ("synonyms_symbol", gene.symbol_synonyms)):
        every = [normalize_synonym(e.synonym) for e in entries]
        in_corpus_names = [normalize_synonym(e.synonym) for e in entries if e.in_corpus]
        names[task] = (in_corpus_names, every)
    fn, sy = names["synonyms_fullname"], names["synonyms_symbol"]
    sets = {"go": frozenset(go_in), "anatomy": frozenset(an_in), "synonyms_fullname": frozenset(fn[0]),
            "synonyms_symbol": frozenset(sy[0])}
    sets["synonyms"] = sets["synonyms_fullname"] | sets["synonyms_symbol"]
    sets_all = {"go": frozenset(go_all), "anatomy": frozenset(an_all), "synonyms_fullname": frozenset(fn[1]),
                "synonyms_symbol": frozenset(sy[1])}
    sets_all["synonyms"] = sets_all["synonyms_fullname"] | sets_all["synonyms_symbol"]
    # Row counts for failed genes (§4.6); combined synonyms: FlyAOC gives a failed gene no denominator at all.
    rows = {"go": len(go_in), "anatomy": len(in_corpus), "synonyms_fullname": len(fn[0]),
            "synonyms_symbol": len(sy[0]), "synonyms": 0}
    return GeneTruth(gene.gene_id, gene.gene_symbol, sets, sets_all, rows, frozenset(tuples),
                     frozenset(gene.cited_pmcids))


def load_ground_truth(path: str | Path) -> dict[str, GeneTruth]:
    """Read a FlyAOC ground-truth JSONL file (one gene per line), keeping file order."""
    return {gid: gene_truth(gene) for gid, gene in groundtruth.load_ground_truth(path).items()}


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


def _given(values: dict[int, float] | None) -> dict[int, float]:
    """Per-k values a task has: semantic recall exists for GO and anatomy only, tuple recall for anatomy only."""
    assert values is not None, "asked for a recall the task does not have"
    return values


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
    issues: list[PredictionIssue]
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
            row["semantic_macro"] = _macro([_given(s.semantic)[k] for s in scores])
        if task == "anatomy":
            n_t = sum(s.n_tuples for s in scores)
            row["tuple_micro"] = _ratio(sum(_given(s.tuple_recall)[k] * s.n_tuples for s in scores), n_t)
            row["tuple_macro"] = _macro([_given(s.tuple_recall)[k] for s in scores])
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
                vals = np.array([_given(s.semantic if kind == "semantic" else s.exact)[k] for s in scores])[idx]
                cell[f"{kind}_micro"] = interval(np.divide(num, den, out=np.zeros_like(num), where=den > 0))
                cell[f"{kind}_macro"] = interval(vals.mean(axis=1))
            per_k[str(k)] = cell
        intervals[task] = per_k
    return {"n_resamples": n_resamples, "seed": seed, "level": level, "intervals": intervals}


def evaluate(truth: Mapping[str, GeneTruth], predictions: Mapping[str, GenePrediction], scorer: Scorer, *,
             headline_k: Mapping[str, int] | None = None, missing_as_failed: bool = False,
             extra_issues: Iterable[PredictionIssue] = (), n_resamples: int = 1000, seed: int = 0) -> Evaluation:
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
