"""Paper and passage search requests and collection build bodies (the answers are ``search.core.models``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from search.core.models import CollectionInfo, Paper, Section
from search.core.names import COLLECTION_PATTERN, DEFAULT_COLLECTION, TREC_NAME
from search.core.query import Filters, HighlightSpec
from search.schema.sessions import MAX_GENE_REF_CHARS

#: papers one build request may carry (the body is also bounded in bytes: ``FLYSIFT_MAX_BODY_BYTES``)
MAX_BUILD_PAPERS = 10_000


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(description='Words, gene symbols (case-sensitive: Dl ≠ dl) and "quoted phrases"')
    limit: int = Field(10, description="Page size, at most 100")
    offset: int = 0
    filters: Filters | None = None
    snippets: bool | None = Field(None, description="Highlighted snippets (default: off for papers, on for passages)")
    collection: str = Field(DEFAULT_COLLECTION, pattern=f"^(?:{COLLECTION_PATTERN})$")
    gene: str | None = Field(None, min_length=1, max_length=MAX_GENE_REF_CHARS,
                             description="Expand the query with this gene's names (FlyBase id or symbol), per the "
                                         "session's synonym policy")
    mode: Literal["bm25", "dense", "hybrid"] = Field(
        "bm25", description="bm25 (default); dense: passage embeddings (needs the collection's dense index, else 409 "
                            "dense_unavailable); hybrid: reciprocal-rank fusion of both. Echoed as query.mode")
    explain: bool = Field(False, description="Add query.explain: how the planner read each token (symbol or word "
                                             "view, or dropped as a stop word, and why), the gene-name expansions and "
                                             "the BM25 parameters (k1, b, field weights)")
    syntax: Literal["query", "plain"] | None = Field(
        None, description='query: the query language (+must -not AND OR NOT (…) "phrases" title: abstract: gene: '
                          "year:2005..2010 section:results pmcid:; a syntax error is 422 query_syntax with its "
                          "position); plain: words and phrases only, every other character as text. Default: plain "
                          "within a session (agents), query otherwise (docs/search.md)")
    highlight: bool | HighlightSpec | None = Field(
        None, description="Fragments with the matched words tagged, per field (hit.highlight): true for the defaults "
                          "(<em>…</em>, 150 characters, 3 fragments) or the settings")
    facets: list[Literal["year", "section"]] | None = Field(
        None, max_length=2, description="Count all matching documents by year and/or section (answer.facets)")
    format: Literal["csv", "tsv", "ris", "bibtex", "jsonl", "trec"] | None = Field(
        None, description="Export instead of a page of JSON: every hit (up to max_hits, or limit when given), "
                          "streamed; also asked for by Accept (text/csv, text/tab-separated-values, "
                          "application/x-research-info-systems, application/x-bibtex, application/x-ndjson)")
    max_hits: int | None = Field(None, ge=1, description="The most hits an export streams (default and most: "
                                                         "FLYSIFT_MAX_EXPORT_HITS)")
    trec_qid: str = Field("1", pattern=f"^{TREC_NAME.pattern}$", description="Topic id of a TREC run export")
    run_tag: str = Field("flysift", pattern=f"^{TREC_NAME.pattern}$", description="Run tag of a TREC run export")
    titles: bool = Field(False, description="Passage search: each hit carries its paper's title")

    def highlight_spec(self) -> HighlightSpec | None:
        if isinstance(self.highlight, HighlightSpec):
            return self.highlight
        return HighlightSpec() if self.highlight else None


class CollectionList(BaseModel):
    engine: str
    collections: list[CollectionInfo]


class SectionIn(Section):
    model_config = ConfigDict(extra="forbid")


class PaperIn(Paper):
    """A paper as a build request sends it: unknown keys (``abstarct``) are refused, not dropped."""

    model_config = ConfigDict(extra="forbid")

    sections: list[SectionIn] = Field(default_factory=list)  # type: ignore[assignment]  # stricter on purpose
    #: supplementary files come from indexing article packages (``flysift index corpus``), never from a request
    supplements: list[Any] = Field(default_factory=list, max_length=0,
                                   description="Not accepted here: index JATS packages to add supplementary files")


class BuildPapers(BaseModel):
    model_config = ConfigDict(extra="forbid")

    papers: list[PaperIn] = Field(max_length=MAX_BUILD_PAPERS)
