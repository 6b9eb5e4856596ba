"""Engine-neutral highlighting: find where a query's clauses match a text, in the same two views the engines index.

Computed in Python from the stored text (tantivy's own snippet generator ignores custom tokenizers), so the
highlight of ``Dl`` never lights up ``dl``: symbol clauses match case-sensitively on symbol tokens, word clauses
match stems on word tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from search.core.models import Snippet
from search.core.query import Clause
from search.text.analysis import symbol_spans, word_spans

WINDOW = 240


class Highlighter:
    """Highlights clauses in texts. ``stem`` maps a lower-cased word to its word-view token(s)."""

    def __init__(self, clauses: Sequence[Clause], stem: Callable[[str], str]):
        self._stem = stem
        self._word_terms = {stem(w) for c in clauses if c.view == "word" for _, _, w in word_spans(c.text)}
        self._word_terms.discard("")
        self._symbol_terms = {t for c in clauses if c.view == "symbol" for _, _, t in symbol_spans(c.text)}

    def spans(self, text: str) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []
        if self._symbol_terms:
            found += [(s, e) for s, e, t in symbol_spans(text) if t in self._symbol_terms]
        if self._word_terms:
            prefixes = tuple({t[:3] for t in self._word_terms})
            found += [(s, e) for s, e, w in word_spans(text)
                      if w.startswith(prefixes) and self._stem(w) in self._word_terms]
        return sorted(set(found))

    def snippet(self, field: str, text: str, window: int = WINDOW) -> Snippet | None:
        """The ``window``-character fragment of ``text`` holding the most highlights, or None without a match."""
        spans = self.spans(text)
        if not spans:
            return None
        best_i, best_n, j = 0, 0, 0
        for i, (s, _) in enumerate(spans):
            while j < len(spans) and spans[j][1] - s <= window:
                j += 1
            if j - i > best_n:
                best_i, best_n = i, j - i
        start = max(0, spans[best_i][0] - window // 4)
        end = min(len(text), start + window)
        while start > 0 and not text[start - 1].isspace():
            start -= 1
        while end < len(text) and not text[end].isspace():
            end += 1
        frag = text[start:end]
        hl = [(s - start, e - start) for s, e in spans if s >= start and e <= end]
        return Snippet(field=field, text=frag, highlights=hl)
