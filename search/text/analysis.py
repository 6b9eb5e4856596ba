"""The one definition of text analysis, shared by every engine so that switching engines keeps results.

Two views of every text field:

* **word** view: maximal runs of letters/digits, lower-cased, English (Porter2/Snowball) stemmed. For prose.
* **symbol** view: case preserved, and fly gene symbols kept whole: ``Su(H)``, ``E(spl)m8-HLH``, ``l(2)gl``,
  ``abd-A``, ``Df(3L)ED4543``, ``α-Cat``. A token is a run of letters/digits, optionally continued by a
  parenthesised group (``(H)``, ``(3L)``) or by ``-``, ``+``, ``/``, ``:`` or ``.`` followed by more letters/digits.
  Trailing punctuation (``,`` ``.`` ``;`` ``)``) and wrapping parentheses are never part of a token, so
  ``(Su(H)),`` yields ``Su(H)``. ``dl`` and ``Dl`` are different tokens.

The patterns are written in the common subset of Rust's ``regex`` (tantivy), Java's ``Pattern``
(Elasticsearch/OpenSearch) and Python's ``regex`` module.
"""

from __future__ import annotations

import regex

WORD_PATTERN = r"[\p{L}\p{N}]+"
_GROUP = r"\([\p{L}\p{N}+:\-]+\)[\p{L}\p{N}]*"
SYMBOL_PATTERN = r"[\p{L}\p{N}]+(?:" + _GROUP + r"|[\-+/:.][\p{L}\p{N}]+)*"

#: tantivy tokenizer / Elasticsearch analyzer names
WORD_ANALYZER = "fs_word"
SYMBOL_ANALYZER = "fs_symbol"
STEM_LANGUAGE = "english"
MAX_TOKEN_CHARS = 64

_word_re = regex.compile(WORD_PATTERN)
_symbol_re = regex.compile(SYMBOL_PATTERN)


def symbol_tokens(text: str) -> list[str]:
    """Case-preserving symbol tokens of ``text`` (the symbol view, unstemmed)."""
    return [m.group(0) for m in _symbol_re.finditer(text)]


def symbol_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, token)`` for every symbol-view token, for highlighting."""
    return [(m.start(), m.end(), m.group(0)) for m in _symbol_re.finditer(text)]


def word_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, lower-cased token)`` for every word-view token (before stemming)."""
    return [(m.start(), m.end(), m.group(0).lower()) for m in _word_re.finditer(text)]


_GREEK = regex.compile(r"[\p{Greek}]")
_INNER_UPPER = regex.compile(r".\p{Lu}")


def is_symbol_like(term: str, known_symbols: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether the planner should match ``term`` on the case-sensitive symbol view instead of the word view.

    A query term is read as a gene symbol when it is a known symbol (case-sensitive lexicon lookup), or when its
    shape is not that of an ordinary word: it has a digit, a bracket, an inner ``-``/``:``/``+``, a Greek letter,
    an upper-case letter after the first character (``GAL4``, ``dpp``→no, ``abd-A``), or it is a short (≤ 3 letters)
    capitalised token (``Dl``, ``N``, ``Ubx``). Plain lower-case words and capitalised words of 4+ letters
    (``Notch``, ``Delta``) stay words, so sentence-style queries behave as full-text search.
    """
    if term in known_symbols:
        return True
    if any(c.isdigit() for c in term) or any(c in "()[]-:+/" for c in term.strip("-")):
        return True
    if _GREEK.search(term) or _INNER_UPPER.search(term):
        return True
    return len(term) <= 3 and term[:1].isupper()
