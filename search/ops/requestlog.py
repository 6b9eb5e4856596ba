"""Request ids, the access log and the service's log format.

``OpsMiddleware`` is the outermost layer of the app: for every HTTP request, whatever route (or none) answers it, it
picks the request id (the caller's ``X-Request-Id`` when it is a plain token of at most 64 characters, else a new
one), returns it in ``X-Request-Id`` (and ``search.api.guard.error_response`` puts it in every error body), records
the request's metrics (``search.ops.metrics``) and, with the access log on, writes one line:

    {"time": "...", "level": "INFO", "logger": "flysift.access", "request_id": "...", "method": "POST",
     "route": "/v1/papers/search", "path": "/v1/papers/search", "status": 200, "duration_ms": 3.1,
     "engine_ms": 1.2, "team": "lab1", "session": "ses_…", "bytes": 1843}

Never logged: headers (so no key and no cookie), query strings and bodies (what agents search for and submit).
``configure`` sets the format of the ``flysift`` loggers (JSON lines, or text) and where the access log goes.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import routing as fastapi_routing
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from search.core.request_context import CURRENT, RequestContext
from search.ops.metrics import Metrics
from search.sessions.models import SESSION_ID

#: where FastAPI (0.165) leaves the route a request took, with its router's prefix (``scope["route"]`` is the route
#: as declared, without it); absent in other versions, then ``scope["route"]`` is used
_FASTAPI_SCOPE_KEY = getattr(fastapi_routing, "_FASTAPI_SCOPE_KEY", None)
_EFFECTIVE_ROUTE_KEY = getattr(fastapi_routing, "_FASTAPI_EFFECTIVE_ROUTE_CONTEXT_KEY", None)
REQUEST_ID = re.compile(r"[A-Za-z0-9._:\-]{1,64}")
HEADER = b"x-request-id"
ACCESS = "flysift.access"
#: a path no route takes is logged cut to this many characters and labelled ``unmatched`` in metrics
MAX_PATH_CHARS = 200
_CONFIGURED = "_flysift_handler"


def new_request_id() -> str:
    return secrets.token_hex(8)


def request_id_of(scope: Scope) -> str:
    """The caller's ``X-Request-Id`` if it is a plain token (so it can be echoed and logged safely), else a new one."""
    for key, value in scope.get("headers", ()):
        if key == HEADER:
            text = value.decode("latin-1")
            return text if REQUEST_ID.fullmatch(text) else new_request_id()
    return new_request_id()


def route_of(scope: Scope) -> str:
    """The route template that answered (``/v1/papers/{pmcid}``, with the prefix of an included router), ``unmatched``
    when none did."""
    fastapi_scope = scope.get(_FASTAPI_SCOPE_KEY) if _FASTAPI_SCOPE_KEY else None
    effective = fastapi_scope.get(_EFFECTIVE_ROUTE_KEY) if isinstance(fastapi_scope, dict) else None
    for holder in (effective, scope.get("route")):
        path = getattr(holder, "path_format", None) or getattr(holder, "path", None)
        if isinstance(path, str):
            return path
    return "unmatched"


