"""Ontology terms on the cluster: the term document, the alias of an ontology and the search body, written from the
shared definition in :mod:`search.text.term_search` (the embedded engine's ``terms`` module writes the same definition
as tantivy queries), so both engines rank terms alike.

The requests themselves (write a version, swap the alias, search) are ``TermIndexes``, mixed into ``ClusterEngine``
as ``Browse`` and ``Snapshots`` are: one version of an ontology's index per write, one atomic alias swap.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from search.core.errors import FlysiftError, InvalidRequest
from search.core.models import Term, TermHit
from search.core.names import PATTERNS
from search.engines.cluster.bulk import Bulk
from search.engines.cluster.mappings import new_version, term_mapping
from search.engines.cluster.transport import ClusterRequestError
from search.text.analysis import normalise, query_variants
from search.text.term_search import (
    COVERAGE_BOOST,
    FIELD_BOOSTS,
    LABEL_FIELDS,
    NAME_KEY_BOOST,
    SYNONYM_FIELDS,
    SYNONYM_KEY_BOOST,
    TIE,
    engine_score,
    id_query,
    term_hit,
    variant_keys,
)

if TYPE_CHECKING:
    from search.engines.cluster.transport import Transport

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


class TermIndexes:
    """Ontology term indexes (``<prefix>-terms-<ontology>``), written and searched as ``search.text.term_search``
    defines them (as ``search.engines.embedded.terms`` does): mixed into ``ClusterEngine``, which provides requests,
    aliases and index settings."""

    t: Transport
    prefix: str
    chunk_bytes: int
    max_retries: int
    backoff_s: float

    if TYPE_CHECKING:
        def _request(self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None,
                     what: str | None = None, ndjson: bool = False) -> Any: ...
        def _alias_targets(self, alias: str) -> list[str]: ...
        def _index_settings(self) -> dict[str, Any]: ...

    def write_terms(self, ontology: str, terms: Iterable[Term]) -> int:
        """Replace the ontology's term index: a new version, then one atomic alias swap, then the old one dropped."""
        alias = term_alias(self.prefix, ontology)
        index = f"{alias}-{new_version()}"
        self._request("PUT", f"/{index}", {"settings": {**self._index_settings(), "refresh_interval": "-1"},
                                           "mappings": term_mapping()}, what=f"creating {index}")
        bulk = Bulk(self.t, self.chunk_bytes, self.max_retries, self.backoff_s)
        n = 0
        try:
            for term in terms:
                bulk.add_group(term.id, [(index, term.id, term_document(term))])
                n += 1
            bulk.flush()
            if bulk.failures:
                f = bulk.failures[0]
                raise FlysiftError(f"{len(bulk.failures)} terms of {ontology} were refused; first: {f.pmcid} "
                                   f"field {f.field}: {f.reason}", code="mapping_conflict", status=409,
                                   details={"field": f.field, "term": f.pmcid})
            self._request("PUT", f"/{index}/_settings", {"index": {"refresh_interval": None}})
            self._request("POST", f"/{index}/_refresh")
        except BaseException:
            self.t.request("DELETE", f"/{index}")
            raise
        old = self._alias_targets(alias)
        self._request("POST", "/_aliases", {"actions": [*({"remove": {"index": i, "alias": alias}} for i in old),
                                                        {"add": {"index": index, "alias": alias}}]})
        if old:
            self._request("DELETE", "/" + ",".join(old))
        return n

    def _term_counts(self) -> dict[str, int]:
        res = self._request("GET", f"/{self.prefix}-terms-*/_stats/docs", params={"allow_no_indices": "true"})
        aliases = self._request("GET", f"/_alias/{self.prefix}-terms-*", params={"allow_no_indices": "true"}) \
            if res.get("indices") else {}
        counts = {}
        for index, info in aliases.items():
            for alias in info.get("aliases", {}):
                counts[alias[len(self.prefix) + 7:]] = res["indices"][index]["primaries"]["docs"]["count"]
        return dict(sorted(counts.items()))

    def search_terms(self, ontology: str, query: str, *, aspect: str | None = None, limit: int = 10,
                     exclude_ids: set[str] | frozenset[str] = frozenset(),
                     include_obsolete: bool = False) -> list[TermHit]:
        alias = term_alias(self.prefix, ontology)
        body, tokens = search_body(query, aspect=aspect, limit=limit, exclude_ids=exclude_ids,
                                              include_obsolete=include_obsolete)
        if body is None:
            return []
        res = self._term_request(ontology, f"/{alias}/_search", body)
        return [term_hit(ontology, stored_fields(h["_source"]), h["_score"], tokens)
                for h in res["hits"]["hits"]]

    def term_candidates(self, ontology: str, queries: Sequence[tuple[str, int]], *, aspect: str | None = None,
                        exclude_ids: set[str] | frozenset[str] = frozenset(),
                        include_obsolete: bool = False) -> list[list[tuple[str, float]]]:
        """The queries in one ``_msearch`` (ids and scores only)."""
        alias = term_alias(self.prefix, ontology)
        bodies = [search_body(q, aspect=aspect, limit=limit, exclude_ids=exclude_ids,
                                         include_obsolete=include_obsolete)[0] for q, limit in queries]
        sent = [b for b in bodies if b is not None]
        if not sent:
            return [[] for _ in bodies]
        ndjson = "".join(f"{{}}\n{json.dumps({**b, '_source': ['id']})}\n" for b in sent)
        answers = iter(self._term_request(ontology, f"/{alias}/_msearch", ndjson, ndjson=True)["responses"])
        out = []
        for b in bodies:
            res = next(answers) if b is not None else {"hits": {"hits": []}}
            if "error" in res:
                raise self._term_error(ontology, ClusterRequestError(res.get("status", 500), res, "searching terms"))
            out.append([(h["_source"]["id"], engine_score(h["_score"])) for h in res["hits"]["hits"]])
        return out

    def term_hits(self, ontology: str, ids: Sequence[str], tokens: Iterable[str] = ()) -> list[TermHit]:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        alias = term_alias(self.prefix, ontology)
        res = self._term_request(ontology, f"/{alias}/_search", {"query": {"terms": {"id": wanted}},
                                                                  "size": len(wanted)})
        toks = set(tokens)
        by_id = {h.id: h for h in (term_hit(ontology, stored_fields(x["_source"]), 0.0, toks)
                                   for x in res["hits"]["hits"])}
        return [by_id[i] for i in wanted if i in by_id]

    def _term_request(self, ontology: str, path: str, body: Any, ndjson: bool = False) -> Any:
        try:
            return self.t.request("POST", path, body, ndjson=ndjson, what="searching terms")
        except ClusterRequestError as e:
            raise self._term_error(ontology, e) from None

    def _term_error(self, ontology: str, e: ClusterRequestError) -> FlysiftError:
        if e.error_type == "index_not_found_exception":
            return InvalidRequest(f"no term index for ontology {ontology!r} on the cluster",
                                  details={"valid": sorted(self._term_counts())})
        return e
