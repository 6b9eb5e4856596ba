"""Wiring the operator's side into an app: readiness, metrics, the request-id/metrics/access-log middleware and the
log format (``install``), from the app's own services, so the routes of ``search.api.operations`` and the
middleware need nothing else."""

from __future__ import annotations

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

    def api_builds() -> dict[str, int]:
        out: dict[str, int] = {}
        for collection, _ in list(getattr(state, "builds", {})):
            out[collection] = out.get(collection, 0) + 1
        return out

    collector = StateCollector(state.readiness.checks, open_sessions_of(state.sessions.store), api_builds)
    state.metrics = Metrics(collector)
    app.add_middleware(OpsMiddleware, metrics=state.metrics, access_log=settings.access_log)
