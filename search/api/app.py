"""The application factory: settings, shared services on ``app.state``, one error shape for every failure."""

from __future__ import annotations

import logging

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from search import __version__
from search.api.deps import TraceMiddleware, load_lexicon, principal
from search.auth import RateLimiter
from search.config import Settings
from search.errors import FlysiftError
from search.service import SearchService
from search.terms import TermService
from search.store import open_store

log = logging.getLogger("flysift.api")


def _error(status: int, code: str, message: str, details: dict | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, "details": details or {}}}, status_code=status,
                        headers=headers)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    app = FastAPI(title="flysift", version=__version__,
                  description="Retrieval backend for literature-curation agents: budget-limited, gene-aware "
                              "search over papers, passages and ontology terms.",
                  dependencies=[Depends(principal)])
    app.state.settings = settings
    app.state.search = SearchService(settings)
    app.state.builds = {}
    # sessions, auth and traces (search.api.deps)
    app.state.store = open_store(settings)
    app.state.lexicon = load_lexicon(settings.lexicon, settings.data_dir)
    app.state.limiter = RateLimiter(settings.rate_limit_per_minute, settings.rate_limit_burst)
    app.add_middleware(TraceMiddleware)

    @app.exception_handler(FlysiftError)
    async def _flysift_error(_: Request, exc: FlysiftError):
        return _error(exc.status, exc.code, exc.message, exc.details, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError):
        errors = [{"field": ".".join(str(p) for p in e["loc"] if p != "body"), "message": e["msg"]} for e in exc.errors()]
        msg = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        return _error(422, "invalid_request", f"Invalid request: {msg}", {"errors": errors})

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception):
        log.exception("unhandled error")
        return _error(500, "internal_error", f"Internal error ({type(exc).__name__}); the service log has details.")

    from search.api import openapi, papers, sessions, terms

    app.state.terms = TermService(settings.data_dir)
    app.include_router(papers.router)
    app.include_router(sessions.router)
    app.include_router(terms.router)
    openapi.install(app, settings)  # the served document declares the real errors, auth and bounds
    return app
