"""Query rewrites for term search: the forms of a query that the ontology's labels may use.

Greek letters spelled as the ontologies spell them ("TGFβ" → "TGF beta"), GO's naming conventions
(``search.text.analysis.canonical_label``), mention forms (lemmas and process nouns of the morphology learned at
indexing, split words joined), spelling corrections, abbreviations expanded into the name phrases whose initials they
spell ("APhN" → accessory pharyngeal nerve) and the rewrite rules learned from name/synonym pairs. What they read of
an ontology is the :class:`Vocabulary` interface (the re-ranker's model, ``search.ontology.rerank_model.RerankModel``,
provides it), so the rewrites know nothing of the model's columns or file format; the re-ranker
(``search.ontology.rerank``) scores candidates against the forms :func:`query_forms` returns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple, Protocol

import regex

from search.text import analysis
from search.text.analysis import canonical_label, stem
from search.text.spelling import max_edits

if TYPE_CHECKING:
    import numpy as np

    from search.text.morphology import Morphology
    from search.text.spelling import Speller


#: Greek letters as GO and FBbt spell them in names
GREEK = {"α": "alpha", "β": "beta", "γ": "gamma", "δ": "delta", "ε": "epsilon", "ζ": "zeta", "η": "eta",
         "θ": "theta", "ι": "iota", "κ": "kappa", "λ": "lambda", "μ": "mu", "ν": "nu", "ξ": "xi", "ο": "omicron",
         "π": "pi", "ρ": "rho", "σ": "sigma", "τ": "tau", "υ": "upsilon", "φ": "phi", "χ": "chi", "ψ": "psi",
         "ω": "omega"}
_word_re = regex.compile(analysis.WORD_PATTERN)
_TOKEN = regex.compile(r"[\p{L}\p{N}]+")
_ABBREV_SHAPE = regex.compile(r"\p{Lu}.*\p{Lu}|\p{Ll}\p{Lu}")
_DIGITS = regex.compile(r"\p{N}+")
_ABBREV_PART = regex.compile(r"\p{Lu}\p{Ll}*|\p{Ll}+|\p{N}+")
#: abbreviations of 2 to ABBREV_MAX letters are expanded, into at most ABBREV_EXPANSIONS name phrases each
ABBREV_MAX = 4
ABBREV_EXPANSIONS = 3
#: an abbreviation that more terms' labels use as a word than this is not expanded (and its expansions, phrases
#: the names would have to use even more often, are not looked for)
ABBREV_USED_MAX = 50
#: nor one whose initials more names than this share ("PR1": positive regulation, 4,072 GO names)
ABBREV_USED_ROWS = 500
#: names scanned for one query's abbreviations, all together (GO's commonest initials, "pr", start 4,072 names:
#: ~60 ms; beyond the budget an abbreviation is left as written)
ABBREV_ROWS_BUDGET = 2_000
#: rewrites the re-ranker compares candidates' labels against
MAX_REWRITES = 6
#: words an abbreviation may skip ("AMMC" is the antennal mechanosensory and motor center)
ABBREV_SKIP = frozenset({"and", "of", "the", "to", "in", "for", "on", "by", "with"})
_GREEK_RE = regex.compile(r"(\p{L}?)([" + "".join(GREEK) + r"])(?=(\p{L}?))")


def spell_greek(text: str) -> str:
    """Greek letters spelled as GO and FBbt write them: inside a word joined ("IκB" → "IkappaB"), after a word
    apart ("TGFβ" → "TGF beta", "PDGFRβ" → "PDGFR beta"), else in place ("β-catenin" → "beta-catenin")."""
    if text.isascii():
        return text

    def one(m: regex.Match[str]) -> str:
        before, letter, after = m.group(1), GREEK[m.group(2)], m.group(3)
        return before + letter if (not before or after) else f"{before} {letter}"
    return _GREEK_RE.sub(one, text.replace("Κ", "κ"))


class Vocabulary(Protocol):
    """What the rewrites read of an ontology's labels: stems' IDF weights, the morphology, the speller, the rewrite
    rules and the names' words and initials (``search.ontology.rerank_model.RerankModel`` is the one
    implementation)."""

    idf: dict[str, float]
    morph: Morphology

    @property
    def speller(self) -> Speller: ...

    @property
    def max_lhs(self) -> int:
        """The most words a rule's left side has."""

    def rule(self, lhs: tuple[str, ...] | list[str]) -> list[tuple[tuple[str, ...], int]]:
        """The right sides a left side rewrites to, most frequent first (count 0: a synonym phrase)."""

    def label_df(self, word: str) -> int:
        """How many terms' labels use ``word`` (0 when none does)."""

    def names_with_initials(self, initials: str) -> np.ndarray:
        """The rows of the names with a run of words of these initials."""

    def name_words(self, i: int) -> list[str]:
        """The words of name ``i``."""


