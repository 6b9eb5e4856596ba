"""Sessions, the server-side shapes: what a read costs, a reserved unit, session ids, and the errors of the session
rules. The shapes a client sees (a session, a trace event, a submission, coverage) are ``search.schema.sessions``;
``search.sessions.policy`` holds the rules themselves, ``search.sessions.service`` runs them against a store.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from pydantic import BaseModel, Field

from search.core.errors import FlysiftError, InvalidRequest, NotFound
from search.core.inputs import quoted

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
