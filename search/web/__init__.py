"""The curator's workbench: pages served by ``flysift serve`` under ``/`` (the REST API stays under ``/v1``).

Server-rendered with Jinja2 (``templates/``), a stylesheet and one small script (``static/``) served from a fixed
list of names; the pages work with JavaScript off (the script only adds copy buttons and keyboard shortcuts). They
call the services the REST routes call (``reading.py``: search, exports, papers; ``terms.py``; ``audit.py``: sessions
and runs, over the frame of ``pages.py``), sign people in with their API key into a signed cookie and guard forms
against CSRF (``security.py``), and read curation run directories by name (``runs.py``).

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
    for path, endpoint, methods in routes:
        app.add_route(path, endpoint, methods=methods, include_in_schema=False)
    app.add_route(STATIC_PREFIX + "/{name}", static, methods=["GET"], include_in_schema=False)
