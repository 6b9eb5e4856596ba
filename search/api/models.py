"""The API's own request and response models: what only the REST API sends or answers. What a route answers
as is stays with its concept (papers and hits in ``search.core.models``, sessions in ``search.sessions.models``,
terms in ``search.ontology.service``, the submission report in ``search.flyaoc.validation``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from search.core.models import Paper, Section
from search.core.names import COLLECTION_PATTERN, ONTOLOGY_PATTERN
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


# ---- term recognition ---------------------------------------------------------------------------------------------

#: bounds of one recognition request: texts, characters per text and in all (the body limit is larger)
MAX_RECOGNISE_TEXTS = 2000
MAX_RECOGNISE_TEXT_CHARS = 200_000
MAX_RECOGNISE_CHARS = 2_000_000
MAX_RECOGNISE_ONTOLOGIES = 8


class RecogniseRequest(BaseModel):
    """Texts of one document (its paragraphs: abbreviations one of them defines count in all) and which terms to
    recognise in them."""

    model_config = ConfigDict(extra="forbid")

    texts: list[Annotated[str, StringConstraints(max_length=MAX_RECOGNISE_TEXT_CHARS)]] = Field(
        max_length=MAX_RECOGNISE_TEXTS, description=f"The document's texts (at most {MAX_RECOGNISE_TEXTS}, "
                                                    f"{MAX_RECOGNISE_CHARS:,} characters in all)")
    ontologies: list[Annotated[str, StringConstraints(pattern=f"^(?:{ONTOLOGY_PATTERN})$")]] | None = Field(
        None, max_length=MAX_RECOGNISE_ONTOLOGIES, description="Ontologies to recognise, in the order that decides "
        "between same-named terms (default: every indexed one)")
    task: Literal["go", "expression"] | None = Field(
        None, description="Instead of ontologies, the order a curation task needs: go (GO, FBbt, FBdv) or "
                          "expression (FBbt, FBdv, GO): a label a GO and an FBbt term share is the GO term for the GO "
                          "task and the FBbt term for expression; mentions of every indexed ontology are reported")
    molecular_function: Literal["activity", "all"] = Field(
        "activity", description="activity: a GO molecular function only where its sentence states an activity "
                                "(\"has kinase activity\", \"binds DNA\", \"DNA binding\"); all: every match")


class RecognisedMention(BaseModel):
    term_id: str
    ontology: str
    name: str
    aspect: str | None = None
    depth: int = 0
    start: int = Field(description="Offset of the mention in its text")
    end: int
    text: str = Field(description="The text matched")
    via: Literal["name", "synonym", "abbreviation"] = Field(
        description="What matched: the term's name, one of its synonyms, or an abbreviation the document defines")
    inflected: bool = Field(False, description="A word matched through its word form (nuclear → nucleus)")
    sentence_start: int = Field(description="Where the mention's sentence starts in its text")
    sentence_end: int


class RecogniseResponse(BaseModel):
    ontologies: list[str] = Field(description="The ontologies recognised, in their order")
    mentions: list[list[RecognisedMention]] = Field(description="Per text, its mentions in text order")


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
