"""The application factory: the services of the settings (``search.services.Services``) on ``app.state``, one
error shape for every failure."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.telemetry import TelemetryConfig
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from search import __version__, web
from search.api import builds, docs, openapi, operations, papers, sessions, supplements, terms
from search.api.deps import principal
from search.api.fast import FastPath
from search.api.guard import InputGuard, PathRedactor, error_response
from search.api.middleware import TraceMiddleware
from search.core.config import Settings
from search.core.errors import FlysiftError
from search.core.inputs import QUOTE_CHARS, clip
from search.engines import storage_error
from search.ops.wiring import install as install_operations
from search.services import Services
from search.sessions.keys import RateLimiter

log = logging.getLogger("flysift.api")


#: FastAPI's native OpenTelemetry, off unless ``FLYSIFT_OTEL``: with it on, every request looks up three global
#: providers even when none is configured (~10 µs, a tenth of the lean path's framework cost)
NO_OTEL: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}

#: 5xx answers that say what they need to and are expected (no index yet, a probe of a service not ready, a cluster
#: being restarted): not written to the service log on every request
QUIET = frozenset({"not_ready", "index_missing", "unavailable"})

#: validation errors listed in one answer (a list of 10,000 bad items gets the first ones)
MAX_LISTED_ERRORS = 20


def _error(status: int, code: str, message: str, details: dict | None = None,
           headers: dict | None = None, request: Request | None = None) -> JSONResponse:
    redact = getattr(request.app.state, "redact", None) if request is not None else None
    return error_response(status, code, message, details, headers, redact=redact)


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


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the document declares for ``path``: those of the most specific documented path template that
    matches it (``/v1/papers/search`` takes POST, although ``/v1/papers/{pmcid}`` matches it too)."""
    by_template: dict[str, set[str]] = {}
    for route in iter_route_contexts(app.routes):
        if not isinstance(route.original_route, APIRoute) or not route.include_in_schema:
            continue
        if route.path_regex.match(path):
            by_template.setdefault(route.path or "", set()).update(route.methods or ())
    if not by_template:
        return []
    best = min(by_template, key=lambda t: (t.count("{"), t))
    return sorted(by_template[best] - {"HEAD"})


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
    files = [settings.session_db, settings.ground_truth, settings.cluster_ca_file, *(settings.lexicon or "").split(",")]
    app.state.redact = PathRedactor(settings.data_dir, [Path(f).parent for f in files if f])  # names stay
    app.state.services = services
    app.state.search = services.search
    # auth (search.api.deps) and traces (search.api.middleware); the session service comes with the term service
    app.state.limiter = RateLimiter(settings.rate_limit_per_minute, settings.rate_limit_burst)
    app.add_middleware(FastPath)  # innermost: the hot read routes answered without FastAPI's router and solver
    app.add_middleware(TraceMiddleware)
    app.add_middleware(InputGuard)  # outermost: hostile bodies and URLs never reach the trace or a route

    @app.exception_handler(FlysiftError)
    async def _flysift_error(request: Request, exc: FlysiftError) -> JSONResponse:
        if exc.status >= 500 and exc.code not in QUIET:   # the operator's copy, with the paths the answer leaves out
            log.warning("%s %s: [%s] %s", request.method, request.url.path, exc.code, exc.message)
        return _error(exc.status, exc.code, exc.message, exc.details, exc.headers, request)

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
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:   # Starlette names the methods of the first route that matched the path only
            allow = allowed_methods(app, request.url.path)
            headers = {**(headers or {}), "Allow": ", ".join(allow)}
            return _error(405, code, f"Method not allowed; this path takes {', '.join(allow)}.", headers=headers,
                          request=request)
        return _error(exc.status_code, code, str(exc.detail), headers=headers, request=request)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        if (err := storage_error(exc, settings.data_dir)) is not None:   # a full or read-only disk, from anywhere
            log.warning("%s %s: [%s] %s", request.method, request.url.path, err.code, err.message)
            return _error(err.status, err.code, err.message, err.details, err.headers, request)
        log.exception("unhandled error")
        return _error(500, "internal_error", f"Internal error ({type(exc).__name__}); the service log has details.",
                      request=request)

    app.state.terms = services.terms
    app.state.sessions = services.sessions
    app.state.builds = services.builds
    install_operations(app, settings)  # outermost: request ids, metrics and the access log of every request
    routers = [supplements.router, papers.router, builds.router, sessions.router, terms.router, operations.router]
    _shadowed_methods(app, routers)
    for router in routers:
        app.include_router(router)
    openapi.install(app, settings)  # the served document declares the real errors, auth and bounds
    docs.install(app)  # /docs and /redoc with their assets served here: no CDN, works offline
    web.install(app)  # the workbench pages under / (search.web), signed in by cookie, outside the OpenAPI document
    return app
