"""Answering a route in one hop: the blocking work (engine, store) and the JSON serialisation run together on the
thread pool, and the route returns the bytes as they are.

A route that returns a ``Response`` is not re-validated through its ``response_model`` (FastAPI passes it on as
is); the ``response_model`` stays on the decorator, so ``/openapi.json`` keeps the schema. What the work returns is
serialised once by pydantic-core (``model_dump_json`` for a model, ``to_json`` for lists and dicts of them), by alias,
the same bytes FastAPI's own path would have produced (floats that are not finite become ``null`` instead of a 500).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_json
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

JSON = "application/json"


def dump(value: Any) -> bytes:
    """``value`` (a model, or lists and dicts of models and plain values) as compact JSON bytes."""
    if isinstance(value, BaseModel):
        return value.model_dump_json(by_alias=True).encode()
    return to_json(value, by_alias=True)


def json_response(body: bytes, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(body, status_code=status, media_type=JSON, headers=dict(headers) if headers else None)


async def answer(work: Callable[[], Any], status: int = 200, inline: bool = False) -> Response:
    """Run ``work`` and serialise its result in one thread-pool hop (on the event loop itself when ``inline``: for
    CPU-bound work that does no I/O, where a hop only adds a hand-off and a GIL switch); its exceptions reach the
    app's handlers."""
    if inline:
        return json_response(dump(work()), status)
    return json_response(await run_in_threadpool(lambda: dump(work())), status)