class QueryForms(NamedTuple):
    """A query and its forms: ``query`` with Greek letters spelled, ``canon`` after GO's naming conventions,
    ``mentions`` (spelling corrections first, then the mention forms) and ``rewrites`` (the mentions, abbreviation
    expansions, then rule rewrites; deduplicated, best first)."""

    query: str
    canon: str
    mentions: list[str]
    rewrites: list[str]


def query_forms(vocab: Vocabulary, query: str) -> QueryForms:
    """Every form of ``query`` the re-ranker compares labels against (see :class:`QueryForms`)."""
    query = spell_greek(query)
    canon = canonical_label(query)
    ws = words(canon)
    mentions = [" ".join(v) for v in mention_forms(vocab, ws)]
    if (fixed := spelled(vocab, ws)) is not None:   # first: the query's other forms still have the typo
        mentions.insert(0, " ".join(fixed))
    rewrites = [*mentions, *abbreviation_rewrites(vocab, query, canon),
                *(" ".join(r) for r in rule_rewrites(vocab, words(canon)))]
    return QueryForms(query, canon, mentions, list(dict.fromkeys(rewrites)))


def abbreviation_rewrites(vocab: Vocabulary, query: str, canon: str) -> list[str]:
    """``canon`` with each abbreviation of ``query`` replaced by a name phrase it may stand for (its digits kept),
    within a budget of names scanned for the whole query (a hostile query has hundreds of abbreviations)."""
    out = []
    budget = ABBREV_ROWS_BUDGET
    for abbr in dict.fromkeys(abbreviations(query)):
        if vocab.rule((abbr.lower(),)):
            continue   # one a rule rewrites ("IL")
        used = vocab.label_df(abbr)   # a word the labels use ("PNS") stands for the phrases names use more
        if used > ABBREV_USED_MAX:
            continue                # a word of many labels ("ATP", "CoA", "II") stands for itself
        # a word the labels use, with initials many names share ("PR1": positive regulation), stands for itself
        rows = len(initial_rows(vocab, abbr)[1])
        if rows > (min(budget, ABBREV_USED_ROWS) if used else budget):
            continue
        budget -= rows
        digits = " ".join(_DIGITS.findall(abbr))
        for phrase, count in expansion_counts(vocab, abbr):
            if count > used:
                out.append(regex.sub(rf"\b{regex.escape(abbr)}\b", f"{' '.join(phrase)} {digits}".strip(), canon,
                                     count=1))
    return out


def rule_rewrites(vocab: Vocabulary, ws: list[str]) -> list[list[str]]:
    """Rewrites of the word list ``ws`` by the rules: first every rule applied at once (longest left side
    first, most frequent right side), then single substitutions, most frequent first."""
    found = []   # (start, length, right sides)
    # a short query tries every span (a missing left side costs one dict lookup), so a search needs no max_lhs:
    # computing it scans every rule (~10 ms of a ``flysift terms`` call)
    longest = len(ws) if len(ws) <= 8 else vocab.max_lhs
    i = 0
    while i < len(ws):
        for n in range(min(longest, len(ws) - i), 0, -1):
            rhs = vocab.rule(ws[i:i + n])
            if rhs and n == len(ws):   # the whole query is a synonym: the engine matches it as such
                rhs = [r for r in rhs if r[1]]
            if rhs:
                found.append((i, n, rhs))
        i += 1
    if not found:
        return []
    out: list[list[str]] = []
    combined, end = [], 0
    for i, n, rhs in sorted(found, key=lambda f: (f[0], -f[1])):
        if i >= end:
            combined += ws[end:i] + list(rhs[0][0])
            end = i + n
    out.append(combined + ws[end:])
    singles = sorted(((n, c, i, r) for i, n, rhs in found for r, c in rhs[:2]), key=lambda x: (-x[1], -x[0]))
    for n, _c, i, r in singles:
        out.append(ws[:i] + list(r) + ws[i + n:])
    return list({tuple(o): o for o in out if o != ws}.values())[:MAX_REWRITES]


def initial_rows(vocab: Vocabulary, token: str) -> tuple[list[str], np.ndarray]:
    """An abbreviation's letter groups (each capital or leading lower-case run) and the rows of the names with
    a run of words of those initials."""
    letters = [p.lower() for p in _ABBREV_PART.findall(token) if p.isalpha()]
    initials = "".join(p[0] for p in letters) if 2 <= len(letters) <= ABBREV_MAX else ""
    return letters, vocab.names_with_initials(initials)


