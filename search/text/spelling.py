"""Spelling correction for term search: a query word no label uses, replaced by the nearest word the ontology's names
use ("poliferation" → proliferation, "nucleous" → nucleus).

A word is corrected only when every cheaper reading failed: it is not a label word (its stem is not in the
re-ranker's vocabulary) and the morphology has no form for it (``search.text.morphology``). The candidates are the
words of the terms' names within a small edit distance (1 for words of 5–7 letters, 2 from 8: a typo is one or two
keys, and shorter words have too many neighbours to guess); the closest wins, then the one more labels use (the
commoner reading, as a curator would guess), then the alphabetically first (the same answer every time). Words of
fewer than 5 letters, or with digits or other signs (gene symbols, abbreviations), are never corrected.

Levenshtein distance by `RapidFuzz <https://github.com/rapidfuzz/RapidFuzz>`_ (C++, bit-parallel), over the names'
words of about the query word's length only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

#: the shortest word corrected, and the length from which two edits are allowed
MIN_LETTERS = 5
TWO_EDITS_FROM = 8
#: candidates of one distance compared by how common they are (more at one distance is rare)
MAX_CANDIDATES = 20


def max_edits(word: str) -> int:
    """How many edits a typo of ``word`` may have (0: not corrected)."""
    if len(word) < MIN_LETTERS or not word.isalpha():
        return 0
    return 2 if len(word) >= TWO_EDITS_FROM else 1


class Speller:
    """The nearest name word of a misspelt word. ``commonness(word)`` ranks candidates at one distance (higher
    first: e.g. how many labels use its stem)."""

    def __init__(self, words: Iterable[str], commonness: Callable[[str], float]):
        self._by_length: dict[int, list[str]] = {}
        for w in sorted(set(words)):
            if w.isalpha():
                self._by_length.setdefault(len(w), []).append(w)
        self._commonness = commonness

    def correct(self, word: str) -> str | None:
        """The correction of ``word``, or None (too short, not letters, or nothing near enough)."""
        edits = max_edits(word)
        if not edits:
            return None
        from rapidfuzz.distance import Levenshtein  # here: ~16 ms of imports that most searches never need
        from rapidfuzz.process import extract

        pool = [w for n in range(len(word) - edits, len(word) + edits + 1) for w in self._by_length.get(n, ())]
        near = [(w, d) for w, d, _ in extract(word, pool, scorer=Levenshtein.distance, score_cutoff=edits,
                                              limit=MAX_CANDIDATES) if w != word]
        if not near:
            return None
        return min(near, key=lambda wd: (wd[1], -self._commonness(wd[0]), wd[0]))[0]
