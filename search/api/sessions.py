"""Session endpoints: create, get, list, close; register names; trace; coverage; submission. Each is one call of
``SessionService`` (``search.sessions.service``).

A session is used by sending its id in the ``X-Session-Id`` header with search and read calls (the MCP adapter does
this). Submissions and name registrations name the session in the path and are traced in it.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response

from search.api.deps import Caller, Sessions, trace_into
from search.api.fast import lean
from search.api.respond import answer
from search.core.inputs import INT64_MAX
from search.schema.sessions import (
    Coverage,
    NamesRequest,
    NamesResponse,
    Session,
    SessionCreate,
    SessionList,
    SubmissionList,
    SubmissionResponse,
    TraceResponse,
)
from search.sessions.service import SessionService

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])

#: a session lists at most this far: offset + limit stays within a cluster's default result window (10,000)
MAX_LIST_OFFSET = 9_000


@router.post("", response_model=Session, status_code=201)
def create_session(body: SessionCreate, sessions: Sessions, p: Caller) -> Session:
    """Start an agent run for one gene, with a reading budget, a synonym policy and hidden terms."""
    return sessions.create(body, p)


@router.get("", response_model=SessionList)
def list_sessions(sessions: Sessions, p: Caller,
                  team: Annotated[str | None, Query(description="With auth off: whose sessions (default "
                                                                "'local')")] = None,
                  limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                  offset: Annotated[int, Query(ge=0, le=MAX_LIST_OFFSET)] = 0) -> SessionList:
    """The caller's team's sessions, newest first."""
    return SessionList(sessions=sessions.list_sessions(p, team, limit, offset), limit=limit, offset=offset)


@router.get("/{session_id}", response_model=Session)
@lean
async def get_session(session_id: str, request: Request, p: Caller) -> Response:
    """The session: its settings, budget used, papers read, registered names (one hop, not re-validated)."""
    sessions: SessionService = request.app.state.sessions
    return await answer(lambda: sessions.get(session_id, p))


@router.post("/{session_id}/close", response_model=Session)
def close_session(session_id: str, sessions: Sessions, p: Caller) -> Session:
    """End the run: later reads, names and submissions are refused; trace and coverage stay readable."""
    return sessions.close(sessions.get(session_id, p))


@router.post("/{session_id}/names", response_model=NamesResponse)
def register_names(session_id: str, body: NamesRequest, request: Request, sessions: Sessions,
                   p: Caller) -> NamesResponse:
    """Register names of the session's gene found while reading; searches with gene= use them under the
    'registered' policy."""
    s = sessions.get(session_id, p)
    trace_into(request, s)
    return NamesResponse(session_id=session_id, registered_names=sessions.register_names(s, body.names))


@router.get("/{session_id}/trace", response_model=TraceResponse)
def get_trace(session_id: str, sessions: Sessions, p: Caller,
              after: Annotated[int, Query(ge=0, le=INT64_MAX, description="Only events with a larger sequence "
                                                                          "number")] = 0,
              limit: Annotated[int, Query(ge=1, le=10_000)] = 1000) -> TraceResponse:
    """Every call made within the session, in order."""
    return TraceResponse(session_id=session_id, events=sessions.trace(sessions.get(session_id, p), after, limit))


@router.get("/{session_id}/coverage", response_model=Coverage)
def get_coverage(session_id: str, sessions: Sessions, p: Caller,
                 pmcids: Annotated[list[str] | None, Query(description="Curator-cited pmcids (repeat or "
                                                                       "comma-separate); default: the gene's cited "
                                                                       "papers in the loaded FlyAOC ground truth")
                                   ] = None) -> Coverage:
    """Of the curator-cited papers: the fraction read, those search surfaced but the agent did not read, and those
    it never saw."""
    return sessions.coverage(sessions.get(session_id, p), pmcids)


@router.post("/{session_id}/submission", response_model=SubmissionResponse)
def submit(session_id: str, request: Request, sessions: Sessions, p: Caller,
           annotations: Annotated[dict[str, Any], Body(description="A FlyAOC prediction object (spec §3.1)")]
           ) -> SubmissionResponse:
    """Validate and store a FlyAOC prediction (``submit_annotations``). Hidden ids are errors (give a free-text
    ``description`` instead); unknown and obsolete ids, caps and evidence from unread papers are warnings."""
    s = sessions.get(session_id, p)
    trace_into(request, s)
    report, seq = sessions.submit(s, annotations)
    return SubmissionResponse(**report.model_dump(), session_id=session_id, submission_seq=seq)


@router.get("/{session_id}/submission", response_model=SubmissionList)
def get_submissions(session_id: str, sessions: Sessions, p: Caller) -> SubmissionList:
    """Every submission of the session in order; the run's output is the last valid one."""
    return SubmissionList(session_id=session_id, submissions=sessions.submissions(sessions.get(session_id, p)))
