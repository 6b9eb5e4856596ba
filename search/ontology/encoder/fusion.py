"""Term search with the encoder: ``mode=dense`` (the encoder's nearest terms alone) and ``mode=hybrid`` (the
default when the data dir holds an encoder that fits the served ontology).

Hybrid scores the union of the lexical ranking's top :data:`LEXICAL_DEPTH` and the encoder's top
:data:`ENCODER_POOL` terms by ``lexical score + WEIGHT × cosine``: the lexical score is the re-ranker's (label
similarity, exact-label bonus, definition and engine terms; docs/ontologies.md), the cosine that of the term's
nearest label to the query. A term only the encoder found takes the lowest lexical score of a full lexical list (0
when the lexical side found fewer terms than it was asked for: it has nothing more to say). Every lexical hit whose
name or matched synonym *is* the query (the word-view tokens equal, as the exact-label bonus reads it) stays ahead
of the rest, in lexical order: an exact name or synonym keeps rank 1.

The weight has one home: the encoder version's manifest, per ontology (:attr:`OntologyEntry.fusion_weight`), where
training (and ``bench/bench_ontology.py --dev --weights … --record``) writes the weight chosen on the dev terms of
the built-in split (search.ontology.encoder.tuning; never the test terms, never curated text); :data:`DEFAULT_WEIGHT`
where the manifest has none (an ontology with too few dev terms). A search gathers both sides' candidates
(:func:`gather`) and fuses them at that weight (:meth:`Candidates.fuse`); the dev sweep fuses one gathering at
every weight it tries.

Speed: the encoder side (the query's vector, then its nearest terms) runs on a worker thread while this thread
ranks the lexical candidates (ONNX Runtime and FAISS release the GIL), so on two free cores a hybrid search takes
about the longer of the two sides, not their sum; a query whose vector is cached skips the thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from search.core.models import TermHit
from search.engines import TermEngine
from search.ontology.encoder.runtime import Loaded, TermEncoders
from search.ontology.model import Ontology
from search.ontology.query_vectors import Nearest
from search.ontology.ranking import Label, LexicalRanking, hits_of
from search.text.analysis import canonical_label, label_form, normalise

#: how deep each side goes into the fusion
LEXICAL_DEPTH = 30
ENCODER_POOL = 30
#: the cosine's weight against the lexical score where the encoder's manifest records none (:func:`weight_of`)
DEFAULT_WEIGHT = 1.0
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="flysift-term-encoder")


def exact_ids(query: str, labels: Iterable[tuple[str, Label]]) -> list[str]:
    """The ids whose name or matched synonym is the query (word-view tokens equal), in the order given."""
    forms = {f for f in (normalise(query), normalise(canonical_label(query))) if f}
    return [tid for tid, (name, synonym) in labels if forms & {label_form(name), label_form(synonym or "")}]


def weight_of(loaded: Loaded, name: str) -> float:
    """The fusion weight of ontology ``name``: its manifest entry's, else :data:`DEFAULT_WEIGHT`."""
    entry = loaded.manifest.ontologies.get(name)
    return DEFAULT_WEIGHT if entry is None or entry.fusion_weight is None else entry.fusion_weight


def fuse(query: str, lexical: LexicalRanking, lexical_depth: int, neighbours: list[Nearest],
         cosines: dict[str, tuple[float, int]], limit: int, weight: float = DEFAULT_WEIGHT) -> list[tuple[str, float]]:
    """The best ``limit`` ``(id, fused score)`` of the lexical ranking (asked ``lexical_depth`` deep) and the
    encoder's neighbours; ``cosines`` holds the cosine of lexical candidates the neighbours lack."""
    lex = dict(zip(lexical.ids, lexical.scores, strict=True))
    floor = min(lex.values()) if lex and len(lexical) >= lexical_depth else 0.0
    cos = {tid: c for tid, (c, _) in cosines.items()}
    cos.update((n.id, n.score) for n in neighbours)
    order = {tid: i for i, tid in enumerate([*lex, *(n.id for n in neighbours)])}
    scores = {tid: lex.get(tid, floor) + weight * cos.get(tid, 0.0) for tid in order}
    pinned = exact_ids(query, lexical.labels())
    rest = sorted((tid for tid in scores if tid not in set(pinned)), key=lambda t: (-scores[t], order[t]))
    top = max(scores.values(), default=0.0)
    out = [(tid, top + 1e-4 * (len(pinned) - i)) for i, tid in enumerate(pinned)]   # pinned first, in order
    return (out + [(tid, scores[tid]) for tid in rest])[:limit]


