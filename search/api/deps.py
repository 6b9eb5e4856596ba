"""What routes depend on: the caller (auth, rate limit), the session of a request (``X-Session-Id``), the store and
the lexicon; and the middleware that records every call made within a session as a trace event.

Other routers use ``current_session`` to read the session of a request, e.g. term search:
``session: Session | None = Depends(current_session)`` then ``hidden_ids_for(session, ontology)``.
"""

from __future__ import annotations

import json
import time
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import anyio
from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from search.sessions.keys import LOCAL, Principal, RateLimiter, Unauthorized, key_id_of, verify
from search.core.errors import FlysiftError, NotFound
from search.text.lexicon import Lexicon
from search.core.inputs import bounded
from search.sessions.models import Session, TraceEvent, check_session_id
from search.sessions.store import SessionStore, session_not_found

#: paths anyone may call, even with auth on
PUBLIC_PATHS = frozenset({"/v1/health"})
#: keys of response objects whose values are recorded as a trace event's returned ids
ID_KEYS = ("pmcid", "passage_id", "go_id", "fbbt_id", "fbdv_id", "term_id")
MAX_RETURNED_IDS = 500
MAX_CAPTURE_BYTES = 4_000_000
SESSION_HEADER = "X-Session-Id"
SESSION_HEADER_DOC = ("The session this call belongs to: the call is traced there, a read spends its budget, its "
                      "hidden terms and synonym policy apply; an unknown or another team's session is 404")
#: rate-limit bucket prefix for failed authentications of one key id
FAILED_BUCKET = "failed:"

_bearer = HTTPBearer(auto_error=False,
                     description="An API key from `flysift admin create-key` (when FLYSIFT_AUTH=true)")


def store(request: Request) -> SessionStore:
    return request.app.state.store


def lexicon(request: Request) -> Lexicon:
    lex: Lexicon = request.app.state.lexicon()
    if not len(lex):
        raise NotFound("No gene lexicon is loaded: set FLYSIFT_LEXICON to fb_synonym_*.tsv, genes.csv or "
                       "ground_truth_*.jsonl files (comma-separated), or put lexicon.tsv in the data directory.",
                       code="lexicon_missing")
    return lex


def load_lexicon(spec: str | None, data_dir: Path):
    """A loader for ``app.state.lexicon``: the configured sources, else ``<data_dir>/lexicon.tsv[.gz]``, loaded once."""
    @lru_cache(maxsize=1)
    def _load() -> Lexicon:
        if spec:
            return Lexicon.load(p.strip() for p in spec.split(",") if p.strip())
        for name in ("lexicon.tsv", "lexicon.tsv.gz"):
            if (data_dir / name).exists():
                return Lexicon.load([data_dir / name])
        return Lexicon()

    return _load


