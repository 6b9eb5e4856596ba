"""Session endpoints: create, get, list, close; register names; trace; coverage; submission.

A session is used by sending its id in the ``X-Session-Id`` header with search and read calls (the MCP adapter does
this). Submissions and name registrations name the session in the path and are traced in it.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from search.api.deps import lexicon, owned_session, principal, store, trace_into
from search.sessions.keys import Forbidden, Principal, check_team_name
from search.core.errors import InvalidRequest, PayloadTooLarge
from search.core.inputs import INT64_MAX
from search.sessions.models import (MAX_NAME_CHARS, Coverage, Session, SessionCreate, Submission, TraceEvent, cited_pmcids,
                             clean_names, coverage, hidden_ids_for, new_session)
from search.flyaoc.validation import ValidationReport, lookup_in, validate_output

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])

#: a session lists at most this far: offset + limit stays within a cluster's default result window (10,000)
MAX_LIST_OFFSET = 9_000
MAX_NAMES = 1_000
#: a FlyAOC prediction object is a few KB; this bounds what one submission stores (twice: submission and trace)
MAX_SUBMISSION_BYTES = 1_000_000


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


@router.post("", response_model=Session, status_code=201)
def create_session(body: SessionCreate, request: Request, p: Principal = Depends(principal)) -> Session:
    """Start an agent run for one gene, with a reading budget, a synonym policy and hidden terms."""
    if request.app.state.settings.auth:
        if body.team not in (None, p.team):
            raise Forbidden(f"This key belongs to team {p.team!r}; it cannot create sessions for {body.team!r}.",
                            details={"team": p.team})
        team = p.team
    else:
        team = check_team_name(body.team or p.team)
    gene = lexicon(request).resolve(body.gene)
    session = new_session(body, team, gene)
    hidden_ids_for(session)  # an unknown named set fails here, not at the first term search
    store(request).create_session(session)
    return session


@router.get("", response_model=SessionList)
def list_sessions(request: Request, p: Principal = Depends(principal),
                  team: str | None = Query(None, description="With auth off: whose sessions (default 'local')"),
                  limit: int = Query(100, ge=1, le=1000),
                  offset: int = Query(0, ge=0, le=MAX_LIST_OFFSET)) -> SessionList:
    """The caller's team's sessions, newest first."""
    who = p.team if request.app.state.settings.auth else check_team_name(team or p.team)
    return SessionList(sessions=store(request).list_sessions(who, limit, offset), limit=limit, offset=offset)


@router.get("/{session_id}", response_model=Session)
def get_session(session_id: str, request: Request, p: Principal = Depends(principal)) -> Session:
    return owned_session(request, session_id, p)


@router.post("/{session_id}/close", response_model=Session)
def close_session(session_id: str, request: Request, p: Principal = Depends(principal)) -> Session:
    """End the run: later reads, names and submissions are refused; trace and coverage stay readable."""
    owned_session(request, session_id, p)
    return store(request).close_session(session_id)


@router.post("/{session_id}/names", response_model=NamesResponse)
def register_names(session_id: str, body: NamesRequest, request: Request,
                   p: Principal = Depends(principal)) -> NamesResponse:
    """Register names of the session's gene found while reading; searches with gene= use them under the
    'registered' policy."""
    s = owned_session(request, session_id, p)
    trace_into(request, s)
    names = store(request).register_names(session_id, clean_names(body.names))
    return NamesResponse(session_id=session_id, registered_names=names)


@router.get("/{session_id}/trace", response_model=TraceResponse)
def get_trace(session_id: str, request: Request, p: Principal = Depends(principal),
              after: int = Query(0, ge=0, le=INT64_MAX, description="Only events with a larger sequence number"),
              limit: int = Query(1000, ge=1, le=10_000)) -> TraceResponse:
    """Every call made within the session, in order."""
    owned_session(request, session_id, p)
    return TraceResponse(session_id=session_id, events=store(request).trace(session_id, after, limit))


@router.get("/{session_id}/coverage", response_model=Coverage)
def get_coverage(session_id: str, request: Request, p: Principal = Depends(principal),
                 pmcids: list[str] | None = Query(None, description="Curator-cited pmcids (repeat or "
                                                                     "comma-separate); default: the gene's cited "
                                                                     "papers in the loaded FlyAOC ground truth")
                 ) -> Coverage:
    """Of the curator-cited papers: the fraction read, those search surfaced but the agent did not read, and those
    it never saw."""
    s = owned_session(request, session_id, p)
    if pmcids:
        cited, source = [x.strip() for v in pmcids for x in v.split(",") if x.strip()], "request"
    else:
        gt = request.app.state.settings.ground_truth
        if gt is None:
            raise InvalidRequest("No cited papers: pass pmcids=… or load a FlyAOC ground truth with "
                                 "FLYSIFT_GROUND_TRUTH.", details={"field": "pmcids"})
        cited, source = _cited(request, gt).get(s.gene.id, []), "ground_truth"
    events = store(request).trace(session_id, 0, 1_000_000)
    return coverage(s, events, cited, source)


def _cited(request: Request, path) -> dict[str, list[str]]:
    cache = request.app.state.__dict__.setdefault("_cited", {})
    if path not in cache:
        cache[path] = cited_pmcids(path)
    return cache[path]


def _ontologies(request: Request) -> list[Any]:
    """The ontologies the term service has indexed (none: ids are checked for format only)."""
    terms = getattr(request.app.state, "terms", None)
    return [terms.ontology(n) for n in terms.names()] if terms is not None else []


@router.post("/{session_id}/submission", response_model=SubmissionResponse)
def submit(session_id: str, request: Request, p: Principal = Depends(principal),
           annotations: dict[str, Any] = Body(..., description="A FlyAOC prediction object (spec §3.1)")
           ) -> SubmissionResponse:
    """Validate and store a FlyAOC prediction (``submit_annotations``). Hidden ids are errors (give a free-text
    ``description`` instead); unknown and obsolete ids, caps and evidence from unread papers are warnings."""
    s = owned_session(request, session_id, p)
    trace_into(request, s)
    size = len(json.dumps(annotations, ensure_ascii=False).encode())
    if size > MAX_SUBMISSION_BYTES:
        raise PayloadTooLarge(f"The submission is {size:,} bytes; at most {MAX_SUBMISSION_BYTES:,} are stored.",
                              details={"field": "body", "max_bytes": MAX_SUBMISSION_BYTES})
    onts = _ontologies(request)
    go = next((o for o in onts if getattr(o, "name", "") == "go"), None)
    report = validate_output(annotations, lookup=lookup_in(onts) if onts else None,
                             hidden=hidden_ids_for(s, go), read_pmcids=set(s.papers_read), gene_id=s.gene.id)
    seq = store(request).add_submission(session_id, Submission(time=time.time(), annotations=annotations,
                                                               report=report.model_dump(), valid=report.valid))
    return SubmissionResponse(**report.model_dump(), session_id=session_id, submission_seq=seq)


@router.get("/{session_id}/submission", response_model=SubmissionList)
def get_submissions(session_id: str, request: Request, p: Principal = Depends(principal)) -> SubmissionList:
    """Every submission of the session in order; the run's output is the last valid one."""
    owned_session(request, session_id, p)
    return SubmissionList(session_id=session_id, submissions=store(request).submissions(session_id))
