"""The query planner: an agent's query text (plus optional gene-name expansions) → an engine-neutral query.

Reading of the text, in order:

* ``gene:Dl`` marks a gene symbol: it goes to the case-sensitive symbol view whatever it looks like (``gene:so``,
  ``gene:in``); ``"Dl"`` (one token in quotes) does the same. Any longer ``"…"`` is a phrase on the word view.
* English clitics (``'s`` of ``Parkinson's``, ``'t`` of ``didn't``: ``search.text.analysis.split_clitics``) are
  dropped: grammar, not content;
* every other whitespace-separated chunk is cut to its symbol tokens (so ``(Su(H)),`` becomes ``Su(H)``);
* **case of the whole query.** A query written in capitals (``DROSOPHILA WING DISC DEVELOPMENT``) or in title case
  (``The Role Of Delta In Wing Development``) says nothing about the case of its symbols: it is read
  case-insensitively, except for tokens the lexicon (``known_symbols``) knows in exactly that case;
* **stop words** (``search.text.analysis.is_stop_word``: tantivy's English list, Lucene's 33 words) are words, never
  symbol clauses, even when a gene is named like them (``in``, ``a``, ``be``) — mark those ``gene:in``. In a query of
  ``STOP_MIN_WORDS`` or more words they are dropped from the word view (``dropped`` in the plan says which);
* a token the analysis calls symbol-like (``search.text.analysis.is_symbol_like``: a known symbol, or a shape no English
  word has — ``Dl``, ``N``, ``abd-A``, ``Su(H)``, ``GAL4``) matches **only** the case-sensitive symbol view, so
  ``Dl`` never retrieves a paper that only says ``dl``;
* a one-word query of 2–4 capitals (``FAT``, ``FTZ``) that the lexicon does not know in capitals is a symbol that also
  matches its word view at half weight: a shouted word finds what the lower-case word finds, exact mentions first;
* a symbol-like token with capitals that the lexicon writes in several cases for one gene only (``foldable``:
  ``Hh``, ``Ftz`` of ``hh``, ``ftz``; not ``Dl``, whose ``dl`` is another gene) also matches its word view at half
  weight, so papers that write the gene in another case are found, exact-case mentions first;
* a token without letters (``1`` in ``discs large 1``, ``2.5``) is the same on both views: one word clause, so a
  number never weighs more than a word;
* any other token matches the stemmed word view. In a short query (fewer than ``STOP_MIN_WORDS`` words: ``dl``,
  ``wg expression``) a short token (≤ 4 characters, not a stop word, not in a capitals/title-case query) also gets a
  half-weight exact-case symbol clause, so exact-case mentions rank above case-insensitive ones; in running text
  (``role of the wing disc``) short words are words only, unless the lexicon knows them in that case.

Expansions (the gene's names, from the session's synonym policy) are added as named clauses: symbols on the symbol
view, multi-word names as phrases on the word view; hits report the names they matched.

:func:`explain` is the same reading token by token (which view, and why), for ``explain: true`` requests.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import regex

from search.core.query import Clause, EngineQuery, Filters
from search.text.analysis import STOP_LANGUAGE, is_stop_word, is_symbol_like, split_clitics, symbol_tokens

#: a quoted phrase, or a ``gene:`` mark followed by one symbol token
_MARKED = regex.compile(r'"([^"]*)"|(?<![^\s(\[,;])gene:(\S+)')
SHORT_WORD = 4
#: weight of the exact-case symbol clause a short word gets in a short query (0.2 lowered symbol recall on the
#: generated corpus and changed nothing on the IR collections)
EXACT_CASE_BONUS = 0.5
#: weight of the word-view phrase a lower-case symbol shape gets in running text, and a foldable symbol everywhere
WORD_PHRASE_WEIGHT = 0.5
#: queries with at least this many words lose their stop words on the word view
STOP_MIN_WORDS = 3
#: the fewest words for a capitalised query to count as title case (``Dl N`` is two symbols, not a title)
TITLE_MIN_WORDS = 3
#: a one-word query in capitals of at least this many letters (``DEPRESSION``) is read as a word plus its exact-case
#: symbol clause; shorter ones (``FTZ``, ``BCD``, ``MAD``: older gene symbols are often written so) stay symbols first
#: and match their word view at half weight
CAPITAL_WORD = 5

Case = Literal["as written", "capitals", "title"]


def _letters(tok: str) -> str:
    return "".join(c for c in tok if c.isalpha())


def query_case(tokens: list[str], known_symbols: frozenset[str] | set[str] = frozenset()) -> Case:
    """How the query's words are capitalised as a whole.

    ``capitals``: no lower-case letter anywhere (known symbols aside) in two or more tokens, one of them with two or
    more letters, or in a single all-letter token of ``CAPITAL_WORD`` or more letters (``DEPRESSION``; not ``FTZ``,
    ``GAL4``).
    ``title``: at least ``TITLE_MIN_WORDS`` tokens, every one starting with a capital, and either a capitalised stop
    word after the first (``Of``, ``In``, ``The``) or most of them plain capitalised words of 4+ letters (``Wing``).
    """
    lettered = [t for t in tokens if _letters(t)]
    unknown = [t for t in lettered if t not in known_symbols]
    if not any(c.islower() for t in unknown for c in t) and any(len(_letters(t)) >= 2 for t in unknown) and \
            (len(lettered) >= 2 or (len(unknown) == 1 and unknown[0].isalpha() and len(unknown[0]) >= CAPITAL_WORD)):
        return "capitals"
    alpha = [t for t in tokens if _letters(t)]
    if len(alpha) < TITLE_MIN_WORDS or not all(t[:1].isupper() for t in alpha):
        return "as written"
    plain = [t for t in alpha if t.isalpha() and len(t) >= 4 and t[1:].islower()]
    if any(is_stop_word(t) for t in alpha[1:]) or len(plain) * 2 >= len(alpha):
        return "title"
    return "as written"


def _read(tok: str, case: Case, known_symbols: frozenset[str] | set[str], running_text: bool) -> tuple[str, str]:
    """``(view, why)`` of one unmarked token: view ``symbol`` or ``word``."""
    if tok in known_symbols and not (running_text and is_stop_word(tok)):
        return "symbol", "known symbol in this case"
    if is_stop_word(tok):
        return "word", "stop word"
    if not any(c.isalpha() for c in tok):
        # digits have no case and no stem: both views hold the same token, so a second clause would count it twice
        return "word", "number"
    if case == "capitals":
        return "word", "query in capitals: read case-insensitively"
    if case == "title":
        # only the first letter's case is uninformative: GAL4, Su(H), abd-A keep their shape
        if is_symbol_like(tok[:1].lower() + tok[1:]):
            return "symbol", "symbol shape"
        return "word", "query in title case: read case-insensitively"
    if is_symbol_like(tok):
        return "symbol", "symbol shape"
    return "word", "word"


class _Context:
    """What the whole query tells about each of its tokens: its case, whether it is running text (two or more
    tokens), whether stop words are dropped, and the lexicon's sets."""

    def __init__(self, tokens: list[str], marked: int, known_symbols: frozenset[str] | set[str],
                 foldable: frozenset[str] | set[str], compounds: frozenset[str] | set[str]):
        self.known, self.foldable, self.compounds = known_symbols, foldable, compounds
        self.case = query_case(tokens, known_symbols)
        self.running = len(tokens) >= 2
        self.read = [(tok, *_read(tok, self.case, known_symbols, self.running)) for tok in tokens]
        n_words = sum(1 for _, view, _ in self.read if view == "word")
        content = any(view == "symbol" or why != "stop word" for _, view, why in self.read) or marked > 0
        self.drop = n_words >= STOP_MIN_WORDS and content


