"""Wiring the operator's side into an app: readiness, metrics, the request-id/metrics/access-log middleware and the
log format (``install``), from the app's own services, so the routes of ``search.api.operations`` and the
middleware need nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from search.core.config import Settings
from search.ops.metrics import Metrics, StateCollector, open_sessions_of
from search.ops.readiness import Readiness
from search.ops.requestlog import OpsMiddleware, configure


def install(app: Any, settings: Settings) -> None:
    """Call after the app's other middleware (this one must be the outermost) and after ``app.state`` holds the
    search and session services."""
    configure(settings.log_format, settings.log_level, settings.access_log, settings.access_log_file)
    state = app.state
    state.readiness = Readiness(settings, lambda: state.search.engine(), lambda: state.sessions.store)

    collector = StateCollector(state.readiness.checks, open_sessions_of(state.sessions.store),
                               state.builds.open_counts)
    state.metrics = Metrics(collector)
    app.add_middleware(OpsMiddleware, metrics=state.metrics, access_log=settings.access_log)
    _abort_builds_at_shutdown(app)


def _abort_builds_at_shutdown(app: Any) -> None:
    """API builds still open when the process stops are aborted and removed (``BuildService.abort_all``)."""
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with inner(a) as value:
            yield value
        a.state.builds.abort_all()

    app.router.lifespan_context = lifespan
