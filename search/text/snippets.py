"""Engine-neutral highlighting: find where a query's clauses match a text, in the same two views the engines index.

Computed in Python from the stored text (tantivy's own snippet generator ignores custom tokenizers), so the
highlight of ``Dl`` never lights up ``dl``: symbol clauses match case-sensitively on symbol tokens, word clauses
match stems on word tokens. Both engines make paper snippets here (``paper_snippets``); the cluster engine's passage
snippets come from its highlighter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache

import regex

from search.core.models import Passage, Snippet
from search.core.query import Clause
from search.text.analysis import SYMBOL_PATTERN, WORD_PATTERN, symbol_spans, word_spans

WINDOW = 240


_WORD = regex.compile(WORD_PATTERN)
_SYMBOL = regex.compile(SYMBOL_PATTERN)
_SPACE = regex.compile(r"\s")
_SPACE_BEFORE = regex.compile(r"(?r)\s")   # searches backwards: the last whitespace before a place


@lru_cache(maxsize=1024)
def _finder(needles: frozenset[str]) -> regex.Pattern:
    """Where a needle starts a token: every token starts at a letter or digit that does not follow one."""
    either = "|".join(regex.escape(n) for n in sorted(needles, key=lambda n: (-len(n), n)))
    return regex.compile(r"(?<![\p{L}\p{N}])(?:" + either + ")")


@lru_cache(maxsize=1024)
def _prefix_finders(prefixes: frozenset[str]) -> tuple[regex.Pattern, ...]:
    """One finder per needle (a word prefix, a symbol term), in a fixed order. ``regex`` finds one literal by a fast
    substring search, but an alternation of several is tried at every character (a gene's full name gives six
    prefixes: ~6x the time of six separate scans on a paper's text; two symbols ``dl``/``Dl`` ~4x). The starts found
    are candidates that the caller checks against the tokens there, so scanning separately may find more candidates
    than the alternation (one inside another's match) but never other matches; a needle that starts with another one
    (``abd`` and ``a``) finds nothing more, so it is not scanned."""
    shortest = [p for p in prefixes if not any(q != p and p.startswith(q) for q in prefixes)]
    return tuple(_finder(frozenset([p])) for p in sorted(shortest))


def _prefix_starts(finders: tuple[regex.Pattern, ...], low: str) -> list[int]:
    """Where a token of the lower-cased text starts with one of the prefixes, in text order."""
    if len(finders) == 1:
        return [m.start() for m in finders[0].finditer(low)]
    return sorted({m.start() for f in finders for m in f.finditer(low)})


def _stretches(text: str, starts: Iterable[int]) -> list[tuple[int, int]]:
    """The whitespace-delimited stretches of ``text`` around ``starts``, merged (tokens never span whitespace)."""
    spans = []
    for i in starts:
        before = _SPACE_BEFORE.search(text, 0, i)
        after = _SPACE.search(text, i)
        spans.append((before.end() if before else 0, after.start() if after else len(text)))
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


class Highlighter:
    """Highlights clauses in texts. ``stem`` maps a lower-cased word to its word-view token(s)."""

    def __init__(self, clauses: Sequence[Clause], stem: Callable[[str], str]):
        self._stem = stem
        self._word_terms = {stem(w) for c in clauses if c.view == "word" for _, _, w in word_spans(c.text)}
        self._word_terms.discard("")
        self._symbol_terms = {t for c in clauses if c.view == "symbol" for _, _, t in symbol_spans(c.text)}
        self._prefixes = tuple({t[:3] for t in self._word_terms})
        self._find_symbols = _prefix_finders(frozenset(self._symbol_terms)) if self._symbol_terms else None
        self._find_words = _prefix_finders(frozenset(self._prefixes)) if self._prefixes else None

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where the clauses match. Only what can match is tokenised: a symbol term's occurrences at a token start
        with the whitespace-delimited stretch around them (a symbol token may start before: ``Su(H)`` holds ``H``),
        and the word tokens that start with a term's first letters; the tokens are those of the whole text."""
        found: list[tuple[int, int]] = []
        if self._find_symbols is not None:
            inside = []   # candidates after punctuation: a token may start before them
            for i in _prefix_starts(self._find_symbols, text):
                if i and not text[i - 1].isspace():
                    inside.append(i)
                elif (m := _SYMBOL.match(text, i)) and m.group() in self._symbol_terms:   # a token starts here
                    found.append(m.span())
            for lo, hi in _stretches(text, inside):
                found += [(lo + s, lo + e) for s, e, t in symbol_spans(text[lo:hi]) if t in self._symbol_terms]
        if self._find_words is not None:
            low = text.lower()
            # the lower-cased text maps the text character by character unless lower() changed its length or the
            # final-sigma rule applies (the case of a Σ depends on what follows it): then all its words are read
            if len(low) == len(text) and "Σ" not in text:
                words = [(m.start(), m.end(), m.group().lower())
                         for m in (_WORD.match(text, i) for i in _prefix_starts(self._find_words, low)) if m]
            else:
                words = word_spans(text)
            found += [(s, e) for s, e, w in words if w.startswith(self._prefixes) and self._stem(w) in self._word_terms]
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


def paper_snippets(hl: Highlighter, title: str, abstract: str, best: Passage | None) -> list[Snippet]:
    """A paper hit's snippets, in both engines: its title, the abstract it shows, and its best-scoring passage
    (named by its id), each where the query's terms occur."""
    texts = [("title", title), ("abstract", abstract)] + ([(best.id, best.text)] if best else [])
    return [s for field, text in texts if (s := hl.snippet(field, text))]