def _marked_clause(m: regex.Match) -> tuple[Clause | None, dict[str, Any] | None]:
    """The clause of a quoted phrase or a ``gene:`` mark (``_MARKED``)."""
    if m.group(1) is not None:
        return quoted_clause(m.group(1))
    toks = symbol_tokens(m.group(2))
    if not toks:
        return None, None
    return Clause(text=toks[0], view="symbol"), {"token": toks[0], "view": "symbol", "why": "marked gene:"}


def quoted_clause(text: str) -> tuple[Clause | None, dict[str, Any] | None]:
    """``"Dl"`` (one symbol token as written) is that symbol in its exact case; any longer text a word-view phrase."""
    phrase = text.strip()
    toks = symbol_tokens(phrase)
    if len(toks) == 1 and toks[0] == phrase:
        return Clause(text=phrase, view="symbol"), {"token": phrase, "view": "symbol", "why": "quoted: exact case"}
    if phrase:
        return (Clause(text=phrase, view="word", phrase=True),
                {"token": phrase, "view": "word", "phrase": True, "why": "quoted phrase"})
    return None, None


def _reading(text: str, known_symbols: frozenset[str] | set[str], foldable: frozenset[str] | set[str] = frozenset(),
             compounds: frozenset[str] | set[str] = frozenset()) -> tuple[list[Clause], list[dict[str, Any]], Case]:
    """The clauses of ``text`` (no expansions) and, per token, where it went and why."""
    clauses: list[Clause] = []
    trace: list[dict[str, Any]] = []
    for m in _MARKED.finditer(text):
        clause, entry = _marked_clause(m)
        if clause is not None and entry is not None:
            clauses.append(clause)
            trace.append(entry)
    rest, clitics = split_clitics(_MARKED.sub(" ", text))
    trace += [{"token": c, "view": "dropped", "why": "clitic"} for c in clitics]
    tokens = [tok for chunk in rest.split() for tok in symbol_tokens(chunk)]
    ctx = _Context(tokens, len(clauses), known_symbols, foldable, compounds)
    for tok, view, why in ctx.read:
        more, entry = token_clauses(tok, view, why, ctx)
        clauses += more
        trace.append(entry)
    return clauses, trace, ctx.case


