"""What the embedded engine answers beyond a page of hits: facet counts, exports of every hit, paper heads, document
frequencies (more-like-this) and the list of collections. ``EmbeddedEngine`` inherits these methods (its own module
holds builds, layout and search); the cluster engine's ``browse`` module answers the same questions the same way.

* facets: ``year`` from tantivy's terms aggregation over the ``year`` fast field; ``section`` as one count per
  section type (papers: the types of their body sections; passages: their own), the query restricted to each;
* exports: one search for the addresses of the first ``limit`` hits (a score and an address each), then the stored
  documents one at a time, so memory holds the addresses, not the hits;
* heads: the title, year, journal and ids of papers by pmcid (passage hits carry no title).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import tantivy

from search.core.models import ABSTRACT, SECTION_TYPES, ConceptMention, PaperHit, PassageHit
from search.core.names import is_valid
from search.core.query import EngineQuery
from search.engines.embedded.concepts import ConceptStore, ConceptWriter, concepts_missing
from search.engines.embedded.match import any_of
from search.engines.embedded.prepare import PaperHead

if TYPE_CHECKING:
    from search.engines.embedded.compile import Compiler

Kind = Literal["papers", "passages"]
#: facets one search may ask for
FACETS = ("year", "section")
MAX_YEARS = 10_000


def collection_names(data_dir: Path) -> list[str]:
    """Collections of a data directory that have a published build (a ``CURRENT``), by name."""
    root = Path(data_dir) / "collections"
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if is_valid("collection", d.name) and (d / "CURRENT").is_file())


class Browse:
    """Mixed into ``EmbeddedEngine``, which provides the reader of the published build and its query compiler."""

    collection: str

    if TYPE_CHECKING:
        def _read(self) -> Any: ...   # the engine's reader of the published build
        def _compiler(self, r: Any, kind: Kind, source: str | None = None) -> Compiler: ...

    def facets(self, kind: Kind, query: EngineQuery, names: Iterable[str]) -> dict[str, dict[str, int]]:
        """How many matching papers (passages) have each year and each section type; types without any are left
        out, years in order."""
        r = self._read()
        compiler = self._compiler(r, kind, query.filters.source)
        searcher = r.paper_searcher if kind == "papers" else r.passage_searcher
        schema = r.paper_schema if kind == "papers" else r.passage_schema
        q = compiler.query(query)
        out: dict[str, dict[str, int]] = {}
        for name in dict.fromkeys(names):
            if name == "year":
                agg = searcher.aggregate(q, {"year": {"terms": {"field": "year", "size": MAX_YEARS}}})
                buckets = agg.get("year", {}).get("buckets", [])
                out["year"] = {str(b["key"]): int(b["doc_count"]) for b in sorted(buckets, key=lambda b: b["key"])}
            elif name == "section":
                types = SECTION_TYPES if kind == "papers" else (ABSTRACT, *SECTION_TYPES)
                counts: dict[str, int] = {}
                for st in types:
                    scoped = tantivy.Query.boolean_query([
                        (tantivy.Occur.Must, q),
                        (tantivy.Occur.Must, tantivy.Query.const_score_query(
                            any_of(schema, compiler.section_field, [st]), 0.0))])
                    n = searcher.search(scoped, 1, count=True).count
                    if n:
                        counts[st] = int(n)
                out["section"] = counts
        return out

    def _export(self, kind: Kind, query: EngineQuery, limit: int) -> Iterator[tuple[float, Any, Any]]:
        r = self._read()
        searcher = r.paper_searcher if kind == "papers" else r.passage_searcher
        n = min(limit, searcher.num_docs)
        if n <= 0:
            return
        res = searcher.search(self._compiler(r, kind, query.filters.source).query(query), n, count=False)
        for score, addr in res.hits:
            yield score, r, searcher.doc(addr)

    def export_papers(self, query: EngineQuery, limit: int = 10_000) -> Iterator[PaperHit]:
        """The first ``limit`` matching papers, best first (no snippets), read one at a time."""
        for score, _, doc in self._export("papers", query, limit):
            p = PaperHead.model_validate_json(doc["head"][0])
            yield PaperHit(pmcid=doc["pmcid"][0], title=p.title, abstract=p.abstract[:500], year=p.year,
                           journal=p.journal, score=score, pmid=p.pmid, doi=p.doi)

    def export_passages(self, query: EngineQuery, limit: int = 10_000) -> Iterator[PassageHit]:
        for score, r, doc in self._export("passages", query, limit):
            data = r.passage_data(doc["doc"][0])
            yield PassageHit.model_validate({**data, "passage_id": data.get("id"), "score": score})

    def paper_heads(self, pmcids: Iterable[str]) -> dict[str, PaperHit]:
        """Title, year, journal and ids of these papers (unknown ones left out), score 0."""
        r = self._read()
        out: dict[str, PaperHit] = {}
        for pmcid in dict.fromkeys(pmcids):
            hits = r.paper_searcher.search(tantivy.Query.term_query(r.paper_schema, "pmcid", pmcid), 1).hits
            if hits:
                p = PaperHead.model_validate_json(r.paper_searcher.doc(hits[0][1])["head"][0])
                out[pmcid] = PaperHit(pmcid=pmcid, title=p.title, abstract=p.abstract[:500], year=p.year,
                                      journal=p.journal, score=0.0, pmid=p.pmid, doi=p.doi)
        return out

    def doc_freqs(self, tokens: Iterable[str]) -> tuple[int, dict[str, int]]:
        """How many papers there are, and how many hold each word-view token."""
        r = self._read()
        field = "text_w" if r.paper_fields else "body_w"
        return r.paper_searcher.num_docs, {t: r.paper_searcher.doc_freq(field, t) for t in dict.fromkeys(tokens)}

    # ---- concepts (``search.engines.embedded.concepts``) ---------------------------------------------------------
    def _concepts(self, r: Any) -> ConceptStore:
        store = r.concept_store()
        if store is None:
            raise concepts_missing(self.collection)
        return store

    def open_concepts(self, resume: bool = True) -> tuple[ConceptWriter, str]:
        """A writer of the published build's concept index, and that build's id."""
        r = self._read()
        return ConceptWriter(r.path, resume=resume), r.build

    def concepts_info(self) -> dict[str, Any] | None:
        """What the published build's concept index holds (None: it has none)."""
        store = self._read().concept_store()
        return store.info() if store is not None else None

    def paper_concepts(self, pmcid: str) -> list[ConceptMention]:
        """Every concept mention of a paper, in text order."""
        return self._concepts(self._read()).of_paper(pmcid)

    def concept_counts(self, kind: Kind, term_ids: Sequence[str]) -> dict[str, int]:
        return self._concepts(self._read()).counts(kind, term_ids)

    def _with_mentions(self, r: Any, kind: Kind, hits: Sequence[PaperHit] | Sequence[PassageHit],
                       query: EngineQuery) -> None:
        """Each hit's mentions of the query's ``term:`` concepts."""
        ids = query.concepts()
        if not ids or not hits:
            return
        keys = [h.pmcid if isinstance(h, PaperHit) else h.passage_id for h in hits]
        found = self._concepts(r).mentions(kind, keys, ids)
        hit: Any
        for hit, k in zip(hits, keys, strict=True):
            hit.mentions = found.get(k, [])
