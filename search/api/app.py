"""The application factory: the services of the settings (``search.services.Services``) on ``app.state``, one
error shape for every failure."""

from __future__ import annotations

import logging
from collections.abc import Callable

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.telemetry import TelemetryConfig
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from search import __version__, web
from search.api import builds, docs, openapi, papers, sessions, supplements, terms
from search.api.deps import principal
from search.api.fast import FastPath
from search.api.guard import InputGuard, error_response
from search.api.middleware import TraceMiddleware
from search.core.config import Settings
from search.core.errors import FlysiftError
from search.core.inputs import QUOTE_CHARS, clip
from search.services import Services
from search.sessions.keys import RateLimiter

log = logging.getLogger("flysift.api")


#: FastAPI's native OpenTelemetry, off unless ``FLYSIFT_OTEL``: with it on, every request looks up three global
#: providers even when none is configured (~10 µs, a tenth of the lean path's framework cost)
NO_OTEL: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}

#: validation errors listed in one answer (a list of 10,000 bad items gets the first ones)
MAX_LISTED_ERRORS = 20


def _error(status: int, code: str, message: str, details: dict | None = None,
           headers: dict | None = None) -> JSONResponse:
    return error_response(status, code, message, details, headers)


def _field(loc: tuple) -> str:
    """A pydantic error location as a field path: ``("body", "filters", "year_form")`` → ``filters.year_form``,
    list indexes as ``[i]``; query, path and header parameters keep their prefix (``query.offset``)."""
    out = ""
    for p in loc[1:] if loc and loc[0] == "body" else loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return clip(out or "body", QUOTE_CHARS)


def _shadowed_methods(app: FastAPI, routers: list) -> None:
    """``GET /v1/papers/search`` must be 405 (the path exists for POST), not ``GET /v1/papers/{pmcid}`` with pmcid
    "search": for each fixed path, a hidden route, added before the routers, answers 405 for the methods a
    parameterised route would steal."""
    routes = [r for router in routers for r in router.routes if isinstance(r, APIRoute)]
    added: set[tuple[str, str]] = set()
    for fixed in routes:
        if fixed.param_convertors:
            continue
        scope = {"type": "http", "path": fixed.path, "root_path": ""}
        allow = sorted(set[str]().union(*(r.methods or () for r in routes if r.path == fixed.path)))
        for other in routes:
            methods = (other.methods or set()) - set(allow) - {"HEAD"}
            stolen = [m for m in sorted(methods) if (fixed.path, m) not in added]
            if other.param_convertors and stolen and other.matches({**scope, "method": stolen[0]})[0] == Match.FULL:
                added.update((fixed.path, m) for m in stolen)
                app.add_api_route(fixed.path, _method_not_allowed(allow), methods=stolen, include_in_schema=False)


def _method_not_allowed(allow: list[str]) -> Callable[[], None]:
    def method_not_allowed() -> None:
        raise StarletteHTTPException(405, f"Method not allowed; this path takes {', '.join(allow)}.",
                                     headers={"Allow": ", ".join(allow)})

    return method_not_allowed


def create_app(settings: Settings | None = None, services: Services | None = None) -> FastAPI:
    """The API over ``services`` (default: ``Services.open(settings)``)."""
    services = services or Services.open(settings)
    settings = services.settings
    app = FastAPI(title="flysift", version=__version__,
                  description="Retrieval backend for literature-curation agents: budget-limited, gene-aware "
                              "search over papers, passages and ontology terms.",
                  dependencies=[Depends(principal)], docs_url=None, redoc_url=None,
                  telemetry=None if settings.otel else NO_OTEL)
    app.state.settings = settings
    app.state.services = services
    app.state.search = services.search
    # auth (search.api.deps) and traces (search.api.middleware); the session service comes with the term service
    app.state.limiter = RateLimiter(settings.rate_limit_per_minute, settings.rate_limit_burst)
    app.add_middleware(FastPath)  # innermost: the hot read routes answered without FastAPI's router and solver
    app.add_middleware(TraceMiddleware)
    app.add_middleware(InputGuard)  # outermost: hostile bodies and URLs never reach the trace or a route

    @app.exception_handler(FlysiftError)
    async def _flysift_error(_: Request, exc: FlysiftError) -> JSONResponse:
        return _error(exc.status, exc.code, exc.message, exc.details, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        raw = exc.errors()
        if any(e.get("type") == "json_invalid" for e in raw):  # InputGuard reads JSON bodies first; kept for safety
            return _error(400, "invalid_json", "The body is not valid JSON.", {"field": "body"})
        errors = [{"field": _field(tuple(e["loc"])), "message": clip(e["msg"], QUOTE_CHARS)}
                  for e in raw[:MAX_LISTED_ERRORS]]
        more = f" (and {len(raw) - len(errors)} more)" if len(raw) > len(errors) else ""
        msg = "; ".join(f"{e['field']}: {e['message']}" for e in errors) + more
        return _error(422, "invalid_request", f"Invalid request: {msg}", {"errors": errors})

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return _error(500, "internal_error", f"Internal error ({type(exc).__name__}); the service log has details.")

    app.state.terms = services.terms
    app.state.sessions = services.sessions
    app.state.builds = services.builds
    routers = [papers.router, supplements.router, builds.router, sessions.router, terms.router]
    _shadowed_methods(app, routers)
    for router in routers:
        app.include_router(router)
    openapi.install(app, settings)  # the served document declares the real errors, auth and bounds
    docs.install(app)  # /docs and /redoc with their assets served here: no CDN, works offline
    web.install(app)  # the workbench pages under / (search.web), signed in by cookie, outside the OpenAPI document
    return app
