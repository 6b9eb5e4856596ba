"""The term encoder's training curve (``bench/bench_term_encoder_curve.py``): small variants of the training, each
changing one factor (epochs, pairs per term, hard negatives, learning rate, frozen layers) from the settings of the
first full run, and combinations of a factor with the default rate (4e-4), trained on a fixed subset and scored on
the subset's held-out terms. Plain Python and numpy: the
bench script trains (:func:`search.ontology.encoder.train.fit`) and embeds.

**The subset.** Whole ontologies where they are small (FBbt: 8,338 terms), and of GO a seeded sample of *sibling
families* (:func:`sample_families`): a parent's children come in together, so sibling hard negatives and near
distractors exist in the sample as they do in the full GO (a uniform sample would hold almost no siblings).

**The split is the full run's.** A term's split is a hash of (split seed, ontology, id), not of the sample, so a
sampled term is held out exactly when it is held out in the full split: a test or dev term is never a training term
of the subset. Held-out terms are scored against the subset's labels only (fewer distractors than the full GO has):
compare the points with each other, not with the full run's GO figures. Choosing among points is done on the dev
terms (:func:`best_on_dev`); the test terms are only reported.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from search.ontology.encoder.labels import LabelTable

#: ``max_pairs_per_term`` that takes every synonym of every term
ALL_PAIRS = 10_000
#: the settings of the first full run (te-20261201T194851-bec1cee5, lr 5e-5): every point changes one factor of
#: these
BASELINE: dict[str, Any] = {"epochs": 2, "max_pairs_per_term": 3, "sibling_negatives": True,
                            "model_negative_share": 0.5, "lr": 5e-5, "frozen_layers": 2}
#: the points, in the order they are run: (factor varied, settings changed from :data:`BASELINE`)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "base": ("untrained", {"epochs": 0}),
    "baseline": ("baseline", {}),
    "epochs-1": ("epochs", {"epochs": 1}),
    "epochs-3": ("epochs", {"epochs": 3}),
    "pairs-1": ("pairs per term", {"max_pairs_per_term": 1}),
    "pairs-all": ("pairs per term", {"max_pairs_per_term": ALL_PAIRS}),
    "neg-random": ("hard negatives", {"sibling_negatives": False, "model_negative_share": 0.0}),
    "neg-siblings": ("hard negatives", {"model_negative_share": 0.0}),
    "lr-1e-4": ("learning rate", {"lr": 1e-4}),
    "frozen-0": ("frozen layers", {"frozen_layers": 0}),
    "lr-2e-4": ("learning rate", {"lr": 2e-4}),
    "lr-4e-4": ("learning rate", {"lr": 4e-4}),
    "lr-8e-4": ("learning rate", {"lr": 8e-4}),
    # combinations with the default rate (4e-4): do more pairs per term still help at the higher rate?
    "lr-4e-4+pairs-8": ("rate 4e-4 + pairs per term", {"lr": 4e-4, "max_pairs_per_term": 8}),
    "lr-4e-4+pairs-all": ("rate 4e-4 + pairs per term", {"lr": 4e-4, "max_pairs_per_term": ALL_PAIRS}),
    # a quarter of the training terms' definitions as anchors of their names (the MF misses' chemistry is there)
    "lr-4e-4+defs": ("rate 4e-4 + definition pairs", {"lr": 4e-4, "definition_share": 0.25}),
}
#: at most this many children of one parent join the GO sample (GO has parents with hundreds of children)
FAMILY_MAX = 12


def variant(name: str, base: Any) -> Any:
    """The :class:`~search.ontology.encoder.train.TrainConfig` of point ``name``: ``base`` (for its seed, split and
    ontologies) with :data:`BASELINE` and the point's own change applied."""
    if name not in VARIANTS:
        raise KeyError(f"no curve point {name!r}: one of {', '.join(VARIANTS)}")
    return replace(base, **{**BASELINE, **VARIANTS[name][1]})


def negatives_of(cfg: Any) -> str:
    """The hard negatives a config trains with, in words."""
    kinds = (["siblings"] if cfg.sibling_negatives else []) + (["model"] if cfg.model_negative_share > 0 else [])
    return " + ".join(kinds) if kinds else "random"