def token_clauses(tok: str, view: str, why: str, ctx: _Context) -> tuple[list[Clause], dict[str, Any]]:
    """The clauses of one unmarked token read as ``(view, why)`` in the query's context, and its trace entry (a
    dropped stop word has no clauses)."""
    clauses: list[Clause] = []
    entry: dict[str, Any]
    if view == "symbol":
        parts = compound_parts(tok, ctx.known, ctx.compounds) if why == "symbol shape" else []
        clauses.append(Clause(text=tok, view="symbol"))
        entry = {"token": tok, "view": "symbol", "why": why}
        bare = not any(c.isupper() or c in "()[]" for c in tok)
        if parts:
            # Wnt/β-catenin, PI3K/Akt, Notch-Delta: the compound as written (papers that write it so) and each part
            # as the planner reads it alone, so papers that name the parts separately are found too
            entry["why"] = "compound: read as its parts too"
            entry["parts"] = []
            for part in parts:
                more, sub = token_clauses(part, *_read(part, ctx.case, ctx.known, True), ctx)
                clauses += more
                entry["parts"].append(sub)
        elif why == "symbol shape" and bare and (ctx.running or tok.replace("-", "").isalpha()):
            # lower-case shapes without brackets in running text (igf-1, high-fat, omega-3), or alone when only
            # letters and hyphens (african-american; iab-4 alone stays exact), are often prose: their words match
            # the word view at half weight too (the exact symbol clause still ranks exact mentions first)
            clauses.append(Clause(text=tok, view="word", boost=WORD_PHRASE_WEIGHT))
            entry["word_phrase"] = WORD_PHRASE_WEIGHT
        elif ctx.running and why == "symbol shape" and not any(c.isupper() for c in tok):
            clauses.append(Clause(text=tok, view="word", phrase=True, boost=WORD_PHRASE_WEIGHT))
            entry["word_phrase"] = WORD_PHRASE_WEIGHT
        elif why == "symbol shape" and not ctx.running and len(tok) >= 2 and tok.isalpha() and tok.isupper():
            # one short word in capitals (FAT, DHA, FTZ) is a shouted word or an older symbol written in capitals:
            # the exact-case symbol clause ranks exact mentions first and its word matches at half weight, so it
            # finds what the lower-case query finds (a symbol the lexicon knows in capitals stays exact)
            clauses.append(Clause(text=tok, view="word", boost=WORD_PHRASE_WEIGHT))
            entry["case_folded"] = WORD_PHRASE_WEIGHT
        elif tok != tok.lower() and tok.lower() in ctx.foldable:
            # the lexicon writes this gene in several cases and no other gene in any: case tells nothing here
            clauses.append(Clause(text=tok, view="word", phrase=True, boost=WORD_PHRASE_WEIGHT))
            entry["case_folded"] = WORD_PHRASE_WEIGHT
    elif why == "stop word" and ctx.drop:
        entry = {"token": tok, "view": "dropped", "why": "stop word"}
    else:
        clauses.append(Clause(text=tok, view="word"))
        entry = {"token": tok, "view": "word", "why": why}
        if not ctx.drop and ((len(tok) <= SHORT_WORD and why == "word") or ctx.case == "capitals"):
            clauses.append(Clause(text=tok, view="symbol", boost=EXACT_CASE_BONUS))
            entry["exact_case_bonus"] = EXACT_CASE_BONUS
    return clauses, entry


#: a compound's joints: every ``/`` between parts of two or more letters; a ``-`` between two parts of at least this
#: many characters (``Notch-Delta``, not ``abd-A``, ``α-Cat``, ``β-catenin``, ``iab-4``)
COMPOUND_PART = 3