def principal(request: Request, creds: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> Principal:
    """The caller. With auth off everyone is the ``local`` team with every scope."""
    if not request.app.state.settings.auth or request.url.path in PUBLIC_PATHS:
        p = LOCAL
    else:
        if creds is None:
            raise Unauthorized("Missing API key: send 'Authorization: Bearer fsk_…' (keys come from "
                               "`flysift admin create-key`).")
        key = creds.credentials
        key_id = key_id_of(key)
        limiter: RateLimiter = request.app.state.limiter
        try:
            p = verify(key, store(request).get_key(key_id))
        except Unauthorized:
            # wrong secrets for a key id are limited in their own bucket, so they cannot lock the key's owner out
            limiter.hit(FAILED_BUCKET + key_id)
            raise
        limiter.hit(p.key_id or "")
    request.state.principal = p
    return p


def require_admin(p: Principal = Depends(principal)) -> Principal:
    p.require("admin")
    return p


def owned_session(request: Request, session_id: str, p: Principal) -> Session:
    """The session if the caller's team owns it (any session with auth off); another team's id is a 404."""
    s = store(request).get_session(check_session_id(session_id))
    if s is None or (request.app.state.settings.auth and s.team != p.team):
        raise session_not_found(session_id)
    return s


def trace_into(request: Request, session: Session) -> None:
    """Ask the trace middleware to record this call in ``session``."""
    request.state.trace_session = session.id


def current_session(request: Request, p: Principal = Depends(principal),
                    sid: str | None = Header(None, alias=SESSION_HEADER, description=SESSION_HEADER_DOC)
                    ) -> Session | None:
    """The session named by the ``X-Session-Id`` header (None without it); the call is traced in it. Declared as a
    parameter so that every operation that reads it says so in the OpenAPI document."""
    if not sid:
        return None
    s = owned_session(request, sid, p)
    trace_into(request, s)
    return s


# ---- tracing ----------------------------------------------------------------------------------------------------

def returned_ids(body: Any) -> list[str]:
    """Ids in a JSON response (pmcids, passage and term ids), in order of appearance, without repeats."""
    out: dict[str, None] = {}

    def walk(v: Any) -> None:
        if len(out) >= MAX_RETURNED_IDS:
            return
        if isinstance(v, dict):
            for k, x in v.items():
                if k in ID_KEYS and isinstance(x, str):
                    out[x] = None
                else:
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(body)
    return list(out)[:MAX_RETURNED_IDS]


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        return None


class TraceMiddleware:
    """Records each call whose route marked it (``trace_into``): tool (the route's function name), arguments (path
    and query parameters, JSON body), returned ids, latency, status and error. The event is stored before the last
    byte of the response is sent, so a client that reads its trace right after a call sees that call."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        started = time.time()
        body_in: list[bytes] = []
        body_out: list[bytes] = []
        status = {"code": 0}

        async def recv():
            msg = await receive()
            if msg["type"] == "http.request":
                body_in.append(msg.get("body", b""))
            return msg

        async def record() -> None:
            sid = scope.get("state", {}).get("trace_session")
            if not sid:
                return
            endpoint = scope.get("endpoint")
            args: dict[str, Any] = dict(scope.get("path_params") or {})
            query: dict[str, list[str]] = {}
            for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True):
                query.setdefault(k, []).append(v)
            args.update({k: v[0] if len(v) == 1 else v for k, v in query.items()})
            body = _json(b"".join(body_in))
            if body is not None:
                args["body"] = body
            out = _json(b"".join(body_out))
            error = out.get("error") if status["code"] >= 400 and isinstance(out, dict) else None
            if status["code"] >= 400 and error is None:
                error = {"code": "http_error", "message": f"HTTP {status['code']}"}
            ev = TraceEvent(time=started, tool=getattr(endpoint, "__name__", scope.get("path", "")),
                            method=scope.get("method", ""), path=scope.get("path", ""), arguments=bounded(args),
                            returned_ids=[] if error else returned_ids(out),
                            latency_ms=round((time.perf_counter() - t0) * 1000, 3), status=status["code"], error=error)
            st: SessionStore = scope["app"].state.store
            charge = scope.get("state", {}).get("read_charge")  # a read's unit is spent with its answer's record
            try:
                if charge is None:
                    await anyio.to_thread.run_sync(st.append_trace, sid, ev)
                else:
                    await anyio.to_thread.run_sync(st.commit_read, sid, charge, ev, status["code"] < 500)
            except FlysiftError:  # the session vanished meanwhile: nothing to record into
                pass

        async def snd(msg):
            if msg["type"] == "http.response.start":
                status["code"] = msg["status"]
            elif msg["type"] == "http.response.body":
                if sum(map(len, body_out)) < MAX_CAPTURE_BYTES:
                    body_out.append(msg.get("body", b""))
                if not msg.get("more_body", False):
                    await record()
            await send(msg)

        try:
            await self.app(scope, recv, snd)
        except Exception:
            if status["code"] == 0:
                status["code"] = 500
                await record()
            raise
