"""Reciprocal-rank fusion: combine ranked lists whose scores are not comparable (BM25 sums, cosine similarities).

RRF (Cormack, Clarke & Büttcher, SIGIR 2009) scores an item ``sum(1 / (k + rank))`` over the lists that contain it,
ranks counted from 1; ``k = 60`` is the paper's constant and damps the weight of the very top ranks. Only ranks are
used, so neither list needs calibrating and an item missing from a list simply gets nothing from it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

RRF_K = 60

K = TypeVar("K", bound=Hashable)


def rrf(rankings: Iterable[Sequence[K]], k: int = RRF_K) -> list[tuple[K, float]]:
    """Fused ``(key, score)`` best first. A key repeated within one list counts once, at its first place (the
    ranks after it close up); ties keep the order in which keys were first seen (earlier lists first), so the
    result is deterministic."""
    if k < 0:
        raise ValueError(f"k must be non-negative, got {k}")
    scores: dict[K, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(dict.fromkeys(ranking), start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    order = {key: i for i, key in enumerate(scores)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))