def compound_parts(tok: str, known: frozenset[str] | set[str] = frozenset(),
                   compounds: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """The parts a slash or hyphen compound is also read as (``Wnt/β-catenin`` → ``Wnt``, ``β-catenin``;
    ``PI3K/Akt``, ``Notch/Delta``, ``Notch-Delta``), or [] to keep it whole: a name the lexicon or the caller knows
    (``known``, ``compounds``), a token without capitals (``high-fat``, ``and/or``, ``mg/kg`` are prose and already
    match their words), a hyphen with a short side (``abd-A``, ``E(spl)m8-HLH``: brackets keep it whole too)."""
    if tok in known or tok in compounds or not any(c.isupper() for c in tok):
        return []
    if "/" in tok:
        parts = tok.split("/")
        # each part a symbol of two or more letters: not BMP2/4 (BMP2 and BMP4), A/P, D/V
        if all(symbol_tokens(p) == [p] and len(_letters(p)) >= 2 for p in parts):
            return parts
        return []
    if "-" in tok and not any(c in "()[]" for c in tok):
        parts = tok.split("-")
        if len(parts) == 2 and all(len(p) >= COMPOUND_PART for p in parts):
            return parts
    return []


def plan(text: str, *, filters: Filters | None = None, known_symbols: frozenset[str] | set[str] = frozenset(),
         expansions: Iterable[str] = (), foldable: frozenset[str] | set[str] = frozenset(),
         compounds: frozenset[str] | set[str] = frozenset()) -> EngineQuery:
    """The engine query of ``text``; ``known_symbols`` (exact case), ``foldable`` (``Lexicon.foldable``) and
    ``compounds`` (``Lexicon.compounds``: names never split) come from the gene lexicon when one is loaded."""
    clauses, trace, case = _reading(text, known_symbols, foldable, compounds)
    for name in dict.fromkeys(expansions):
        clauses.append(expansion_clause(name, known_symbols))
    dropped = [t["token"] for t in trace if t["view"] == "dropped"]
    return EngineQuery(clauses=clauses, filters=filters or Filters(), dropped=dropped, case=case)


def explain(text: str, query: EngineQuery, known_symbols: frozenset[str] | set[str] = frozenset(),
            bm25: dict[str, Any] | None = None, foldable: frozenset[str] | set[str] = frozenset(),
            compounds: frozenset[str] | set[str] = frozenset(), trace: list[dict[str, Any]] | None = None,
            case: Case | None = None) -> dict[str, Any]:
    """The planner's reading of ``text`` token by token, with the query it produced and the BM25 parameters it ran
    under: what an ``explain: true`` search answers in ``query.explain`` (``trace`` and ``case``: a reading made
    already, by the query language's reader)."""
    if trace is None or case is None:
        _, trace, case = _reading(text, known_symbols, foldable, compounds)
    return {"case": case, "tokens": trace, "dropped": list(query.dropped),
            "stop_words": f"tantivy {STOP_LANGUAGE} (Lucene's 33 words), dropped from queries of {STOP_MIN_WORDS}+ "
                          "words", "expanded": [c.name for c in query.named()], "bm25": bm25 or {}}


def expansion_clause(name: str, known_symbols: frozenset[str] | set[str] = frozenset()) -> Clause:
    """A gene name as a named clause: one symbol token → symbol view; anything longer → word-view phrase."""
    toks = symbol_tokens(name)
    if len(toks) == 1 and (is_symbol_like(toks[0], known_symbols) or len(name.split()) == 1):
        return Clause(text=toks[0], view="symbol", name=name)
    return Clause(text=name, view="word", phrase=True, name=name)


def describe(query: EngineQuery) -> dict:
    """How the planner read a query, echoed in responses so agents can see why something matched."""
    out = {"clauses": [c.model_dump(exclude_defaults=True) for c in query.clauses],
           "filters": query.filters.model_dump(exclude_none=True)}
    if query.dropped:
        out["dropped"] = list(query.dropped)
    if query.case != "as written":
        out["case"] = query.case
    if query.tree is not None:   # the query language's operators and fields: what the engines matched by
        out["tree"] = query.tree.model_dump(exclude_defaults=True)
    return out


def gene_in_title(query_text: str, title: str) -> bool:
    """FlyAOC's rule: the lower-cased query occurs in the lower-cased title, or every query word does."""
    q, t = query_text.lower().strip(), title.lower()
    return bool(q) and (q in t or all(w in t for w in q.split()))
