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


def _reading(text: str, known_symbols: frozenset[str] | set[str], foldable: frozenset[str] | set[str] = frozenset()
             ) -> tuple[list[Clause], list[dict[str, Any]], Case]:
    """The clauses of ``text`` (no expansions) and, per token, where it went and why."""
    clauses: list[Clause] = []
    trace: list[dict[str, Any]] = []
    for m in _MARKED.finditer(text):
        if m.group(1) is not None:
            phrase = m.group(1).strip()
            toks = symbol_tokens(phrase)
            if len(toks) == 1 and toks[0] == phrase:
                clauses.append(Clause(text=phrase, view="symbol"))
                trace.append({"token": phrase, "view": "symbol", "why": "quoted: exact case"})
            elif phrase:
                clauses.append(Clause(text=phrase, view="word", phrase=True))
                trace.append({"token": phrase, "view": "word", "phrase": True, "why": "quoted phrase"})
        else:
            toks = symbol_tokens(m.group(2))
            if toks:
                clauses.append(Clause(text=toks[0], view="symbol"))
                trace.append({"token": toks[0], "view": "symbol", "why": "marked gene:"})
    rest, clitics = split_clitics(_MARKED.sub(" ", text))
    trace += [{"token": c, "view": "dropped", "why": "clitic"} for c in clitics]
    tokens = [tok for chunk in rest.split() for tok in symbol_tokens(chunk)]
    case = query_case(tokens, known_symbols)
    running = len(tokens) >= 2
    read = [(tok, *_read(tok, case, known_symbols, running)) for tok in tokens]
    entry: dict[str, Any]
    n_words = sum(1 for _, view, _ in read if view == "word")
    content = any(view == "symbol" or why != "stop word" for _, view, why in read) or len(clauses) > 0
    drop = n_words >= STOP_MIN_WORDS and content
    for tok, view, why in read:
        if view == "symbol":
            clauses.append(Clause(text=tok, view="symbol"))
            entry = {"token": tok, "view": "symbol", "why": why}
            bare = not any(c.isupper() or c in "()[]" for c in tok)
            if why == "symbol shape" and bare and (running or tok.replace("-", "").isalpha()):
                # lower-case shapes without brackets in running text (igf-1, high-fat, omega-3), or alone when only
                # letters and hyphens (african-american; iab-4 alone stays exact), are often prose: their words match
                # the word view at half weight too (the exact symbol clause still ranks exact mentions first)
                clauses.append(Clause(text=tok, view="word", boost=WORD_PHRASE_WEIGHT))
                entry["word_phrase"] = WORD_PHRASE_WEIGHT
            elif running and why == "symbol shape" and not any(c.isupper() for c in tok):
                clauses.append(Clause(text=tok, view="word", phrase=True, boost=WORD_PHRASE_WEIGHT))
                entry["word_phrase"] = WORD_PHRASE_WEIGHT
            elif why == "symbol shape" and not running and len(tok) >= 2 and tok.isalpha() and tok.isupper():
                # one short word in capitals (FAT, DHA, FTZ) is a shouted word or an older symbol written in capitals:
                # the exact-case symbol clause ranks exact mentions first and its word matches at half weight, so it
                # finds what the lower-case query finds (a symbol the lexicon knows in capitals stays exact)
                clauses.append(Clause(text=tok, view="word", boost=WORD_PHRASE_WEIGHT))
                entry["case_folded"] = WORD_PHRASE_WEIGHT
            elif tok != tok.lower() and tok.lower() in foldable:
                # the lexicon writes this gene in several cases and no other gene in any: case tells nothing here
                clauses.append(Clause(text=tok, view="word", phrase=True, boost=WORD_PHRASE_WEIGHT))
                entry["case_folded"] = WORD_PHRASE_WEIGHT
            trace.append(entry)
        elif why == "stop word" and drop:
            trace.append({"token": tok, "view": "dropped", "why": "stop word"})
        else:
            clauses.append(Clause(text=tok, view="word"))
            entry = {"token": tok, "view": "word", "why": why}
            if not drop and ((len(tok) <= SHORT_WORD and why == "word") or case == "capitals"):
                clauses.append(Clause(text=tok, view="symbol", boost=EXACT_CASE_BONUS))
                entry["exact_case_bonus"] = EXACT_CASE_BONUS
            trace.append(entry)
    return clauses, trace, case


def plan(text: str, *, filters: Filters | None = None, known_symbols: frozenset[str] | set[str] = frozenset(),
         expansions: Iterable[str] = (), foldable: frozenset[str] | set[str] = frozenset()) -> EngineQuery:
    """The engine query of ``text``; ``known_symbols`` (exact case) and ``foldable`` (``Lexicon.foldable``) come from
    the gene lexicon when one is loaded."""
    clauses, trace, case = _reading(text, known_symbols, foldable)
    for name in dict.fromkeys(expansions):
        clauses.append(expansion_clause(name, known_symbols))
    dropped = [t["token"] for t in trace if t["view"] == "dropped"]
    return EngineQuery(clauses=clauses, filters=filters or Filters(), dropped=dropped, case=case)


def explain(text: str, query: EngineQuery, known_symbols: frozenset[str] | set[str] = frozenset(),
            bm25: dict[str, Any] | None = None, foldable: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    """The planner's reading of ``text`` token by token, with the query it produced and the BM25 parameters it ran
    under: what an ``explain: true`` search answers in ``query.explain``."""
    _, trace, case = _reading(text, known_symbols, foldable)
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
    return out


def gene_in_title(query_text: str, title: str) -> bool:
    """FlyAOC's rule: the lower-cased query occurs in the lower-cased title, or every query word does."""
    q, t = query_text.lower().strip(), title.lower()
    return bool(q) and (q in t or all(w in t for w in q.split()))
