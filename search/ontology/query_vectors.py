"""A term-search query as a vector: the one helper both encoders of term search use (the term encoder's int8
ONNX graph, search.ontology.encoder.runtime, and the dense term index's sentence model, search.ontology.dense_terms).

Each keeps its own model; what they share is here: a query text in, one unit-length float32 row out (read-only, so
a cached row cannot be changed by a caller), and a small LRU cache of the latest queries per model. An agent asks
the same term many times (a curator resolves every mention of a gene's paper), and a cached query costs a dict
look-up instead of a model call (~3 ms CPU for the term encoder). Benchmarks measure distinct queries, so the cache
never answers in a published latency figure.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: queries kept per model (a 384-dim row is 1.5 KiB: ~1.5 MiB per model)
CACHE_SIZE = 1024
#: longer queries are embedded but not kept (an encoder truncates them to its word pieces anyway)
MAX_CACHED_CHARS = 512


def unit_rows(rows: Any) -> np.ndarray:
    """``rows`` as C-contiguous float32 rows of unit length (a zero row stays zero)."""
    out = np.asarray(rows, dtype=np.float32)
    if out.ndim == 1:
        out = out.reshape(1, -1)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.ascontiguousarray(out / np.maximum(norms, 1e-12), dtype=np.float32)


def dot_rows(rows: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``rows @ vector`` (float32) on the calling thread. BLAS's matrix-vector product wakes its thread pool, whose
    threads then spin: for FBbt's 15,000 label rows that took 7.6 ms of CPU against 1.3 ms here (einsum's own SIMD
    loop), and on a shared 2-core machine the spinning is other requests' time (bench/bench_term_latency.py)."""
    return np.einsum("ij,j->i", rows, np.asarray(vector, dtype=np.float32).reshape(-1), dtype=np.float32)


class QueryVectors:
    """Query texts → unit float32 vectors through ``embed`` (texts → rows), the latest :data:`CACHE_SIZE` kept.

    Thread-safe: two requests may embed the same new query at once (both compute it; one is kept), never block
    each other on the model call."""

    def __init__(self, embed: Callable[[list[str]], Any], size: int = CACHE_SIZE):
        self._embed = embed
        self.size = size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __call__(self, text: str) -> np.ndarray:
        """The unit vector of ``text`` (1-d, read-only)."""
        if self.size > 0:
            with self._lock:
                got = self._cache.get(text)
                if got is not None:
                    self._cache.move_to_end(text)
                    self.hits += 1
                    return got
        vector = unit_rows(self._embed([text]))[0]
        vector.flags.writeable = False
        with self._lock:
            self.misses += 1
            if self.size > 0 and len(text) <= MAX_CACHED_CHARS:
                self._cache[text] = vector
                while len(self._cache) > self.size:
                    self._cache.popitem(last=False)
        return vector

    def cached(self, text: str) -> np.ndarray | None:
        """The cached vector of ``text``, or None (no model call)."""
        with self._lock:
            return self._cache.get(text)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()


@dataclass
class Nearest:
    """A term a term-search encoder found: the cosine of its nearest label vector, and that label (0 the name, k
    synonym k; -1 the definition, in the dense term index)."""

    id: str
    score: float
    label: int


def top_rows(scores: np.ndarray, want: int) -> np.ndarray:
    """The rows of the ``want`` highest ``scores``, best first (equal scores: the lower row first)."""
    n = len(scores)
    top = np.argpartition(-scores, want - 1)[:want] if want < n else np.arange(n)
    return top[np.argsort(-scores[top], kind="stable")]


def nearest_terms(top: Callable[[int], tuple[np.ndarray, np.ndarray]], rows: int, k: int, want: int, *,
                  term_of: np.ndarray, label_of: np.ndarray, ids: Sequence[str], aspects: Sequence[str],
                  exclude: set[str] | frozenset[str] = frozenset(), aspect: str | None = None) -> list[Nearest]:
    """The ``k`` terms whose best label vector is nearest, best first, leaving out ``exclude`` and, with
    ``aspect``, terms of other aspects. ``top(want)`` gives the ``want`` nearest of the ``rows`` label vectors (row
    numbers and cosines, best first); a row is label ``label_of[row]`` of term ``term_of[row]``. Reads ``want``
    rows first and four times as many each time until ``k`` terms are found or every row has been read."""
    if rows == 0 or k <= 0:
        return []
    want = min(rows, want)
    while True:
        found, scores = top(want)
        out: list[Nearest] = []
        seen: set[int] = set()
        for r, s in zip(found.tolist(), scores.tolist(), strict=True):
            t = int(term_of[r])
            if t in seen:
                continue
            seen.add(t)
            tid = ids[t]
            if tid in exclude or (aspect and aspects[t] != aspect):
                continue
            out.append(Nearest(tid, float(s), int(label_of[r])))
            if len(out) == k:
                return out
        if want >= rows:
            return out
        want = min(rows, want * 4)
