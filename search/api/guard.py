"""The boundary every request crosses before a route, the trace or the store sees it, and the one way errors are
written.

``InputGuard`` refuses, with the one error shape: a JSON body over ``max_body_bytes`` (413 ``body_too_large``), a body
that is not JSON (400 ``invalid_json``), and JSON, query parameters or a path that break the bounds of
``search.core.inputs`` (422 ``invalid_request``: too deep, NUL, lone surrogates, integers beyond int64...). Such a
request never reaches a route, so it is not traced in a session; it is answered in full. ``error_response`` writes
every error answer and quotes at most ``search.core.inputs.QUOTE_CHARS`` characters of any detail, so an error never
echoes a huge input back.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from search.core.errors import FlysiftError, InvalidRequest, PayloadTooLarge
from search.core.inputs import BAD_TEXT, QUOTE_CHARS, clip, parse_json_body, text_problem

#: a JSON body larger than this is refused unless the settings say otherwise (``FLYSIFT_MAX_BODY_BYTES``)
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
#: an error message longer than this keeps its head and tail (the input it quoted is what gets cut)
MAX_MESSAGE_CHARS = 600
MAX_DETAIL_ITEMS = 100
#: scope key under which the guard leaves the JSON value of a body it parsed and checked (``search.api.fast`` uses
#: it instead of parsing the body again)
PARSED_BODY = "flysift.json"


def error_response(status: int, code: str, message: str, details: dict | None = None,
                   headers: dict | None = None) -> JSONResponse:
    """``{"error": {"code", "message", "details"}}`` with message and details bounded."""
    body = {"error": {"code": code, "message": _message(message), "details": _detail(details or {}, 4)}}
    return JSONResponse(body, status_code=status, headers=headers)


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


class InputGuard:
    """ASGI middleware: reads the body once (bounded), checks it and the URL, and hands the same bytes on."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            check_url(scope)
            if not _has_body(scope):  # HTTP/1.1: no Content-Length and no Transfer-Encoding, no body to check
                return await self.app(scope, receive, send)
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
    async def _read(scope: Scope, receive: Receive) -> bytes | None:
        settings = getattr(scope["app"].state, "settings", None)
        limit = getattr(settings, "max_body_bytes", DEFAULT_MAX_BODY_BYTES)
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
            scope[PARSED_BODY] = parse_json_body(body)
        return body


def _has_body(scope: Scope) -> bool:
    """Whether the request announces a body (``Content-Length`` other than 0, or ``Transfer-Encoding``); a request
    with neither has none, so there is nothing to read, bound or check."""
    for key, value in scope.get("headers", ()):
        if key == b"transfer-encoding" or (key == b"content-length" and value.strip() not in (b"0", b"")):
            return True
    return False


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The body is larger than {limit:,} bytes; send less per request (collection builds: "
                           f"fewer papers per batch).", details={"field": "body", "max_bytes": limit})
