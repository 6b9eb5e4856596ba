"""Highlighting tokenises only the stretches around candidate places: the spans must be exactly those of
tokenising the whole text, whatever the text (Unicode case changes, final sigma, long tokens, no whitespace)."""

from __future__ import annotations

import random

import pytest

from search.core.query import Clause
from search.text.analysis import stem, symbol_spans, word_spans
from search.text.snippets import Highlighter

PIECES = ["Dl", "dl", "Su(H)", "(Su(H)),", "E(spl)m8-HLH", "l(2)gl", "α-Cat", "abd-A", "N", "n", "Notch", "NOTCH",
          "expression", "expressed", "Expressing", "coexpression", "wing", "wings", "Wingless", "margin", "the",
          "İstanbul", "ΟΔΟΣ", "σίγμα", "ΑΣ.Β", "ß-gal", "ﬁnger", "x" * 150 + "expression", "Dl" + "a" * 120, "2.5",
          "1:1", ".", ",", ";", "(", ")", "-", "\u00a0", "\u2003", "\n", "\n\n", "\t",
          # words of genes' full names: several prefixes, some starting with others (``a`` and ``abd``)
          "Enhancer", "of", "offset", "split", "helix-loop-helix", "a", "A", "abdominal", "abdomen", "lethal", "(2)",
          "giant", "larvae", "l", "gl", "2"]
QUERIES = [("symbol", "Dl"), ("symbol", "Su(H)"), ("symbol", "N"), ("symbol", "α-Cat"), ("word", "expression"),
           ("word", "wing margin"), ("word", "notch"), ("word", "istanbul"), ("word", "οδος"), ("word", "ας"),
           ("word", "finger"), ("symbol", "x" * 150 + "expression"), ("word", "gal"), ("symbol", "Cat"),
           ("symbol", "A"), ("symbol", "H"), ("word", "Enhancer of split m8, helix-loop-helix"),
           ("word", "abdominal A"), ("word", "lethal (2) giant larvae"), ("word", "a abd abdomen")]


def _full_scan(h: Highlighter, clauses: list[Clause], text: str) -> list[tuple[int, int]]:
    """What highlighting found before: every token of the whole text."""
    words = {stem(w) for c in clauses if c.view == "word" for _, _, w in word_spans(c.text)} - {""}
    symbols = {t for c in clauses if c.view == "symbol" for _, _, t in symbol_spans(c.text)}
    found = [(s, e) for s, e, t in symbol_spans(text) if t in symbols]
    found += [(s, e) for s, e, w in word_spans(text) if w.startswith(tuple({t[:3] for t in words}) or ("\0",))
              and stem(w) in words]
    return sorted(set(found))


@pytest.mark.parametrize("seed", range(6))
def test_spans_equal_those_of_tokenising_the_whole_text(seed):
    rng = random.Random(seed)
    checked = 0
    for _ in range(300):
        text = "".join(rng.choice(PIECES) + rng.choice([" ", "", " ", "\n", "-"]) for _ in range(rng.randint(0, 120)))
        clauses = [Clause(text=t, view=v) for v, t in rng.sample(QUERIES, rng.randint(1, 3))]
        h = Highlighter(clauses, stem)
        expected = _full_scan(h, clauses, text)
        assert h.spans(text) == expected, (text[:200], clauses)
        checked += bool(expected)
    assert checked > 100   # most texts have something to highlight


def test_a_snippet_highlights_the_matching_words():
    h = Highlighter([Clause(text="Dl", view="symbol"), Clause(text="expression", view="word")], stem)
    text = "Strong dl staining. " * 30 + "Dl expression rises in the wing; DlN and expressed Dl."
    snip = h.snippet("text", text)
    assert snip is not None
    assert [snip.text[s:e] for s, e in snip.highlights] == ["Dl", "expression", "expressed", "Dl"]
