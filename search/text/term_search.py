"""The engine-neutral definition of ontology term search: fields, boosts, id queries and hits.

Both engines implement it (``search.engines.embedded.terms`` in tantivy queries, ``search.engines.cluster.terms`` in
query DSL), so a term search answers the same whichever engine is configured:

* the best field wins (dis-max, plus ``TIE`` × the others) among the name, synonyms by scope
  (EXACT > NARROW/BROAD > RELATED) and the definition, over the tokens of every query variant
  (:func:`search.text.analysis.query_variants`: the query as written and in GO's naming conventions);
* an exact match of a whole variant with the normalised name (``key``) or a synonym (``syn_key``) adds a bonus;
* every word of the canonical variant being found in the name or synonyms adds a bonus (multi-word queries);
* a query that is a term id (``GO:0005634``, or an alt id) finds that term, obsolete or not;
* hidden ids and the aspect filter inside the query (``limit`` hits come back whatever is hidden); obsolete terms are
  left out unless asked for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from search.core.models import TermHit
from search.text.analysis import analyze

DEFINITION_CHARS = 300
#: a query that is a term id: ``PREFIX:local``
ID_QUERY_RE = re.compile(r"\s*([A-Za-z][A-Za-z0-9_]*:[A-Za-z0-9_.\-]+)\s*")

#: text field → boost (dis-max: a term's best field counts, plus TIE × the others)
FIELD_BOOSTS: dict[str, float] = {
    "name": 3.0, "syn_exact": 2.6, "syn_narrow": 2.0, "syn_broad": 2.0, "syn_related": 1.6, "definition": 0.6,
}
SYNONYM_FIELDS = {"EXACT": "syn_exact", "NARROW": "syn_narrow", "BROAD": "syn_broad", "RELATED": "syn_related"}
#: the fields holding a label (the word-coverage bonus looks only there)
LABEL_FIELDS = ("name", *SYNONYM_FIELDS.values())
TIE = 0.2
NAME_KEY_BOOST = 12.0
SYNONYM_KEY_BOOST = 9.0
COVERAGE_BOOST = 3.0


def engine_score(score: float) -> float:
    """A term's engine score as both engines report it (hits and re-ranker candidates alike)."""
    return round(score, 4)


def id_query(query: str) -> str | None:
    """The term id a query names (``" GO:0005634 "`` → ``GO:0005634``), or None for a text query."""
    m = ID_QUERY_RE.fullmatch(query)
    return m.group(1) if m else None


def variant_keys(variants: Iterable[list[str]]) -> list[str]:
    """The exact-label keys of the query variants (each non-empty variant's tokens joined, without repeats)."""
    return list(dict.fromkeys(" ".join(v) for v in variants if v))


@lru_cache(maxsize=100_000)
def label_tokens(text: str) -> frozenset[str]:
    """Word-view tokens of a label (cached: every hit compares the query with its name and each synonym, and the
    same labels come back search after search)."""
    return frozenset(analyze("word", text))


def term_hit(ontology: str, d: dict[str, list[Any]], score: float, tokens: set[str]) -> TermHit:
    """A hit from a term's stored fields (each a list of values, as tantivy's ``Document.to_dict()`` gives them; the
    cluster engine brings its ``_source`` into that shape). ``matched_synonym``: the synonym sharing most query
    tokens, when it shares more than the name."""
    name = d.get("name", [""])[0]
    matched = None
    if tokens:
        best = len(tokens & label_tokens(name))
        for field in SYNONYM_FIELDS.values():
            for syn in d.get(field, []):
                overlap = len(tokens & label_tokens(syn))
                if overlap > best:
                    best, matched = overlap, syn
    definition = d.get("definition", [""])[0]
    if len(definition) > DEFINITION_CHARS:
        definition = definition[:DEFINITION_CHARS - 1].rsplit(" ", 1)[0] + "…"
    return TermHit(id=d["id"][0], ontology=ontology, name=name, namespace=(d.get("namespace") or [None])[0],
                   aspect=(d.get("aspect") or [None])[0], matched_synonym=matched, definition=definition,
                   score=engine_score(score), obsolete=d.get("obsolete", ["0"])[0] == "1")
