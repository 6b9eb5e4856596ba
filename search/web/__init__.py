"""The curator's workbench: pages served by ``flysift serve`` under ``/`` (the REST API stays under ``/v1``).

Server-rendered with Jinja2 (``templates/``), a stylesheet and one small script (``static/``) served from a fixed
list of names; the pages work with JavaScript off (the script only adds copy buttons and keyboard shortcuts). They
call the services the REST routes call (``pages.py``), sign people in with their API key into a signed cookie and
guard forms against CSRF (``security.py``), and read curation run directories by name (``runs.py``).

``install(app)`` adds the routes as plain Starlette routes: outside the OpenAPI document and the API's Bearer-key
dependency (pages authenticate by cookie).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

#: the only static files served: name -> media type
STATIC = {
    "workbench.css": "text/css; charset=utf-8",
    "workbench.js": "text/javascript; charset=utf-8",
}
STATIC_PREFIX = "/static"


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
    from search.web import pages as p

    get, post = ["GET"], ["POST"]
    routes = [
        ("/", p.page(p.search_page), get),
        ("/papers/{pmcid}", p.page(p.paper_page), get),
        ("/papers/{pmcid}/supplements/{file}", p.page(p.supplement_page), get),
        ("/terms", p.page(p.terms_page), get),
        ("/terms/{term_id}", p.page(p.term_page), get),
        ("/sessions", p.page(p.sessions_page), get),
        ("/sessions/{session_id}", p.page(p.session_page), get),
        ("/sessions/{session_id}/close", p.page(p.close_session), post),
        ("/runs", p.page(p.runs_page), get),
        ("/runs/{name}", p.page(p.run_page), get),
        ("/signin", p.page(p.signin_page, public=True), get),
        ("/signin", p.page(p.signin, public=True), post),
        ("/signout", p.page(p.signout, public=True), post),
    ]
    for path, endpoint, methods in routes:
        app.add_route(path, endpoint, methods=methods, include_in_schema=False)
    app.add_route(STATIC_PREFIX + "/{name}", static, methods=["GET"], include_in_schema=False)
