"""The query planner: an agent's query text (plus optional gene-name expansions) → an engine-neutral query.

Reading of the text:

* ``"…"`` is a phrase on the word view.
* every other whitespace-separated chunk is cut to its symbol tokens (so ``(Su(H)),`` becomes ``Su(H)``);
* a token the analysis calls symbol-like (``search.text.analysis.is_symbol_like``: a known symbol, or a shape no English
  word has — ``Dl``, ``N``, ``abd-A``, ``Su(H)``, ``GAL4``) matches **only** the case-sensitive symbol view, so
  ``Dl`` never retrieves a paper that only says ``dl``;
* any other token matches the stemmed word view, and short ones (≤ 4 characters: ``dl``, ``wg``, ``dpp``) also get
  a half-weight exact-case symbol clause, so exact-case mentions rank above case-insensitive ones.

Expansions (the gene's names, from the session's synonym policy) are added as named clauses: symbols on the symbol
view, multi-word names as phrases on the word view; hits report the names they matched.
"""

from __future__ import annotations

from collections.abc import Iterable

import regex

from search.core.query import Clause, EngineQuery, Filters
from search.text.analysis import is_symbol_like, symbol_tokens

_PHRASE = regex.compile(r'"([^"]*)"')
SHORT_WORD = 4
EXACT_CASE_BONUS = 0.5


def plan(text: str, *, filters: Filters | None = None, known_symbols: frozenset[str] | set[str] = frozenset(),
         expansions: Iterable[str] = ()) -> EngineQuery:
    clauses: list[Clause] = []
    for phrase in _PHRASE.findall(text):
        if phrase.strip():
            clauses.append(Clause(text=phrase, view="word", phrase=True))
    rest = _PHRASE.sub(" ", text)
    for chunk in rest.split():
        for tok in symbol_tokens(chunk):
            if is_symbol_like(tok, known_symbols):
                clauses.append(Clause(text=tok, view="symbol"))
            else:
                clauses.append(Clause(text=tok, view="word"))
                if len(tok) <= SHORT_WORD:
                    clauses.append(Clause(text=tok, view="symbol", boost=EXACT_CASE_BONUS))
    for name in dict.fromkeys(expansions):
        clauses.append(expansion_clause(name, known_symbols))
    return EngineQuery(clauses=clauses, filters=filters or Filters())


def expansion_clause(name: str, known_symbols: frozenset[str] | set[str] = frozenset()) -> Clause:
    """A gene name as a named clause: one symbol token → symbol view; anything longer → word-view phrase."""
    toks = symbol_tokens(name)
    if len(toks) == 1 and (is_symbol_like(toks[0], known_symbols) or len(name.split()) == 1):
        return Clause(text=toks[0], view="symbol", name=name)
    return Clause(text=name, view="word", phrase=True, name=name)


def describe(query: EngineQuery) -> dict:
    """How the planner read a query, echoed in responses so agents can see why something matched."""
    return {"clauses": [c.model_dump(exclude_defaults=True) for c in query.clauses],
            "filters": query.filters.model_dump(exclude_none=True)}


def gene_in_title(query_text: str, title: str) -> bool:
    """FlyAOC's rule: the lower-cased query occurs in the lower-cased title, or every query word does."""
    q, t = query_text.lower().strip(), title.lower()
    return bool(q) and (q in t or all(w in t for w in q.split()))
