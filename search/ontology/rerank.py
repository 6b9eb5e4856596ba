"""The term re-ranker: engines find candidates with BM25; the term service re-ranks them the same way for every
engine, with what the model learned from the ontology (``search.ontology.rerank_model``).

For each candidate, the best label (name or synonym) against the query or one of its forms
(``search.ontology.rewrites``) by IDF-weighted Dice over stems, with a penalty when the regulation frame differs, an
exact-label bonus, plus how much of the query its definition covers and the engine's own (normalised) score
(:func:`rerank`). :func:`engine_searches`, :func:`engine_scores` and :func:`variants` say what the service asks the
engine for and what it compares labels against.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from search.ontology.rerank_model import RerankModel, frame
from search.ontology.rewrites import QueryForms, stems, words

#: engine candidates for the query as given, and for each rewrite searched
RERANK_POOL = 60
REWRITE_POOL = 20
#: the best rewrites, searched together in one engine search (their words in one query: on the dev sample this kept
#: top-1/top-5 within 0.001 of a search per rewrite, for a quarter less engine time); the re-ranker compares
#: candidates against more of them
ENGINE_REWRITES = 2
#: score = label similarity × discounts + W_DEF · definition coverage + W_ENGINE · engine score / top engine score
W_DEF = 0.05
W_ENGINE = 0.05
REWRITE_DISCOUNT = 0.95
#: the query's mention forms (lemmas, process nouns, joined split words: ``rewrites.mention_forms``); these and the
#: query itself (discount >= MENTION_DISCOUNT) may earn the exact-label bonus, rule rewrites may not
MENTION_DISCOUNT = 0.97
#: the query as given, when GO's naming conventions rewrote it ("activation of X" is "positive regulation of X")
RAW_DISCOUNT = 0.85
#: a synonym's similarity counts this share of a name's, by scope (EXACT > NARROW/BROAD > RELATED)
SYNONYM_DISCOUNT = {"EXACT": 0.95, "NARROW": 0.92, "BROAD": 0.92, "RELATED": 0.9}
FRAME_PENALTY = 0.4
#: a query form whose stems are exactly a label's: the name or an exact synonym of a live term ranks first, then
#: narrow/broad, then related synonyms (× the form's discount: the query as written before its mention forms)
EXACT_BONUS = {"": 0.3, "EXACT": 0.27, "NARROW": 0.21, "BROAD": 0.21, "RELATED": 0.18}
#: a one-word query (a bare modifier, "mitotic") prefers the most general of the terms whose label holds it:
#: + W_GENERAL × log(1 + descendants) / log(1 + terms)
W_GENERAL = 0.1



class Ranked(NamedTuple):
    """A re-ranked candidate: its score and the label that matched best (0 the name, k the k-th synonym; None for an
    id the model does not know, whose hit keeps the engine's explanation)."""

    id: str
    score: float
    label: int | None


def rerank(lex: RerankModel, variants: list[tuple[str, float]], candidates: list[str], engine: dict[str, float],
           limit: int | None = None) -> list[Ranked] | None:
    """Re-rank candidate ids: ``score = best label similarity + exact-label bonus + W_DEF · definition coverage +
    W_ENGINE · engine (+ generality for one-word queries)``.

    ``variants`` are the query's forms with their discounts (the query as given 1.0, mention forms and rewrites
    less); a label's similarity to a form is their IDF-weighted Dice over stems, × ``FRAME_PENALTY`` when the
    regulation frame differs, × ``SYNONYM_DISCOUNT[scope]`` for synonyms (names first). A form whose stems are
    exactly a label's adds ``EXACT_BONUS[scope]`` × its discount. ``engine`` holds each candidate's engine score over
    the top engine score of its search. Engine-neutral: both engines rank alike. The best ``limit`` (all when
    None), best first; ties keep the candidates' order. None when no variant has a word: the engine's order stands.

    Computed over the model's columns at once (every candidate label × every form as numpy arrays), not label by
    label in Python: about 100 candidates × their labels × up to 10 forms per search."""
    forms = []
    for text, discount in variants:
        toks = stems(words(text))
        if toks:
            idf = {t: lex.idf.get(t, lex.unknown_idf) for t in toks}
            # fsum: exact, so the same whatever order the set of stems iterates in (the hash seed)
            forms.append((toks, idf, math.fsum(idf.values()), frame(toks), discount))
    if not forms:
        return None
    rows = np.fromiter((lex.index.get(c, -1) for c in candidates), np.int64, len(candidates))
    score = W_ENGINE * np.fromiter((engine.get(c, 0.0) for c in candidates), np.float64, len(candidates))
    label = np.zeros(len(candidates), np.int64)
    known = rows >= 0
    if known.any():
        s, k = _label_scores(lex, forms, rows[known], score[known])
        score[known], label[known] = s, k
    order = np.lexsort((np.arange(len(candidates)), -score))[:limit]
    return [Ranked(candidates[j], float(score[j]), int(label[j]) if known[j] else None) for j in order.tolist()]


def _label_scores(lex: RerankModel, forms: list[tuple[frozenset[str], dict[str, float], float, tuple[bool, ...],
                                                       float]],
                  rows: np.ndarray, engine: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`rerank`'s score and best label (against the query itself) of the model's terms ``rows``, whose
    weighted engine scores are ``engine``."""
    cols = lex.columns
    n_forms = len(forms)
    # the forms' stems in the vocabulary (others match no label), and each one's IDF in each form (0: not in it)
    at: dict[int, int] = {}
    for toks, *_ in forms:
        for t in toks:
            c = cols.code.get(t)
            if c is not None:
                at.setdefault(c, len(at))
    ucodes = np.fromiter(at, np.int64, len(at))
    weight_in = np.zeros((len(at), n_forms))
    for f, (toks, idf, *_) in enumerate(forms):
        for t in toks:
            if (c := cols.code.get(t)) is not None:
                weight_in[at[c], f] = idf[t]
    sort = np.argsort(ucodes)
    ucodes = ucodes[sort]

    def matched(codes: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The stems among ``codes`` that some form has: their IDF in each form (rows of ``weight_in``) and their
        owners (most stems are in no form, and are left out before any per-form work)."""
        if not len(ucodes) or not len(codes):
            return np.zeros((0, n_forms)), owner[:0]
        j = np.minimum(np.searchsorted(ucodes, codes), len(ucodes) - 1)
        hit = ucodes[j] == codes
        return weight_in[sort[j[hit]]], owner[hit]

    def per_owner(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
        """Row sums of ``values`` (stems × forms) by owner (label or term): n × forms."""
        flat = (owner[:, None] * n_forms + np.arange(n_forms)).ravel()
        return np.bincount(flat, weights=values.ravel(), minlength=n * n_forms).reshape(n, n_forms)

    labels, first_label = _spans(cols.label_at, rows)          # every candidate's labels, and where each starts
    stem_pos, stem_label = _spans(cols.stem_at, labels, owners=True)
    codes = cols.stems[stem_pos]
    found, found_label = matched(codes, stem_label)
    inter = per_owner(found, found_label, len(labels))                     # IDF of the shared stems
    shared = per_owner((found > 0).astype(np.float64), found_label, len(labels))
    size = (cols.stem_at[labels + 1] - cols.stem_at[labels]).astype(np.float64)
    frame = np.bincount(stem_label, weights=cols.frame_bits[codes], minlength=len(labels))
    w = np.array([f[2] for f in forms])
    discount = np.array([f[4] for f in forms])
    form_size = np.array([len(f[0]) for f in forms], dtype=np.float64)
    form_frame = np.array([sum(b << n for n, b in enumerate(f[3])) for f in forms], dtype=np.float64)
    scope = cols.scopes[labels]

    dice = 2 * inter / (w[None, :] + cols.weights[labels][:, None])
    direct = dice[:, discount == 1.0].max(axis=1, initial=0.0)   # the label reported: best against the query itself
    label_discount = np.array([1.0, *(SYNONYM_DISCOUNT.get(s, 0.9) for s in RerankModel.SCOPES[1:])])[scope]
    factor = (discount[None, :] * np.where(frame[:, None] != form_frame[None, :], FRAME_PENALTY, 1.0)
              ) * label_discount[:, None]
    best = np.maximum.reduceat((dice * factor).max(axis=1), first_label)
    bonus = np.array([EXACT_BONUS.get(s, 0.18) for s in RerankModel.SCOPES])[scope]
    is_exact = (shared == form_size[None, :]) & (size[:, None] == form_size[None, :]) & \
        (discount[None, :] >= MENTION_DISCOUNT)
    exact = np.maximum.reduceat(np.where(is_exact, discount[None, :] * bonus[:, None], 0.0).max(axis=1),
                                first_label)
    def_pos, def_term = _spans(cols.def_at, rows, owners=True)
    cover = (per_owner(*matched(cols.def_stems[def_pos], def_term), len(rows))
             / np.where(w > 0, w, 1.0)[None, :]).max(axis=1)
    score = best + exact + W_DEF * cover + engine
    if len(forms[0][0]) == 1:   # a one-word query: the most general of the terms whose label holds it
        score = np.where(best > 0, score + W_GENERAL * cols.generality[rows], score)
    # the first label with the best similarity to the query itself
    owner = np.repeat(np.arange(len(rows)), np.diff(np.append(first_label, len(labels))))
    local = np.arange(len(labels)) - first_label[owner]
    top = np.maximum.reduceat(direct, first_label)
    best_k = np.minimum.reduceat(np.where(direct == top[owner], local, len(labels)), first_label)
    return score, best_k


def _spans(starts: np.ndarray, rows: np.ndarray, owners: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The positions ``starts[r]:starts[r + 1]`` of each row, concatenated, and either where each row's run starts
    in them or (``owners``) the row number of each position."""
    first, count = starts[rows], starts[rows + 1] - starts[rows]
    at = np.cumsum(count) - count
    pos = np.arange(int(count.sum())) + np.repeat(first - at, count)
    return pos, (np.repeat(np.arange(len(rows)), count) if owners else at)


def engine_searches(forms: QueryForms, limit: int) -> list[tuple[str, int]]:
    """The engine searches for a query: the query itself (``RERANK_POOL`` deep), and its best rewrites' words
    together in one more (one engine pass, not one each)."""
    searches = [(forms.query, max(limit, RERANK_POOL))]
    if searched := forms.rewrites[:ENGINE_REWRITES]:
        searches.append((" ".join(searched), max(limit, REWRITE_POOL * len(searched))))
    return searches


def engine_scores(found: Iterable[list[tuple[str, float]]]) -> tuple[dict[str, float], dict[str, float]]:
    """From the engine's candidate lists: each candidate's engine score where first found (in finding order), and
    its best score over the top score of its list."""
    first: dict[str, float] = {}
    scores: dict[str, float] = {}
    for hits in found:
        top = hits[0][1] if hits and hits[0][1] > 0 else 1.0
        for cid, score in hits:
            first.setdefault(cid, score)
            scores[cid] = max(scores.get(cid, 0.0), score / top)
    return first, scores


def variants(forms: QueryForms) -> list[tuple[str, float]]:
    """The forms labels are compared against, with their discounts: the query after GO's conventions (1.0), its
    mention forms and rewrites, and the query as written when the conventions changed it."""
    out = [(forms.canon, 1.0), *((r, MENTION_DISCOUNT if r in forms.mentions else REWRITE_DISCOUNT)
                                 for r in forms.rewrites)]
    if forms.canon != forms.query:
        out.append((forms.query, RAW_DISCOUNT))
    return out
