"""The trace middleware: every call a route marked (``search.api.deps.trace_into``) becomes a trace event of its
session, stored through ``SessionService.record`` before the last byte of the response is sent, so a client that
reads its trace right after a call sees that call, and a read's unit is spent with that record.

Only calls that can be traced pay for it: a request with an ``X-Session-Id`` header, or a write under
``/v1/sessions/<id>/`` (names and submissions name their session in the path; reading a session, its trace or its
coverage is not traced). Every other request passes straight through, with no wrapper around its body or its
answer.

A traced answer is held until its record is stored: the status line goes out only then. A record that cannot be
stored (a full disk: 507 ``storage_full``) replaces the answer with that error, so a client never gets a status
and a ``Content-Length`` followed by no body, and a read whose unit could not be spent is not answered."""

from __future__ import annotations

import json
import logging
import time
from typing import Any
from urllib.parse import parse_qsl

import anyio
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from search.api.guard import PARSED_BODY, error_response
from search.core.errors import FlysiftError
from search.core.inputs import bounded
from search.engines import storage_error
from search.schema.sessions import TraceEvent
from search.sessions.service import SessionService

log = logging.getLogger("flysift.api")

#: keys of response objects whose values are recorded as a trace event's returned ids
ID_KEYS = ("pmcid", "passage_id", "go_id", "fbbt_id", "fbdv_id", "term_id")
MAX_RETURNED_IDS = 500
MAX_CAPTURE_BYTES = 4_000_000
SESSION_HEADER = b"x-session-id"
#: routes that trace into the session of their path (``search.api.sessions``: names, submission; never a read)
SESSION_PATHS = "/v1/sessions/"
READS = frozenset({"GET", "HEAD"})


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


def traceable(scope: Scope) -> bool:
    """Whether a route of this request may mark it for tracing (``trace_into``)."""
    return any(k == SESSION_HEADER for k, _ in scope["headers"]) or (
        scope["path"].startswith(SESSION_PATHS) and scope.get("method") not in READS)


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        return None


class TraceMiddleware:
    """Records each call whose route marked it: tool (the route's function name), arguments (path and query
    parameters, JSON body), returned ids, latency, status and error; with the read charge a route held
    (``request.state.read_charge``), if any."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not traceable(scope):
            return await self.app(scope, receive, send)
        call = TracedCall(scope, receive, send)
        try:
            await self.app(scope, call.receive, call.send)
        except Exception:
            if call.status == 0:
                call.status = 500
                await call.record()
            raise


class TracedCall:
    """One traced request: the body the route read, the answer it gave (held until its record is stored), and
    the record."""

    def __init__(self, scope: Scope, receive: Receive, send: Send):
        self.scope, self._receive, self._send = scope, receive, send
        self.t0, self.started = time.perf_counter(), time.time()
        self.body_in: list[bytes] = []
        self.body_out: list[bytes] = []
        self.status = 0
        self.held: list[Message] = []   # the answer, sent once its record is stored

    async def receive(self) -> Message:
        msg = await self._receive()
        if msg["type"] == "http.request":
            self.body_in.append(msg.get("body", b""))
        return msg

    async def send(self, msg: Message) -> None:
        if msg["type"] == "http.response.start":
            self.status = msg["status"]
            self.held.append(msg)
            return
        if msg["type"] != "http.response.body":
            return await self._send(msg)
        if sum(map(len, self.body_out)) < MAX_CAPTURE_BYTES:
            self.body_out.append(msg.get("body", b""))
        self.held.append(msg)
        if msg.get("more_body", False):
            return
        try:
            await self.record()
        except Exception as exc:   # not recorded: answer the failure instead (storage: 507, else 500)
            return await _failure(self.scope, exc)(self.scope, self._receive, self._send)
        for m in self.held:
            await self._send(m)
        self.held.clear()

    async def record(self) -> None:
        scope = self.scope
        sid = scope.get("state", {}).get("trace_session")
        if not sid:
            return
        out = _json(b"".join(self.body_out))
        error = out.get("error") if self.status >= 400 and isinstance(out, dict) else None
        if self.status >= 400 and error is None:
            error = {"code": "http_error", "message": f"HTTP {self.status}"}
        ev = TraceEvent(time=self.started, tool=str(getattr(scope.get("endpoint"), "__name__", scope.get("path", ""))),
                        method=scope.get("method", ""), path=scope.get("path", ""),
                        arguments=bounded(self.arguments()), returned_ids=[] if error else returned_ids(out),
                        latency_ms=round((time.perf_counter() - self.t0) * 1000, 3), status=self.status,
                        error=error)
        sessions: SessionService = scope["app"].state.sessions
        charge = scope.get("state", {}).get("read_charge")  # a read's unit is spent with its answer's record
        await anyio.to_thread.run_sync(sessions.record, sid, ev, charge)

    def arguments(self) -> dict[str, Any]:
        """Path and query parameters (a repeated one as a list) and the JSON body."""
        scope = self.scope
        args: dict[str, Any] = dict(scope.get("path_params") or {})
        query: dict[str, list[str]] = {}
        for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True):
            query.setdefault(k, []).append(v)
        args.update({k: v[0] if len(v) == 1 else v for k, v in query.items()})
        raw = b"".join(self.body_in)  # what the route read; the guard's parse of those bytes when it made one
        body = scope[PARSED_BODY] if raw and PARSED_BODY in scope else _json(raw)
        if body is not None:
            args["body"] = body
        return args


def _failure(scope: Scope, exc: Exception) -> JSONResponse:
    """The answer for a call whose trace record could not be stored."""
    app = scope["app"]
    redact = getattr(app.state, "redact", None)
    err = exc if isinstance(exc, FlysiftError) else storage_error(exc, app.state.settings.data_dir)
    if err is None:
        log.exception("trace record failed", exc_info=exc)
        return error_response(500, "internal_error", f"Internal error ({type(exc).__name__}) while recording the "
                              "call in its session; the call was not counted. The service log has details.",
                              redact=redact)
    log.warning("trace record failed: [%s] %s", err.code, err.message)
    return error_response(err.status, err.code, err.message, err.details, err.headers, redact=redact)