def _session_of(scope: Scope) -> str | None:
    state = scope.get("state") or {}
    sid = state.get("trace_session")
    if sid:
        return sid
    for key, value in scope.get("headers", ()):
        if key == b"x-session-id":
            text = value.decode("latin-1")
            return text if SESSION_ID.fullmatch(text) else None
    return None


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message or the record's ``fields``, the
    request id of the request being answered, and the traceback of an exception."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"time": datetime.fromtimestamp(record.created, UTC).isoformat(
            timespec="milliseconds").replace("+00:00", "Z"), "level": record.levelname, "logger": record.name}
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        else:
            out["message"] = record.getMessage()
            ctx = CURRENT.get()
            if ctx is not None:
                out["request_id"] = ctx.request_id
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """One line for people: time, level, logger and the message (an access line's fields as ``key=value``), with
    the request id of the request being answered, as in the JSON format. The record itself is left as it came (other
    handlers format it too)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            message = " ".join(f"{k}={v}" for k, v in fields.items() if v is not None and k != "time")
        else:
            message = record.getMessage()
            ctx = CURRENT.get()
            if ctx is not None:
                message = f"{message} request_id={ctx.request_id}"
        return super().format(logging.makeLogRecord({**record.__dict__, "msg": message, "args": ()}))


def configure(log_format: str = "json", level: str = "info", access_log: bool = False,
              access_log_file: Path | None = None, *, stream: Any = None, force: bool = False) -> None:
    """Give the ``flysift`` loggers one handler (stderr, or ``stream``) in ``log_format``, and the access log its
    own (``access_log_file``, else the same stream) when it is on. Leaves logging alone where someone else set it up
    (a root handler: a test runner, an embedding application) unless ``force``."""
    root = logging.getLogger("flysift")
    if not force and (logging.getLogger().handlers or getattr(root, _CONFIGURED, None)):
        return
    formatter: logging.Formatter = (JsonFormatter() if log_format == "json"
                                    else TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("flysift", ACCESS):
        logger = logging.getLogger(name)
        for h in [h for h in logger.handlers if getattr(h, _CONFIGURED, False)]:
            logger.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    setattr(handler, _CONFIGURED, True)
    root.addHandler(handler)
    root.setLevel(level.upper())
    root.propagate = False
    setattr(root, _CONFIGURED, True)
    access = logging.getLogger(ACCESS)
    access.setLevel(logging.INFO if access_log else logging.WARNING)
    if access_log and access_log_file is not None:
        file_handler = logging.FileHandler(access_log_file)
        file_handler.setFormatter(formatter)
        setattr(file_handler, _CONFIGURED, True)
        access.addHandler(file_handler)
        access.propagate = False
    else:
        access.propagate = True


class OpsMiddleware:
    """Request id, metrics and the access log for every HTTP request (see the module docstring)."""

    def __init__(self, app: ASGIApp, metrics: Metrics | None = None, access_log: bool = False):
        self.app = app
        self.metrics = metrics
        self.access_log = access_log
        self.log = logging.getLogger(ACCESS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        ctx = RequestContext(request_id_of(scope))
        if self.metrics is not None:
            ctx.on_engine.append(self.metrics.observe_engine)
        CURRENT.set(ctx)   # each request runs in its own task: nothing to reset
        t0 = time.perf_counter()
        answer = {"status": 0, "bytes": 0}
        rid = ctx.request_id.encode()

        async def snd(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                answer["status"] = msg["status"]
                headers = list(msg.get("headers", []))
                if not any(k.lower() == HEADER for k, _ in headers):
                    headers.append((b"x-request-id", rid))
                msg = {**msg, "headers": headers}
            elif msg["type"] == "http.response.body":
                answer["bytes"] += len(msg.get("body", b""))
            await send(msg)

        try:
            await self.app(scope, receive, snd)
        except BaseException:
            if not answer["status"]:
                answer["status"] = 500
                ctx.error_code = ctx.error_code or "internal_error"
            raise
        finally:
            self._record(scope, ctx, answer, time.perf_counter() - t0)

    def _record(self, scope: Scope, ctx: RequestContext, answer: dict[str, int], seconds: float) -> None:
        route = route_of(scope)
        state = scope.get("state") or {}
        principal = state.get("principal")
        team = getattr(principal, "team", None) or "-"
        charge = state.get("read_charge")
        status = answer["status"]
        if self.metrics is not None:
            self.metrics.observe_request(route, scope.get("method", ""), status, team, seconds, ctx.error_code,
                                         bool(getattr(charge, "charged", False)) and status < 400)
        if self.access_log and self.log.isEnabledFor(logging.INFO):
            path = scope.get("path", "")
            fields = {"time": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                      "request_id": ctx.request_id, "method": scope.get("method", ""), "route": route,
                      "path": path if len(path) <= MAX_PATH_CHARS else path[:MAX_PATH_CHARS] + "…",
                      "status": status, "duration_ms": round(seconds * 1000, 2),
                      "engine_ms": round(ctx.engine_s * 1000, 2), "team": team, "session": _session_of(scope),
                      "error": ctx.error_code, "bytes": answer["bytes"]}
            self.log.info("request", extra={"fields": fields})
