"""The curator's workbench: pages served by ``flysift serve`` under ``/`` (the REST API stays under ``/v1``).

Server-rendered with Jinja2 (``templates/``), a stylesheet and one small script (``static/``) served from a fixed
list of names; the pages work with JavaScript off (the script only adds copy buttons and keyboard shortcuts). They
call the services the REST routes call (``reading.py``: search, exports, papers; ``terms.py``; ``audit.py``: sessions
and runs, over the frame of ``pages.py``), sign people in with their API key into a signed cookie and guard forms
against CSRF (``security.py``), and read curation run directories by name (``runs.py``).

``install(app)`` adds the routes as plain Starlette routes: outside the OpenAPI document and the API's Bearer-key
dependency (pages authenticate by cookie). They sit in front of the API's routes as one :class:`Pages` route, so a
page is not looked for behind every API route (~0.2-0.3 ms a page) and an API request passes them with one check.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Receive, Scope, Send

#: the only static files served: name -> media type
STATIC = {
    "workbench.css": "text/css; charset=utf-8",
    "workbench.js": "text/javascript; charset=utf-8",
}
STATIC_PREFIX = "/static"
#: paths no page answers: the REST API's (routed by the API's own routes, never by the pages)
API_PREFIX = "/v1/"


@cache
def static_file(name: str) -> bytes:
    return (files("search.web") / "static" / name).read_bytes()


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        return PlainTextResponse("No such file.", status_code=404)
    return Response(static_file(name), media_type=STATIC[name],
                    headers={"Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"})


def install(app: FastAPI) -> None:
    """Mount the pages on ``app`` (one call in ``search.api.app.create_app``)."""
    from search.web import audit, reading, terms
    from search.web.pages import page, signin, signin_page, signout

    get, post = ["GET"], ["POST"]
    routes = [
        ("/", page(reading.search_page), get),
        ("/export", page(reading.export_page), get),
        # a paper key may hold a slash (``DOI:10.1371/…``, escaped as %2F in links and decoded by the server before
        # routing), so it is a path; the routes below a paper come first
        ("/papers/{pmcid:path}/similar", page(reading.similar_page), get),
        ("/papers/{pmcid:path}/supplements/{file}", page(reading.supplement_page), get),
        ("/papers/{pmcid:path}", page(reading.paper_page), get),
        ("/terms", page(terms.terms_page), get),
        ("/terms/{term_id}", page(terms.term_page), get),
        ("/sessions", page(audit.sessions_page), get),
        ("/sessions/{session_id}", page(audit.session_page), get),
        ("/sessions/{session_id}/close", page(audit.close_session), post),
        ("/runs", page(audit.runs_page), get),
        ("/runs/{name}", page(audit.run_page), get),
        ("/signin", page(signin_page, public=True), get),
        ("/signin", page(signin, public=True), post),
        ("/signout", page(signout, public=True), post),
    ]
    pages = [Route(path, endpoint, methods=methods, include_in_schema=False) for path, endpoint, methods in routes]
    pages.append(Route(STATIC_PREFIX + "/{name}", static, methods=["GET"], include_in_schema=False))
    app.router.routes.insert(0, Pages(pages))


class Pages(BaseRoute):
    """The page routes as one route, first in the app: a request under ``/v1/`` passes with one prefix check (the
    API's routes answer it), any other is matched against the pages only, then falls through to the routes after
    (``/docs``, ``/openapi.json``, 404). Matching is Starlette's: a wrong method is a partial match (405)."""

    def __init__(self, routes: list[Route]):
        self.routes = routes

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http" or scope["path"].startswith(API_PREFIX):
            return Match.NONE, {}
        partial: tuple[Match, Scope] | None = None
        for route in self.routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                return match, {**child, "route": route}
            if match is Match.PARTIAL and partial is None:
                partial = (match, {**child, "route": route})
        return partial or (Match.NONE, {})

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await scope["route"].handle(scope, receive, send)
