"""The boundary every request crosses before a route, the trace or the store sees it, and the one way errors are
written.

``InputGuard`` refuses, with the one error shape: a JSON body over its route's limit (413 ``body_too_large``:
``max_body_bytes`` for the build routes that carry papers, ``max_query_body_bytes`` for every other route) or with
more JSON values than the route allows (413, counted before parsing), a body that is not JSON (400
``invalid_json``), and JSON, query parameters or a path that break the bounds of ``search.core.inputs`` (422
``invalid_request``: too deep, NUL, lone surrogates, integers beyond int64...). Such a request never reaches a route,
so it is not traced in a session; it is answered in full. ``error_response`` writes every error answer and quotes at
most ``search.core.inputs.QUOTE_CHARS`` characters of any detail, so an error never echoes a huge input back.

No body can hold a worker for everyone else: with auth on, a request with a body is authenticated before the body
is read (a missing or malformed key costs nothing, an unknown one a key lookup), the work is bounded before parsing
(bytes and an upper bound on the number of values), and a body larger than :data:`INLINE_PARSE_BYTES` is parsed and
checked on a worker thread, not on the event loop. An unauthenticated 8 MB body of 4 million integers used to hold
``/v1/health`` for 12 s.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import anyio
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from search.api.deps import authenticate, key_shape
from search.core import request_context
from search.core.errors import FlysiftError, InvalidRequest, PayloadTooLarge
from search.core.inputs import BAD_TEXT, QUOTE_CHARS, clip, parse_json_body, text_problem

#: a JSON body larger than this is refused unless the settings say otherwise (``FLYSIFT_MAX_BODY_BYTES``)
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
#: every other route's body limit unless the settings say otherwise (``FLYSIFT_MAX_QUERY_BODY_BYTES``)
DEFAULT_MAX_QUERY_BODY_BYTES = 1024 * 1024
#: routes whose bodies may be larger than ``max_query_body_bytes``: papers of a build (``max_body_bytes``) and a
#: submission (a FlyAOC prediction is stored up to 1 MB: ``search.sessions.service.MAX_SUBMISSION_BYTES``)
BUILD_PAPERS = re.compile(r"/v1/collections/[^/]+/builds/[^/]+/papers")
SUBMISSION = re.compile(r"/v1/sessions/[^/]+/submission")
SUBMISSION_BODY_BYTES = 2 * 1024 * 1024
#: a document's texts for the term recogniser: up to 2,000,000 characters (``search.schema.terms``)
RECOGNISE = re.compile(r"/v1/terms/recognise")
RECOGNISE_BODY_BYTES = 4 * 1024 * 1024
#: JSON values a body may hold, by route kind: a build's 10,000 papers with their sections and paragraphs; a query,
#: a session, 1,000 names, 10,000 hidden ids or pmcid filters, a prediction
MAX_VALUES_BUILD = 2_000_000
MAX_VALUES = 100_000
#: paths whose callers authenticate with an API key (``search.api.deps``)
API_PREFIXES = ("/v1/", "/metrics")
#: bodies up to this size are parsed on the event loop (well under a millisecond); larger ones on a worker thread
INLINE_PARSE_BYTES = 64 * 1024
#: an error message longer than this keeps its head and tail (the input it quoted is what gets cut)
MAX_MESSAGE_CHARS = 600
MAX_DETAIL_ITEMS = 100
#: scope key under which the guard leaves the JSON value of a body it parsed and checked (``search.api.fast`` uses
#: it instead of parsing the body again)
PARSED_BODY = "flysift.json"


#: where absolute paths outside the configured roots usually start (``/v1/…`` routes in hints never do)
_SYSTEM_PATH = re.compile(r"(?<![\w.:/~-])/(?:tmp|home|root|var|srv|data|opt|usr|etc|mnt|media|work|run|private|Users"
                          r"|proc|sys|dev|nix|snap|lib|lib64|bin|sbin)(?:/[^\s'\"(),;:]*)?")


class PathRedactor:
    """Takes server paths out of what a client is answered: the data dir becomes ``<data_dir>`` (so a message still
    names ``<data_dir>/collections/default/CURRENT``), other configured or well-known roots ``<server>``, and any
    other absolute path keeps only its file name (``…/name``). Operators read the full paths in the service log."""

    def __init__(self, data_dir: Path | str | None = None, others: Iterable[Path | str | None] = ()):
        roots: list[tuple[str, str]] = []
        if data_dir is not None:
            roots += [(str(p), "<data_dir>") for p in _spellings(data_dir)]
        for other in [*others, os.getcwd(), sys.prefix, Path.home()]:
            if other:
                roots += [(str(p), "<server>") for p in _spellings(other)]
        # longest first: the data dir inside the working directory stays <data_dir>
        self.roots = sorted({r for r in roots if len(r[0]) > 1}, key=lambda r: -len(r[0]))

    def text(self, text: str) -> str:
        for root, label in self.roots:
            if root in text:
                text = text.replace(root, label)
        return _SYSTEM_PATH.sub(lambda m: "…/" + m.group().rstrip("/").rsplit("/", 1)[-1], text)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


def _spellings(path: Path | str) -> set[Path]:
    """A path as configured, made absolute and with links resolved (messages may carry any of them)."""
    p = Path(path)
    out = {p, p.absolute()}
    with contextlib.suppress(OSError):
        out.add(p.resolve())
    return {q for q in out if q.is_absolute()}


NO_REDACTION = PathRedactor()


def error_response(status: int, code: str, message: str, details: dict | None = None,
                   headers: dict | None = None, redact: PathRedactor | None = None) -> JSONResponse:
    """``{"error": {"code", "message", "details"}}`` with message and details bounded (and, with ``redact``, no
    server path in either)."""
    if redact is not None:
        message, details = redact.text(message), redact.value(details or {})
    error: dict[str, Any] = {"code": code, "message": _message(message), "details": _detail(details or {}, 4)}
    ctx = request_context.current()
    if ctx is not None:   # the id the service log and the access log carry for this request
        ctx.error_code = code
        error["request_id"] = ctx.request_id
        headers = {**(headers or {}), "X-Request-Id": ctx.request_id}
    return JSONResponse({"error": error}, status_code=status, headers=headers)


def flysift_response(exc: FlysiftError) -> JSONResponse:
    return error_response(exc.status, exc.code, exc.message, exc.details, exc.headers)


def _message(message: str) -> str:
    message = BAD_TEXT.sub("\ufffd", message)
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    cut = len(message) - 500
    return f"{message[:300]} …({cut:,} characters cut)… {message[-200:]}"


def _detail(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return BAD_TEXT.sub("\ufffd", clip(value, QUOTE_CHARS))
    if isinstance(value, dict):
        if depth <= 0:
            return "(cut)"
        return {_detail(str(k), 0): _detail(v, depth - 1) for k, v in list(value.items())[:MAX_DETAIL_ITEMS]}
    if isinstance(value, list | tuple):
        if depth <= 0:
            return "(cut)"
        return [_detail(v, depth - 1) for v in value[:MAX_DETAIL_ITEMS]]
    return value


def is_json(content_type: str | None) -> bool:
    """The content types FastAPI reads as JSON: ``application/json`` and ``application/*+json``."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def check_url(scope: Scope) -> None:
    """Query parameters and the path carry text only: no NUL (percent-decoding cannot make a lone surrogate)."""
    problem = text_problem(scope.get("path", ""))
    if problem:
        raise InvalidRequest(f"path: {problem}.", details={"field": "path"})
    raw = scope.get("query_string", b"").decode("latin-1")
    if not raw:
        return
    for key, value in parse_qsl(raw, keep_blank_values=True):
        problem = text_problem(key) or text_problem(value)
        if problem:
            field = f"query.{clip(key, 80)}"
            raise InvalidRequest(f"{field}: {problem}.", details={"field": field})


def body_limits(scope: Scope) -> tuple[int, int]:
    """The largest body (bytes) and the most JSON values the request's route takes."""
    settings = getattr(scope["app"].state, "settings", None)
    path = scope.get("path", "")
    small = getattr(settings, "max_query_body_bytes", DEFAULT_MAX_QUERY_BODY_BYTES)
    if BUILD_PAPERS.fullmatch(path):
        return getattr(settings, "max_body_bytes", DEFAULT_MAX_BODY_BYTES), MAX_VALUES_BUILD
    if SUBMISSION.fullmatch(path):
        return max(small, SUBMISSION_BODY_BYTES), MAX_VALUES
    if RECOGNISE.fullmatch(path):
        return max(small, RECOGNISE_BODY_BYTES), MAX_VALUES
    return small, MAX_VALUES


def most_values(body: bytes) -> int:
    """An upper bound on the number of JSON values in ``body``, without parsing it: a value is the first of its
    container or follows a comma (commas inside strings only raise the bound). ``bytes.count`` runs at memory speed."""
    return body.count(b",") + body.count(b"[") + body.count(b"{") + 1


class InputGuard:
    """ASGI middleware: authenticates a request with a body, reads the body once (bounded), checks it and the URL,
    and hands the same bytes on."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            check_url(scope)
            if not _has_body(scope):  # HTTP/1.1: no Content-Length and no Transfer-Encoding, no body to check
                return await self.app(scope, receive, send)
            await self._authenticate(scope)
            body = await self._read(scope, receive)
        except FlysiftError as e:
            return await flysift_response(e)(scope, receive, send)
        if body is None:  # the client went away before sending its body: nothing to answer
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _authenticate(scope: Scope) -> None:
        """With auth on, the caller of a request with a body, before the body is read: a missing or malformed key is
        refused at once; a key is looked up (and rate-limited) once, and ``search.api.deps.principal`` reuses it."""
        app = scope["app"]
        # API routes only: the workbench pages (search.web) sign in with a cookie and check it themselves
        if not hasattr(app.state, "settings") or not scope.get("path", "").startswith(API_PREFIXES):
            return
        authorization = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"authorization"),
                             None)
        if key_shape(app, authorization, scope.get("path", "")) is None:
            return
        scope.setdefault("state", {})["principal"] = await authenticate(app, authorization, scope.get("path", ""))

    @staticmethod
    async def _read(scope: Scope, receive: Receive) -> bytes | None:
        limit, max_values = body_limits(scope)
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        declared = headers.get(b"content-length", b"").strip()
        if declared.isdigit() and int(declared) > limit:
            raise _too_large(limit)
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":
                return None
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
            more = msg.get("more_body", False)
        body = b"".join(chunks)
        if body and is_json(headers.get(b"content-type", b"").decode("latin-1")):
            if (n := most_values(body)) > max_values:
                raise PayloadTooLarge(f"The body may hold up to {n:,} JSON values; this route takes at most "
                                      f"{max_values:,}: send less per request.",
                                      details={"field": "body", "max_values": max_values})
            if len(body) <= INLINE_PARSE_BYTES:
                scope[PARSED_BODY] = parse_json_body(body)
            else:
                scope[PARSED_BODY] = await anyio.to_thread.run_sync(parse_json_body, body)
        return body


def _has_body(scope: Scope) -> bool:
    """Whether the request announces a body (``Content-Length`` other than 0, or ``Transfer-Encoding``); a request
    with neither has none, so there is nothing to read, bound or check."""
    for key, value in scope.get("headers", ()):
        if key == b"transfer-encoding" or (key == b"content-length" and value.strip() not in (b"0", b"")):
            return True
    return False


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The body is larger than {limit:,} bytes, this route's limit; send less per request "
                           f"(collection builds: fewer papers per batch).",
                           details={"field": "body", "max_bytes": limit})
