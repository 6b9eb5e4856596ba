"""The API's own request and response models: what only the REST API sends or answers. What a route answers
as is stays with its concept (papers and hits in ``search.core.models``, sessions in ``search.sessions.models``,
terms in ``search.ontology.service``, the submission report in ``search.flyaoc.validation``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from search.core.models import Paper, Section
from search.core.names import COLLECTION_PATTERN
from search.core.query import Filters
from search.flyaoc.validation import ValidationReport
from search.sessions.models import MAX_GENE_REF_CHARS, MAX_NAME_CHARS, Session, Submission, TraceEvent

#: papers one build request may carry (the body is also bounded in bytes: ``FLYSIFT_MAX_BODY_BYTES``)
MAX_BUILD_PAPERS = 10_000
#: names one registration may carry
MAX_NAMES = 1_000


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(description='Words, gene symbols (case-sensitive: Dl ≠ dl) and "quoted phrases"')
    limit: int = Field(10, description="Page size, at most 100")
    offset: int = 0
    filters: Filters | None = None
    snippets: bool | None = Field(None, description="Highlighted snippets (default: off for papers, on for passages)")
    collection: str = Field("default", pattern=f"^(?:{COLLECTION_PATTERN})$")
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


# ---- sessions ---------------------------------------------------------------------------------------------------

class SessionList(BaseModel):
    sessions: list[Session]
    limit: int
    offset: int


class NamesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    names: list[Annotated[str, StringConstraints(max_length=MAX_NAME_CHARS)]] = Field(
        max_length=MAX_NAMES, description="Gene names the agent found (e.g. historical symbols); they expand "
                                          "searches under the 'registered' synonym policy")


class NamesResponse(BaseModel):
    session_id: str
    registered_names: list[str]


class TraceResponse(BaseModel):
    session_id: str
    events: list[TraceEvent]


class SubmissionResponse(ValidationReport):
    session_id: str
    submission_seq: int


class SubmissionList(BaseModel):
    session_id: str
    submissions: list[Submission]


# ---- errors -----------------------------------------------------------------------------------------------------

class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="Stable machine-readable code, e.g. invalid_request, not_found, budget_exhausted")
    message: str = Field(description="What went wrong and what to do about it, for a person or an agent")
    details: dict[str, Any] = Field(description="Structured context: the field, the valid values, the limits")


class ErrorResponse(BaseModel):
    """The one error shape of every non-2xx answer (``search.api.app`` writes it, ``search.api.openapi`` declares
    it)."""

    model_config = ConfigDict(extra="forbid")

    error: ErrorBody