def expansion_counts(vocab: Vocabulary, token: str) -> list[tuple[tuple[str, ...], int]]:
    """Name phrases an abbreviation may stand for, most common first: each capital (or leading lower-case run)
    of ``token`` starts a word and its letters appear in that word in order ("APhN" → accessory pharyngeal
    nerve, "CvN" → cervical nerve); digits stay. Scans every name with its initials (:func:`initial_rows`:
    callers bound how many)."""
    letters, at_rows = initial_rows(vocab, token)
    rows = at_rows.tolist()
    found: Counter[tuple[str, ...]] = Counter()
    for i in dict.fromkeys(rows):
        nw = vocab.name_words(i)
        spans = {(at[j], at[j + len(letters) - 1]) for at in word_positions(nw)
                 for j in range(len(at) - len(letters) + 1)
                 if all(subsequence(p, nw[w]) for p, w in zip(letters, at[j:j + len(letters)], strict=True))}
        found.update(tuple(nw[a:b + 1]) for a, b in spans)
    return found.most_common(ABBREV_EXPANSIONS)


def expansions(vocab: Vocabulary, token: str) -> list[tuple[str, ...]]:
    """The name phrases of :func:`expansion_counts`, without their counts."""
    return [e for e, _ in expansion_counts(vocab, token)]


def mention_forms(vocab: Vocabulary, ws: list[str]) -> list[list[str]]:
    """The query's words as the ontology writes them: each word's lemma or process noun from the morphology learned
    at indexing ("nuclei" → nucleus, "secretory" → secretion), and two words joined where the ontology uses the
    joined word ("hind gut" → hindgut). In a query of several words, only words the ontology's labels do not use
    are replaced ("nuclear membrane" stays; "acetylated histones" → acetylation histone)."""
    out = vocab.morph.variants(ws if len(ws) == 1 else [w if stem(w) not in vocab.idf else "" for w in ws])
    out = [[a or w for a, w in zip(v, ws, strict=True)] for v in out]
    for j in range(len(ws) - 1):
        joined = ws[j] + ws[j + 1]
        if joined.isalpha() and stem(joined) in vocab.idf:
            out.append(ws[:j] + [joined] + ws[j + 2:])
    return out


def spelled(vocab: Vocabulary, ws: list[str]) -> list[str] | None:
    """The words with each misspelt one corrected (:mod:`search.text.spelling`): a word of letters that no label
    uses and the morphology does not know; None when none is corrected."""
    out, changed = list(ws), False
    for j, w in enumerate(ws):
        if max_edits(w) and stem(w) not in vocab.idf and not vocab.morph.alternatives(w) and \
                (c := vocab.speller.correct(w)) is not None:
            out[j], changed = c, True
    return out if changed else None


def words(text: str) -> list[str]:
    """Lower-cased word-view words (unstemmed), Greek letters spelled out."""
    out = _word_re.findall(text.lower())
    return out if text.isascii() else [GREEK.get(w, w) for w in out]


_STEMS: dict[str, str] = {}


def stems(ws: Iterable[str]) -> frozenset[str]:
    """Word-view stems of the words (a plain dict in front of the analyser: the re-ranker stems millions)."""
    return frozenset(stem_list(ws))


def stem_list(ws: Iterable[str]) -> list[str]:
    """The words' non-empty stems in order (a frozenset made from them in this order iterates alike)."""
    out = []
    for w in ws:
        t = _STEMS.get(w)
        if t is None:
            t = stem(w)
            if len(_STEMS) < 1_000_000:
                _STEMS[w] = t
        if t:
            out.append(t)
    return out


def conventional_words(text: str, ws: list[str]) -> list[str]:
    """``words(canonical_label(text))``, given ``ws = words(text)``."""
    canon = canonical_label(text)
    return ws if canon is text else words(canon)   # the same object: no convention in the text


def word_positions(ws: list[str]) -> list[list[int]]:
    """The word positions an abbreviation's letters may stand for: every word, and (when it has some) every word
    but the function words of ``ABBREV_SKIP``."""
    content = [j for j, w in enumerate(ws) if w not in ABBREV_SKIP]   # name words are lower-case
    every = list(range(len(ws)))
    return [every, content] if len(content) < len(ws) else [every]


def initial_sequences(ws: list[str]) -> list[list[str]]:
    return [[ws[j] for j in at] for at in word_positions(ws)]


def subsequence(part: str, word: str) -> bool:
    """``part`` starts ``word`` and its other letters appear in it in order."""
    if not word.startswith(part[0]):
        return False
    it = iter(word[1:])
    return all(c in it for c in part[1:])


def abbreviations(text: str) -> list[str]:
    """Tokens of ``text`` shaped like abbreviations: two or more capitals, or a capital after a lower-case letter
    ("CNS", "vDR", "APhN", "dorEpiP2")."""
    return [t for t in _TOKEN.findall(text) if len(t) <= 12 and _ABBREV_SHAPE.search(t)]
