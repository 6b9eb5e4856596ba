"""Sessions, the shapes: what a session is, what creating one takes, what a read costs, a trace event, a submission,
coverage, and the errors of the session rules (``search.sessions.policy`` holds the rules themselves,
``search.sessions.service`` runs them against a store).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from search.core.errors import FlysiftError, InvalidRequest, NotFound
from search.core.inputs import bounded_stored, quoted
from search.core.models import Gene
from search.ontology.hidden import HiddenSpec

SynonymPolicy = Literal["none", "snapshot", "registered", "full"]
BudgetPolicy = Literal["distinct", "flyaoc"]
MAX_PAPERS = 1000
MAX_NAME_CHARS = 200
MAX_GENE_REF_CHARS = 200
MAX_HIDDEN_IDS = 10_000
MAX_TERM_ID_CHARS = 64
#: what ``new_session_id`` makes (old stores hold the same shape); anything else is refused before a lookup
SESSION_ID = re.compile(r"ses_[A-Za-z0-9_-]{1,64}")
#: how long a reserved unit is held for an answer being recorded; a killed process's reservations lapse after it
RESERVATION_TTL_S = 60.0


class BudgetExhausted(FlysiftError):
    status = 409
    code = "budget_exhausted"

    def __init__(self, used: int, max_papers: int):
        super().__init__(f"Paper limit reached ({used}/{max_papers}). Submit your annotations.",
                         details={"used": used, "max_papers": max_papers})


class SupplementsOff(FlysiftError):
    """Supplementary files are outside FlyAOC parity: a ``flyaoc`` budget session neither lists nor reads them (and
    its searches see the articles only)."""

    status = 409
    code = "supplements_off"

    def __init__(self, session_id: str):
        super().__init__(f"Session {session_id} follows FlyAOC's rules (budget_policy flyaoc), which have no "
                         "supplementary files; create a session with budget_policy distinct to read them.",
                         details={"budget_policy": "flyaoc"})


class SessionClosed(FlysiftError):
    status = 409
    code = "session_closed"

    def __init__(self, session_id: str):
        super().__init__(f"Session {session_id} is closed; create a new session to continue.",
                         details={"session_id": session_id})


class Conflict(FlysiftError):
    status = 409
    code = "conflict"


def session_not_found(session_id: str) -> NotFound:
    return NotFound(f"Session {session_id} not found; create one with POST /v1/sessions and pass its id in the "
                    "X-Session-Id header.", code="session_not_found", details={"session_id": session_id})


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


class ReadCharge(BaseModel):
    """What one read costs: ``charged`` is false for a free re-read (or a continuation page). ``used`` counts the
    units spent and held by answers being recorded. ``token`` names the store's reservation until it is committed."""

    pmcid: str
    charged: bool
    used: int
    max_papers: int
    continuation: bool = False
    token: str | None = None
    seq: int | None = Field(None, description="The trace number reserved for the read's event (cluster store)")


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


@dataclass(frozen=True)
class Reservation:
    """A unit held for an answer being recorded (``unit`` 0: the read is free, or shares a paper's pending unit)."""

    token: str
    pmcid: str
    unit: int
    expires_at: float


def new_session_id() -> str:
    return "ses_" + secrets.token_urlsafe(12)


def check_session_id(session_id: str) -> str:
    """``session_id`` if it is shaped like one (:data:`SESSION_ID`), else 422: ids are looked up, never guessed at."""
    if not SESSION_ID.fullmatch(session_id):
        raise InvalidRequest(f"Invalid session id {quoted(session_id)}: session ids look like ses_… as "
                             "POST /v1/sessions returns them.", details={"field": "session_id",
                                                                         "pattern": SESSION_ID.pattern})
    return session_id
