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

Python-side analysis (:func:`analyze`, :func:`stem`, :func:`normalise`: term-search queries, exact-label keys,
highlighting, the resolver) runs tantivy's analyzers built here, the ones the embedded engine indexes with; the cluster
engine expresses the same chain as custom analyzers (``search.engines.cluster.mappings``). Term search also reads a
query in GO's naming conventions (:func:`canonical_label`) in every engine, through :func:`query_variants`.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal

import regex
import tantivy

WORD_PATTERN = r"[\p{L}\p{N}]+"
_GROUP = r"\([\p{L}\p{N}+:\-]+\)[\p{L}\p{N}]*"
SYMBOL_PATTERN = r"[\p{L}\p{N}]+(?:" + _GROUP + r"|[\-+/:.][\p{L}\p{N}]+)*"

#: tantivy tokenizer / Elasticsearch analyzer names
WORD_ANALYZER = "fs_word"
SYMBOL_ANALYZER = "fs_symbol"
STEM_LANGUAGE = "english"
MAX_TOKEN_CHARS = 64

View = Literal["word", "symbol"]

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


# ---- stop words (query side) -----------------------------------------------------------------------------------------

#: tantivy's English stop list (``Filter.stopword("english")``): Lucene's classic 33 words (``a an and are as at be but
#: by for if in into is it no not of on or such that the their then there these they this to was will with``), the
#: same list as OpenSearch's ``_english_`` and the one the plain-BM25 reference of ``data/ir`` uses. The planner drops
#: these from the word view of longer queries; the index keeps every word (phrases still match them).
STOP_LANGUAGE = "english"


@lru_cache(maxsize=1)
def _stop_analyzer() -> tantivy.TextAnalyzer:
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.raw())
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.stopword(STOP_LANGUAGE))
            .build())


@lru_cache(maxsize=100_000)
def is_stop_word(word: str) -> bool:
    """Whether ``word`` (any case) is on the English stop list shipped with tantivy."""
    return bool(word) and not _stop_analyzer().analyze(word)


#: an English clitic: one letter after an apostrophe that follows a letter (``Parkinson's``, ``what ’ s``,
#: ``didn't``, ``I'm``; tokenised collections write ``parkinson 's``), not followed by more letters or another quote
_CLITIC = regex.compile(r"(?<=\p{L})\s?['’]\s?[stdmSTDM](?![\p{L}\p{N}'’])")


def split_clitics(text: str) -> tuple[str, list[str]]:
    """``text`` without its English clitics (``'s``, ``'t``, ``'d``, ``'m``) and the clitics it had, in order.

    Both views split ``Parkinson's`` into ``Parkinson`` and ``s``; the ``s`` (or ``t`` of ``didn't``) is grammar, not
    content, so the query side drops it as Lucene's English analyzer drops the possessive (``EnglishPossessiveFilter``).
    As a query word it matched every possessive and every ``T``/``D`` of ``T cells``/``vitamin D``. The index keeps
    them, so a quoted phrase (``"Parkinson's disease"``) still matches them."""
    found = ["".join(m.group(0).split()) for m in _CLITIC.finditer(text)]
    return (_CLITIC.sub(" ", text), found) if found else (text, [])


# ---- the analyzers (tantivy's, used by the embedded engine and for Python-side analysis) -----------------------------

def word_analyzer() -> tantivy.TextAnalyzer:
    """The word view. tantivy's simple tokenizer splits where ``char::is_alphanumeric`` is false: WORD_PATTERN's
    runs, ~40% faster than the regex tokenizer on 140 M words."""
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(MAX_TOKEN_CHARS))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.stemmer(STEM_LANGUAGE))
            .build())


def symbol_analyzer() -> tantivy.TextAnalyzer:
    """The symbol view: SYMBOL_PATTERN's tokens, case kept, unstemmed."""
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(SYMBOL_PATTERN))
            .filter(tantivy.Filter.remove_long(MAX_TOKEN_CHARS))
            .build())


#: analyzer name → analyzer (the names an index registers them under)
ANALYZERS: dict[str, tantivy.TextAnalyzer] = {WORD_ANALYZER: word_analyzer(), SYMBOL_ANALYZER: symbol_analyzer()}
VIEW_ANALYZER: dict[str, str] = {"word": WORD_ANALYZER, "symbol": SYMBOL_ANALYZER}


def analyze(view: View | str, text: str) -> list[str]:
    """The tokens of ``text`` in one view, exactly as either engine indexes them."""
    return ANALYZERS[VIEW_ANALYZER[view]].analyze(text)


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """Word-view token of one lower-cased word (cached: highlighting calls it per candidate word)."""
    toks = ANALYZERS[WORD_ANALYZER].analyze(word)
    return toks[0] if toks else ""


def normalise(text: str) -> str:
    """The word-view tokens of ``text`` joined by spaces: names and synonyms equal under this match exactly."""
    return " ".join(analyze("word", text))


@lru_cache(maxsize=65_536)
def label_form(label: str) -> str:
    """``normalise`` of an ontology name or synonym, cached: a hybrid term search compares the query with its 30
    candidates' labels (search.ontology.encoder.fusion.exact_ids), and the same labels come back search after
    search (uncached, ~150 µs a search)."""
    return normalise(label)


# ---- naming conventions of ontology labels ---------------------------------------------------------------------------

#: How people (and GO's own synonyms) vary GO-style labels, mapped to the form GO names use: regulation direction
#: words, -ism/-esis nouns for processes, British spellings. Engines search a query in both forms.
CANONICAL: list[tuple[re.Pattern[str], str]] = [(re.compile(p, re.IGNORECASE), r) for p, r in (
    (r"\b(?:up[- ]?regulation|activation|stimulation|induction)\s+of\b", "positive regulation of"),
    (r"\b(?:down[- ]?regulation|inhibition|suppression|repression)\s+of\b", "negative regulation of"),
    (r"\b(?:anabolism|biosynthesis|synthesis)\b", "biosynthetic process"),
    (r"\b(?:catabolism|degradation|breakdown)\b", "catabolic process"),
    (r"\bmetabolism\b", "metabolic process"), (r"\bduring\b", "involved in"),
    (r"(?<=\w)isation", "ization"), (r"(?<=\w)ising\b", "izing"), (r"\bbehaviour", "behavior"),
    (r"\bsignalling\b", "signaling"), (r"\bcolour", "color"), (r"\btumour", "tumor"), (r"\bcentre", "center"),
    (r"\bfibre", "fiber"), (r"\bhaem", "hem"), (r"\boestr", "estr"), (r"\bfoet", "fet"), (r"\bsulph", "sulf"),
    (r"aemia\b", "emia"), (r"\bgrey\b", "gray"),
)]


#: any of the conventions' patterns: most texts have none, and one search tells (a term search canonicalises its
#: query three times; twenty substitutions each were ~2 % of its CPU)
CONVENTION_HINT = re.compile("|".join(f"(?:{p.pattern})" for p, _ in CANONICAL), re.IGNORECASE)


def canonical_label(text: str) -> str:
    """``text`` rewritten to GO's naming conventions ("up-regulation of X" → "positive regulation of X")."""
    if not CONVENTION_HINT.search(text):
        return text
    for pattern, repl in CANONICAL:
        text = pattern.sub(repl, text)
    return text


def query_variants(query: str) -> list[list[str]]:
    """The word-view tokens of a term-search query as written and, when it differs, in GO's conventions (last).

    Every engine searches all variants' tokens and gives the exact-label bonus to each variant; the word-coverage
    bonus goes to the last (canonical) one."""
    return [analyze("word", v) for v in dict.fromkeys([query, canonical_label(query)])]
