"""What both term-search encoders (the term encoder's fusion, search.ontology.encoder.fusion, and the dense term
index's RRF, search.ontology.dense_terms) take from the lexical side and give back: the lexical ranking, whose hits
are built only for the terms a fused ranking keeps, and the hits of a fused ranking.

Why lazily: a fusion asks the lexical side 30 terms deep and answers ``limit`` (10) of the union; building a hit
reads the engine's stored document and makes a model, and building the 20 that are never shown was ~1.5 ms of a
~12 ms GO hybrid search (bench/bench_term_latency.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from search.core.models import TermHit
from search.engines import TermEngine
from search.text.analysis import query_variants


class Label(NamedTuple):
    """What a lexical candidate matched with: its name, and the synonym when the name did not match best."""

    name: str
    matched_synonym: str | None


class LexicalRanking:
    """The lexical side's best terms, best first: ids and scores at once; labels and hits when asked.

    ``label(i)`` tells the ``i``-th candidate's name and matched synonym (the fusion's exact-match pin reads them);
    ``build(positions, scores)`` makes the hits of those candidates, in that order, each with the score given (a
    fused ranking's own, so that a hit is made once)."""

    def __init__(self, ids: Sequence[str], scores: Sequence[float], *, label: Callable[[int], Label],
                 build: Callable[[list[int], list[float]], list[TermHit]]):
        self.ids = list(ids)
        self.scores = list(scores)
        self._label, self._build = label, build
        self.position = {tid: i for i, tid in reversed(list(enumerate(self.ids)))}

    def __len__(self) -> int:
        return len(self.ids)

    def label(self, i: int) -> Label:
        return self._label(i)

    def labels(self) -> list[tuple[str, Label]]:
        """Every candidate's id and label, in ranking order."""
        return [(tid, self._label(i)) for i, tid in enumerate(self.ids)]

    def hits(self, ranked: Sequence[tuple[str, float]] | None = None) -> list[TermHit]:
        """The hits of the ``(id, score)`` pairs whose id is a candidate, in that order, with those scores (all
        candidates with their lexical scores when None)."""
        if ranked is None:
            return self._build(list(range(len(self.ids))), self.scores) if self.ids else []
        kept = [(self.position[t], score) for t, score in ranked if t in self.position]
        return self._build([i for i, _ in kept], [score for _, score in kept]) if kept else []


def hits_of(ranked: Sequence[tuple[str, float]], lexical: LexicalRanking | None, engine: TermEngine, ontology: str,
            query: str) -> list[TermHit]:
    """The hits of a fused ranking ``(id, score)``, each with its fused score (rounded as every term hit's): the
    lexical side's candidates built by it (their matched synonym as it found it), the terms only an encoder found
    read from the engine (``term_hits``, explained against the query's tokens), so both read alike. Ids neither
    knows are left out."""
    known = {h.id: h for h in (lexical.hits(ranked) if lexical is not None else [])}
    missing = {tid: score for tid, score in ranked if tid not in known}
    if missing:
        tokens = {t for v in query_variants(query) for t in v}
        known.update((h.id, h.model_copy(update={"score": round(missing[h.id], 4)}))
                     for h in engine.term_hits(ontology, list(missing), tokens) if h.id in missing)
    return [known[tid] for tid, _ in ranked if tid in known]
