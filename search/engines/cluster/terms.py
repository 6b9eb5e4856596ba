"""Ontology terms on the cluster: the term document, the alias of an ontology and the search body, written from the
shared definition in :mod:`search.text.term_search` (the embedded engine's ``terms`` module writes the same definition
as tantivy queries), so both engines rank terms alike.

The requests themselves (write a version, swap the alias, search) are the engine's (``ClusterEngine.write_terms`` /
``search_terms``); this module only builds what they send and reads what comes back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from search.core.errors import InvalidRequest
from search.core.models import Term
from search.core.names import PATTERNS
from search.text.analysis import normalise, query_variants
from search.text.term_search import (
    COVERAGE_BOOST,
    FIELD_BOOSTS,
    LABEL_FIELDS,
    NAME_KEY_BOOST,
    SYNONYM_FIELDS,
    SYNONYM_KEY_BOOST,
    TIE,
    id_query,
    variant_keys,
)

#: ontology names (one home: :mod:`search.core.names`)
NAME_RE = PATTERNS["ontology"]


def term_alias(prefix: str, ontology: str) -> str:
    """The alias searches of ``ontology`` go through; a malformed name is refused before any request is built."""
    if not NAME_RE.fullmatch(ontology):
        raise InvalidRequest(f"ontology name {ontology!r} must match {NAME_RE.pattern}")
    return f"{prefix}-terms-{ontology}"


def term_document(term: Term) -> dict[str, Any]:
    """The indexed document of one term (the fields of ``search.text.term_search``; absent values left out)."""
    doc: dict[str, Any] = {"id": term.id, "ids": [term.id, *term.alt_ids], "name": term.name,
                           "key": normalise(term.name), "definition": term.definition, "obsolete": term.obsolete,
                           "namespace": term.namespace, "aspect": term.aspect,
                           "syn_key": [normalise(s.text) for s in term.synonyms]}
    for s in term.synonyms:
        doc.setdefault(SYNONYM_FIELDS[s.scope], []).append(s.text)
    return {k: v for k, v in doc.items() if v is not None}


def search_body(query: str, *, aspect: str | None, limit: int, exclude_ids: Iterable[str],
                include_obsolete: bool) -> tuple[dict[str, Any] | None, set[str]]:
    """The ``_search`` body of a term query and the query tokens hits are explained with; ``(None, ∅)`` when the
    query has no token (nothing can match)."""
    term_id = id_query(query)
    tokens: list[str] = []
    if term_id:
        main: dict[str, Any] = {"term": {"ids": term_id}}
        include_obsolete = True
    else:
        variants = query_variants(query)
        tokens = list(dict.fromkeys(t for v in variants for t in v))
        if not tokens:
            return None, set()
        main = text_query(variants)
    filters: list[dict[str, Any]] = [{"term": {"aspect": aspect}}] if aspect else []
    must_not: list[dict[str, Any]] = [] if include_obsolete else [{"term": {"obsolete": True}}]
    exclude = sorted(exclude_ids)
    if exclude:
        must_not.append({"terms": {"id": exclude}})
    body = {"query": {"bool": {"must": [main], "filter": filters, "must_not": must_not}}, "size": max(1, limit)}
    return body, set(tokens)


def text_query(variants: list[list[str]]) -> dict[str, Any]:
    """Dis-max over the fields of all variants' tokens, an exact-label bonus per variant, and a word-coverage bonus
    for the last (canonical) variant: ``search.text.term_search`` in query DSL."""
    tokens = list(dict.fromkeys(t for v in variants for t in v))

    def any_token(field: str) -> dict[str, Any]:
        return ({"term": {field: tokens[0]}} if len(tokens) == 1 else
                {"bool": {"should": [{"term": {field: t}} for t in tokens]}})

    per_field = [{"bool": {"should": [any_token(f)], "boost": b}} for f, b in FIELD_BOOSTS.items()]
    shoulds: list[dict[str, Any]] = [{"dis_max": {"queries": per_field, "tie_breaker": TIE}}]
    for key in variant_keys(variants):
        shoulds.append({"term": {"key": {"value": key, "boost": NAME_KEY_BOOST}}})
        shoulds.append({"term": {"syn_key": {"value": key, "boost": SYNONYM_KEY_BOOST}}})
    canonical = variants[-1]
    if len(canonical) > 1:
        every_word = {"bool": {"must": [{"bool": {"should": [{"term": {f: t}} for f in LABEL_FIELDS]}}
                                        for t in dict.fromkeys(canonical)]}}
        shoulds.append({"constant_score": {"filter": every_word, "boost": COVERAGE_BOOST}})
    return {"bool": {"should": shoulds}}


def stored_fields(source: dict[str, Any]) -> dict[str, list[Any]]:
    """A term's ``_source`` in the shape of stored fields (each a list), so that hits are built by the one function
    both engines use (``search.text.term_search.term_hit``)."""
    fields = {k: v if isinstance(v, list) else [v] for k, v in source.items() if k not in ("ids", "key", "syn_key")}
    fields["obsolete"] = ["1" if source.get("obsolete") else "0"]
    return fields