def _encoder_side(loaded: Loaded, query: str, k: int, exclude: set[str] | frozenset[str], aspect: str | None
                  ) -> tuple[np.ndarray, list[Nearest]]:
    vector = loaded.encoder.query(query)
    return vector, loaded.vectors.nearest(vector, k, exclude=exclude, aspect=aspect)


@dataclass(frozen=True)
class Candidates:
    """What a hybrid search fuses, before the weight: the lexical ranking (asked ``depth`` deep), the encoder's
    neighbours, and the cosines of the lexical candidates the neighbours lack. One gathering can be fused at any
    weight (:meth:`fuse`): the weight sweep of training (search.ontology.encoder.holdout) searches each query once."""

    query: str
    lexical: LexicalRanking
    depth: int
    neighbours: list[Nearest]
    cosines: dict[str, tuple[float, int]]

    def fuse(self, weight: float, limit: int) -> list[tuple[str, float]]:
        return fuse(self.query, self.lexical, self.depth, self.neighbours, self.cosines, limit, weight)


def gather(loaded: Loaded, query: str, limit: int, filters: dict[str, Any], lexical: Callable[[int], LexicalRanking],
           concurrent: bool = True) -> Candidates:
    """Both sides' candidates for a hybrid search of ``limit`` hits (each side at least its fusion depth), the
    encoder side on a worker thread while this one ranks the lexical side (unless the query's vector is cached or
    ``concurrent`` is False)."""
    exclude = filters.get("exclude_ids") or frozenset()
    aspect = filters.get("aspect")
    depth, pool = max(limit, LEXICAL_DEPTH), max(limit, ENCODER_POOL)
    if concurrent and loaded.encoder.query.cached(query) is None:
        pending = _POOL.submit(_encoder_side, loaded, query, pool, exclude, aspect)
        lex = lexical(depth)
        vector, neighbours = pending.result()
    else:
        vector, neighbours = _encoder_side(loaded, query, pool, exclude, aspect)
        lex = lexical(depth)
    have = {n.id for n in neighbours}
    cosines = loaded.vectors.cosines(vector, [tid for tid in lex.ids if tid not in have])
    return Candidates(query, lex, depth, neighbours, cosines)


def search(encoders: TermEncoders, engine: TermEngine, name: str, query: str, limit: int, filters: dict[str, Any],
           mode: str, *, lexical: Callable[[int], LexicalRanking], ontology: Callable[[], Ontology],
           ontology_key: Any, concurrent: bool = True) -> list[TermHit]:
    """Term search in ``mode`` dense or hybrid with the data dir's encoder (:class:`DenseUnavailable` when it does
    not fit the served ontology). The filters (aspect, hidden ids) apply to both sides; the encoder holds live terms
    only. Hits come from the lexical side or the engine (search.ontology.ranking.hits_of), so they read alike.
    ``concurrent`` False runs the two sides one after the other (the same ranking, tested)."""
    loaded = encoders.get(name, ontology, ontology_key)
    if mode == "dense":
        _, neighbours = _encoder_side(loaded, query, limit, filters.get("exclude_ids") or frozenset(),
                                      filters.get("aspect"))
        return hits_of([(n.id, n.score) for n in neighbours], None, engine, name, query)
    cands = gather(loaded, query, limit, filters, lexical, concurrent)
    return hits_of(cands.fuse(weight_of(loaded, name), limit), cands.lexical, engine, name, query)
