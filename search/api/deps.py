"""What routes depend on, as ``Annotated`` aliases: the caller (auth, rate limit), the session of a request
(``X-Session-Id``) and the services on ``app.state``. A route names what it needs in its signature, e.g. term search:
``session: CurrentSession`` then ``hidden_ids_for(session, ontology)``.

Every dependency here is ``async``: FastAPI runs a plain ``def`` dependency on the thread pool, one hand-off each, so
only what blocks leaves the event loop, and only when it has to: the key lookup of an authenticated call and the
session lookup of a call with ``X-Session-Id`` (``blocking``). A call without auth and without a session costs no
hand-off before its route; the routes run their own blocking work in one hop (``search.api.respond``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request
from fastapi.security.utils import get_authorization_scheme_param
from starlette.concurrency import run_in_threadpool as blocking

from search.retrieval.service import SearchService
from search.schema.sessions import Session
from search.sessions.keys import LOCAL, Principal, RateLimiter, Unauthorized, key_id_of, verify
from search.sessions.service import SessionService

#: paths anyone may call, even with auth on
PUBLIC_PATHS = frozenset({"/v1/health"})
SESSION_HEADER = "X-Session-Id"
SESSION_HEADER_DOC = ("The session this call belongs to: the call is traced there, a read spends its budget, its "
                      "hidden terms and synonym policy apply; an unknown or another team's session is 404")
#: rate-limit bucket prefix for failed authentications of one key id
FAILED_BUCKET = "failed:"

#: how the OpenAPI document declares the key (``search.api.openapi``); ``principal`` reads the header itself, so that
#: a call without auth solves no security dependency
BEARER_SCHEME = {"type": "http", "scheme": "bearer",
                 "description": "An API key from `flysift admin create-key` (when FLYSIFT_AUTH=true)"}


def bearer_key(request: Request) -> str | None:
    """The credentials of ``Authorization: Bearer <key>`` (scheme case-insensitive), else None."""
    scheme, credentials = get_authorization_scheme_param(request.headers.get("Authorization"))
    return credentials if scheme and credentials and scheme.lower() == "bearer" else None


async def session_service(request: Request) -> SessionService:
    return request.app.state.sessions


async def search_service(request: Request) -> SearchService:
    return request.app.state.search


Sessions = Annotated[SessionService, Depends(session_service)]
Search = Annotated[SearchService, Depends(search_service)]


async def principal(request: Request) -> Principal:
    """The caller. With auth off everyone is the ``local`` team with every scope (no store access, no hand-off);
    with auth on the key's record is read in one hop. The rate limit is per worker process (``RateLimiter``)."""
    if not request.app.state.settings.auth or request.url.path in PUBLIC_PATHS:
        p = LOCAL
    else:
        key = bearer_key(request)
        if key is None:
            raise Unauthorized("Missing API key: send 'Authorization: Bearer fsk_…' (keys come from "
                               "`flysift admin create-key`).")
        key_id = key_id_of(key)
        limiter: RateLimiter = request.app.state.limiter
        sessions: SessionService = request.app.state.sessions
        try:
            p = verify(key, await blocking(sessions.api_key, key_id))
        except Unauthorized:
            # wrong secrets for a key id are limited in their own bucket, so they cannot lock the key's owner out
            limiter.hit(FAILED_BUCKET + key_id)
            raise
        limiter.hit(p.key_id or "")
    request.state.principal = p
    return p


Caller = Annotated[Principal, Depends(principal)]


async def require_admin(p: Caller) -> Principal:
    p.require("admin")
    return p


def trace_into(request: Request, session: Session) -> None:
    """Ask the trace middleware (``search.api.middleware``) to record this call in ``session``."""
    request.state.trace_session = session.id


async def current_session(request: Request, caller: Caller,
                          sid: Annotated[str | None, Header(alias=SESSION_HEADER,
                                                            description=SESSION_HEADER_DOC)] = None
                          ) -> Session | None:
    """The session named by the ``X-Session-Id`` header (None without it, at no cost); the call is traced in it.
    Declared as a parameter so that every operation that reads it says so in the OpenAPI document."""
    if not sid:
        return None
    sessions: SessionService = request.app.state.sessions
    s = await blocking(sessions.get, sid, caller)
    trace_into(request, s)
    return s


CurrentSession = Annotated[Session | None, Depends(current_session)]
