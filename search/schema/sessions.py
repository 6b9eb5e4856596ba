"""Sessions on the wire: what creating one takes, what a session is, a trace event, a submission, coverage, and the
bodies of the session routes. The rules that act on them are ``search.sessions`` (policy, service, stores)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from search.core.inputs import bounded_stored
from search.core.models import Gene
from search.schema.flyaoc import ValidationReport
from search.schema.hidden import HiddenSpec

SynonymPolicy = Literal["none", "snapshot", "registered", "full"]
BudgetPolicy = Literal["distinct", "flyaoc"]
MAX_PAPERS = 1000
MAX_NAME_CHARS = 200
MAX_GENE_REF_CHARS = 200
MAX_HIDDEN_IDS = 10_000
MAX_TERM_ID_CHARS = 64
#: names one registration may carry
MAX_NAMES = 1_000


class HiddenTerms(HiddenSpec):
    """Hidden terms as a request gives them: the stored :class:`HiddenSpec`, with bounds on what may be sent."""

    ids: list[Annotated[str, StringConstraints(min_length=3, max_length=MAX_TERM_ID_CHARS)]] = Field(
        default_factory=list, max_length=MAX_HIDDEN_IDS, description="Term ids, e.g. GO:0005634")


class SessionCreate(BaseModel):
    """Body of POST /v1/sessions."""

    model_config = ConfigDict(extra="forbid")

    gene: str = Field(min_length=1, max_length=MAX_GENE_REF_CHARS,
                      description="FlyBase id (FBgn…) or current symbol (case-sensitive)")
    team: str | None = Field(None, max_length=64, description="With auth on, the key's team (may be omitted); with "
                                                              "auth off, any label (default 'local')")
    max_papers: int = Field(16, ge=1, le=MAX_PAPERS, description="Reading budget")
    budget_policy: BudgetPolicy = Field("distinct", description="distinct: one unit per distinct paper; "
                                                                "flyaoc: one unit per get_paper_text call")
    synonym_policy: SynonymPolicy = "snapshot"
    hidden_terms: HiddenTerms | None = None
    label: str | None = Field(None, max_length=200, description="Free text, e.g. the harness and run name")


class Session(BaseModel):
    id: str
    team: str
    gene: Gene
    max_papers: int
    budget_policy: BudgetPolicy = "distinct"
    synonym_policy: SynonymPolicy = "snapshot"
    hidden_terms: HiddenSpec | None = None
    label: str | None = None
    status: Literal["open", "closed"] = "open"
    created_at: float
    closed_at: float | None = None
    budget_used: int = 0
    papers_read: list[str] = Field(default_factory=list, description="Distinct pmcids read, in first-read order")
    registered_names: list[str] = Field(default_factory=list)
    submissions: int = 0

    @property
    def budget_left(self) -> int:
        return max(0, self.max_papers - self.budget_used)


M = TypeVar("M", bound=BaseModel)


def _from_stored(cls: type[M], raw: str | bytes, unreadable: dict[str, Any]) -> M:
    """A stored record, read even when an older version stored what the fast parser refuses (e.g. a body nested 200
    deep): such values are cut (``search.core.inputs.bounded``); a record no parser can read becomes ``unreadable``."""
    try:
        return cls.model_validate_json(raw)
    except ValidationError:
        pass
    data = bounded_stored(raw)
    if isinstance(data, dict):
        try:
            return cls.model_validate(data)
        except ValidationError:
            pass
    seq = re.match(rb'\{"seq":(\d{1,18})[,}]', raw if isinstance(raw, bytes) else raw.encode("utf-8", "replace"))
    return cls.model_validate({**unreadable, "seq": int(seq.group(1)) if seq else 0})


class TraceEvent(BaseModel):
    seq: int = 0
    time: float
    tool: str
    method: str = ""
    path: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)
    returned_ids: list[str] = Field(default_factory=list)
    latency_ms: float
    status: int
    error: dict[str, Any] | None = None

    @classmethod
    def from_stored(cls, raw: str | bytes) -> TraceEvent:
        return _from_stored(cls, raw, {"time": 0.0, "tool": "(unreadable)", "latency_ms": 0.0, "status": 0,
                                       "error": {"code": "unreadable_record", "message": "This event was stored "
                                                 "in a form that cannot be read back."}})


class Submission(BaseModel):
    seq: int = 0
    time: float
    annotations: dict[str, Any]
    report: dict[str, Any]
    valid: bool

    @classmethod
    def from_stored(cls, raw: str | bytes) -> Submission:
        return _from_stored(cls, raw, {"time": 0.0, "annotations": {}, "valid": False,
                                       "report": {"errors": ["This submission was stored in a form that cannot be "
                                                             "read back."]}})


class Coverage(BaseModel):
    gene: str
    cited: list[str]
    read: list[str]
    surfaced_not_read: list[str]
    never_surfaced: list[str]
    read_fraction: float = Field(description="Cited papers read / cited papers (0 when none are cited)")
    surfaced_fraction: float = Field(description="Cited papers read or surfaced by search / cited papers")
    source: str = Field(description="Where the cited list came from: request or ground_truth")


# ---- route bodies -----------------------------------------------------------------------------------------------

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
