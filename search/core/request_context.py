"""What the service knows about the request it is answering, wherever the code runs: its id (logged, returned in
``X-Request-Id`` and in every error), the time spent in engines, and the error code it was answered with.

``search.ops.requestlog`` sets it for each HTTP request; code below the API adds to it without knowing HTTP
(``engine_time`` around an engine call in ``search.retrieval``), and outside a request (CLI, tests) nothing is
recorded. A context variable follows the request into the thread pool (Starlette copies the context), and the
object is shared, so what a worker thread adds is seen by the middleware.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass
class RequestContext:
    request_id: str
    #: seconds spent in engine calls (``engine_time``)
    engine_s: float = 0.0
    #: the ``error.code`` the request was answered with, if any (``search.api.guard.error_response`` sets it)
    error_code: str | None = None
    #: called with (operation, seconds) after each engine call (the metrics of the app serving the request)
    on_engine: list[Callable[[str, float], None]] = field(default_factory=list)


CURRENT: ContextVar[RequestContext | None] = ContextVar("flysift_request", default=None)


def current() -> RequestContext | None:
    return CURRENT.get()


@contextmanager
def engine_time(operation: str) -> Iterator[None]:
    """Count the enclosed engine call's wall time to the current request (nothing outside a request)."""
    ctx = CURRENT.get()
    if ctx is None:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        spent = time.perf_counter() - t0
        ctx.engine_s += spent
        for observe in ctx.on_engine:
            observe(operation, spent)