def _rank(seed: int, key: str) -> bytes:
    return hashlib.blake2b(f"{seed}\x00{key}".encode(), digest_size=8).digest()


def sample_families(table: LabelTable, n: int, seed: int) -> list[int]:
    """About ``n`` term numbers of ``table`` (exactly ``min(n, terms)``), drawn as sibling families: parents in a
    seeded order, each bringing itself and up to :data:`FAMILY_MAX` of its children (also in a seeded order), until
    ``n`` terms are in. Needs a table made with ``hierarchy``. Deterministic in (table, n, seed); blind to the split."""
    n = max(0, min(n, len(table.ids)))
    kept: dict[int, None] = {}
    parents = sorted((p for p, kids in enumerate(table.children) if kids), key=lambda p: _rank(seed, table.ids[p]))
    for p in parents:
        if len(kept) >= n:
            break
        kids = sorted(table.children[p], key=lambda c: _rank(seed, table.ids[c]))[:FAMILY_MAX]
        for t in (p, *kids):
            if len(kept) < n:
                kept.setdefault(t, None)
    if len(kept) < n:   # a flat ontology: fill up with single terms in the seeded order
        for t in sorted(range(len(table.ids)), key=lambda t: _rank(seed, table.ids[t])):
            if len(kept) >= n:
                break
            kept.setdefault(t, None)
    return sorted(kept)


def subset(table: LabelTable, keep: Sequence[int]) -> LabelTable:
    """The table of the terms ``keep`` only (their names and synonyms, their is_a parents among them), under the
    same ontology name, so that :func:`~search.ontology.encoder.labels.split` gives each term the split it has in
    the full table."""
    order = sorted(set(keep))
    number = {t: i for i, t in enumerate(order)}
    texts: list[str] = []
    term: list[int] = []
    k: list[int] = []
    for t in order:
        for r in table.labels_of[t]:
            texts.append(table.texts[r])
            term.append(number[t])
            k.append(table.k[r])
    parents = [[number[p] for p in table.parents[t] if p in number] for t in order] if table.parents else []
    defs = [table.definitions[t] for t in order] if table.definitions else []
    return LabelTable(table.ontology, table.data_version, [table.ids[t] for t in order],
                      "".join(table.aspects[t] for t in order), texts, term, k, parents, defs)


def dev_score(point: dict[str, Any]) -> float:
    """What points are compared on: strict top-5 of the encoder alone on the dev terms, averaged over ontologies."""
    per = [m["dev"]["strict"]["top5"] for m in point["metrics"].values() if "strict" in m.get("dev", {})]
    return sum(per) / len(per) if per else 0.0


def best_on_dev(points: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The trained point with the best :func:`dev_score` (the first of equals); never looks at test figures."""
    trained = [p for p in points if p["epochs"] > 0]
    return max(trained, key=dev_score) if trained else None


def _fig(m: dict[str, Any], which: str) -> str:
    got = m.get(which, {}).get("strict")
    return f"{got['top1']:.3f} / {got['top5']:.3f}" if got else "–"


def markdown(points: Sequence[dict[str, Any]]) -> str:
    """The curve as a Markdown table: per point its settings, training cost and held-out strict figures."""
    names = sorted({o for p in points for o in p["metrics"]})
    head = ["point", "factor", "epochs", "pairs/term", "negatives", "lr", "frozen", "pairs/epoch",
            "train CPU s", "train wall s"]
    for o in names:
        head += [f"{o} test top-1 / top-5", f"{o} dev top-1 / top-5"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in points:
        pairs = "all" if p["max_pairs_per_term"] >= ALL_PAIRS else str(p["max_pairs_per_term"])
        row = [p["point"], p["factor"], str(p["epochs"]), pairs, p["negatives"], f"{p['lr']:g}",
               str(p["frozen_layers"]), f"{p['pairs_per_epoch']:,}", f"{p['train_cpu_seconds']:,.0f}",
               f"{p['train_seconds']:,.0f}"]
        if not p["epochs"]:   # the untrained model: no training settings to speak of
            row[3:10] = ["–"] * 7
        for o in names:
            m = p["metrics"].get(o, {})
            row += [_fig(m, "test"), _fig(m, "dev")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
