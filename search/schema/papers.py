"""Paper and passage search requests and collection build bodies (the answers are ``search.core.models``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from search.core.models import Paper, Section
from search.core.names import COLLECTION_PATTERN, DEFAULT_COLLECTION
from search.core.query import Filters
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
