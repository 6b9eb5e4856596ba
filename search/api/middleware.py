"""The trace middleware: every call a route marked (``search.api.deps.trace_into``) becomes a trace event of its
session, stored through ``SessionService.record`` before the last byte of the response is sent, so a client that
reads its trace right after a call sees that call, and a read's unit is spent with that record.

Only calls that can be traced pay for it: a request with an ``X-Session-Id`` header, or a write under
``/v1/sessions/<id>/`` (names and submissions name their session in the path; reading a session, its trace or its
coverage is not traced). Every other request passes straight through, with no wrapper around its body or its
answer."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import parse_qsl

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from search.api.guard import PARSED_BODY
from search.core.inputs import bounded
from search.schema.sessions import TraceEvent
from search.sessions.service import SessionService

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
        t0 = time.perf_counter()
        started = time.time()
        body_in: list[bytes] = []
        body_out: list[bytes] = []
        status = {"code": 0}

        async def recv() -> Message:
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
            raw = b"".join(body_in)  # what the route read; the guard's parse of those bytes when it made one
            body = scope[PARSED_BODY] if raw and PARSED_BODY in scope else _json(raw)
            if body is not None:
                args["body"] = body
            out = _json(b"".join(body_out))
            error = out.get("error") if status["code"] >= 400 and isinstance(out, dict) else None
            if status["code"] >= 400 and error is None:
                error = {"code": "http_error", "message": f"HTTP {status['code']}"}
            ev = TraceEvent(time=started, tool=str(getattr(endpoint, "__name__", scope.get("path", ""))),
                            method=scope.get("method", ""), path=scope.get("path", ""), arguments=bounded(args),
                            returned_ids=[] if error else returned_ids(out),
                            latency_ms=round((time.perf_counter() - t0) * 1000, 3), status=status["code"], error=error)
            sessions: SessionService = scope["app"].state.sessions
            charge = scope.get("state", {}).get("read_charge")  # a read's unit is spent with its answer's record
            await anyio.to_thread.run_sync(sessions.record, sid, ev, charge)

        async def snd(msg: Message) -> None:
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
