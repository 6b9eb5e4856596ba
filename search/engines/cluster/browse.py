"""What the cluster engine answers beyond a page of hits, as the embedded engine's ``browse`` module does: facet counts,
paper heads, document frequencies (more-like-this) and the list of collections. ``ClusterEngine`` inherits these
methods; exports page with ``search_after`` in the engine itself.

* facets: one ``size: 0`` search with a ``terms`` aggregation on ``year`` and one on the section field, the query
  as the search compiles it;
* document frequencies: one ``filters`` aggregation of ``term`` queries on the papers' one text field (exact on any
  number of shards, unlike the term-vector statistics of one shard);
* collections: the aliases ``<prefix>-papers`` (``default``) and ``<prefix>-<name>-papers``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from search.core.errors import FlysiftError
from search.core.models import ConceptMention, PaperHit, PassageHit
from search.core.names import DEFAULT_COLLECTION, is_valid
from search.core.query import EngineQuery
from search.engines.cluster.concepts import ConceptIndex, ConceptWriter, concepts_missing
from search.engines.cluster.query import PASSAGE_FIELDS, compile_query

if TYPE_CHECKING:
    from search.engines.cluster.transport import Transport

Kind = Literal["papers", "passages"]
MAX_YEARS = 10_000
MAX_SECTIONS = 64


def collection_names(t: Transport, prefix: str) -> list[str]:
    """Collections with a published papers index under ``prefix``, by name."""
    from search.engines.cluster.transport import ClusterRequestError

    try:
        aliases = t.request("GET", f"/_alias/{prefix}-*papers", what="listing collections")
    except ClusterRequestError as e:
        if e.http_status == 404:
            return []
        raise
    names = set()
    for info in aliases.values():
        for alias in info.get("aliases", {}):
            if alias == f"{prefix}-papers":
                names.add(DEFAULT_COLLECTION)
            elif alias.startswith(prefix + "-") and alias.endswith("-papers"):
                name = alias[len(prefix) + 1:-len("-papers")]
                if is_valid("collection", name) and not name.startswith("terms-"):
                    names.add(name)
    return sorted(names)


class Browse:
    """Mixed into ``ClusterEngine``, which provides requests, aliases and the published layout."""

    collection: str

    if TYPE_CHECKING:
        def _request(self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None,
                     what: str | None = None, ndjson: bool = False) -> Any: ...
        def alias(self, kind: str) -> str: ...
        def _paper_fields(self, source: str | None = None) -> dict[str, float]: ...
        def _fielded(self) -> bool: ...
        def _live_index(self, kind: str) -> str: ...
        def _alias_targets(self, alias: str) -> list[str]: ...

    def _compiled(self, kind: Kind, query: EngineQuery) -> dict[str, Any]:
        if kind == "papers":
            return compile_query(query, self._paper_fields(query.filters.source), "section_types",
                                 paper_fields=self._fielded(), concepts=self._concepts_of("papers"))
        return compile_query(query, PASSAGE_FIELDS, "section_type", kind="passages",
                             concepts=self._concepts_of("passages"))

    # ---- concepts (``search.engines.cluster.concepts``) ----------------------------------------------------------
    def _concepts_of(self, kind: Kind) -> Callable[[list[str]], dict[str, int]]:
        """What ``term:`` compiles with: the documents mentioning terms, read when a query has one."""
        return lambda ids: self._concept_index().counts(kind, ids)

    def _concept_index(self) -> ConceptIndex:
        """The published concept index, when it belongs to the published papers index."""
        alias = self.alias("concepts")
        version = self._live_index("papers").rsplit("-papers-", 1)[1]
        targets = self._alias_targets(alias)
        if not targets:
            raise concepts_missing(self.collection)
        if targets != [f"{alias}-{version}"]:
            raise concepts_missing(self.collection, "was re-indexed since its concept index was made")
        return ConceptIndex(self._request, alias, self.collection)

    def open_concepts(self, resume: bool = True) -> tuple[ConceptWriter, str]:
        """A writer of the concept index of the published papers index, and that build's version."""
        version = self._live_index("papers").rsplit("-papers-", 1)[1]
        index = f"{self.alias('concepts')}-{version}"

        def bulk(ndjson: str) -> None:
            res = self._request("POST", f"/{index}/_bulk", ndjson, ndjson=True, what="writing concepts")
            if res.get("errors"):
                bad: Any = next((i for i in res.get("items", []) if next(iter(i.values())).get("error")), {})
                raise FlysiftError(f"the cluster refused concept documents: {str(bad)[:300]}", code="storage_error",
                                   status=500)

        return ConceptWriter(self._request, bulk, index, self.alias("concepts"), resume, self._alias_targets), version

    def concepts_info(self) -> dict[str, Any] | None:
        try:
            idx = self._concept_index()
        except FlysiftError as e:
            if e.code == "concepts_missing":
                return None
            raise
        res: dict[str, Any] = self._request("GET", f"/{idx.alias}/_mapping", what="reading the concept index")
        mapping: dict[str, Any] = next(iter(res.values()), {})
        return dict(mapping.get("mappings", {}).get("_meta") or {})

    def paper_concepts(self, pmcid: str) -> list[ConceptMention]:
        """Every concept mention of a paper, in text order."""
        return self._concept_index().of_paper(pmcid)

    def concept_counts(self, kind: Kind, term_ids: Sequence[str]) -> dict[str, int]:
        return self._concept_index().counts(kind, term_ids)

    def _with_mentions(self, kind: Kind, hits: Sequence[PaperHit] | Sequence[PassageHit], query: EngineQuery) -> None:
        ids = query.concepts()
        if not ids or not hits:
            return
        keys = [h.pmcid if isinstance(h, PaperHit) else h.passage_id for h in hits]
        found = self._concept_index().mentions(kind, keys, ids)
        hit: Any
        for hit, k in zip(hits, keys, strict=True):
            hit.mentions = found.get(k, [])

    def facets(self, kind: Kind, query: EngineQuery, names: Iterable[str]) -> dict[str, dict[str, int]]:
        """How many matching papers (passages) have each year and each section type, as the embedded engine
        counts them."""
        section_field = "section_types" if kind == "papers" else "section_type"
        aggs: dict[str, Any] = {}
        wanted = list(dict.fromkeys(names))
        if "year" in wanted:
            aggs["year"] = {"terms": {"field": "year", "size": MAX_YEARS}}
        if "section" in wanted:
            aggs["section"] = {"terms": {"field": section_field, "size": MAX_SECTIONS}}
        if not aggs:
            return {}
        res = self._request("POST", f"/{self.alias(kind)}/_search",
                            {"query": self._compiled(kind, query), "size": 0, "aggs": aggs, "track_total_hits": False},
                            what=f"counting {kind} by {', '.join(aggs)}")
        out: dict[str, dict[str, int]] = {}
        for name in wanted:
            buckets = res.get("aggregations", {}).get(name, {}).get("buckets", [])
            if name == "year":
                out["year"] = {str(b["key"]): int(b["doc_count"]) for b in sorted(buckets, key=lambda b: b["key"])}
            elif name == "section":
                from search.core.models import ABSTRACT, SECTION_TYPES

                order = {t: i for i, t in enumerate((ABSTRACT, *SECTION_TYPES))}
                found = {str(b["key"]): int(b["doc_count"]) for b in buckets if b["doc_count"]}
                out["section"] = dict(sorted(found.items(), key=lambda kv: order.get(kv[0], len(order))))
        return out

    def paper_heads(self, pmcids: Iterable[str]) -> dict[str, PaperHit]:
        """Title, year, journal and ids of these papers (unknown ones left out), score 0."""
        wanted = list(dict.fromkeys(pmcids))
        if not wanted:
            return {}
        res = self._request("POST", f"/{self.alias('papers')}/_search", {
            "query": {"terms": {"pmcid": wanted}}, "size": len(wanted),
            "_source": ["pmcid", "title", "abstract", "year", "journal", "pmid", "doi"]}, what="reading paper heads")
        out = {}
        for h in res["hits"]["hits"]:
            s = h["_source"]
            out[s["pmcid"]] = PaperHit(pmcid=s["pmcid"], title=s.get("title", ""), abstract=s.get("abstract", "")[:500],
                                       year=s.get("year"), journal=s.get("journal"), score=0.0, pmid=s.get("pmid"),
                                       doi=s.get("doi"))
        return out

    def doc_freqs(self, tokens: Iterable[str]) -> tuple[int, dict[str, int]]:
        """How many papers there are, and how many hold each word-view token (the one ``text`` field; ``body`` in
        an index from before it)."""
        wanted = list(dict.fromkeys(tokens))
        field = "text" if "text" in self._paper_fields() else "body"
        body: dict[str, Any] = {"size": 0, "track_total_hits": True, "query": {"match_all": {}}}
        if wanted:
            body["aggs"] = {"df": {"filters": {"filters": {t: {"term": {field: t}} for t in wanted}}}}
        res = self._request("POST", f"/{self.alias('papers')}/_search", body, what="counting document frequencies")
        buckets = res.get("aggregations", {}).get("df", {}).get("buckets", {})
        return (int(res["hits"]["total"]["value"]),
                {t: int(buckets.get(t, {}).get("doc_count", 0)) for t in wanted})
