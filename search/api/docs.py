"""Interactive API docs served by the service itself: Swagger UI at ``/docs`` and ReDoc at ``/redoc``.

FastAPI's default pages load Swagger UI from a CDN and stay blank offline. The assets come from the maintained
``fastapi-offline`` package (Swagger UI 5, ReDoc; MIT) and are served from a fixed list of names, never a path from
the request, with a long cache lifetime; the pages use the service's own ``/openapi.json``.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

ASSET_PREFIX = "/docs/assets"
#: the only files served: name -> media type
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}


@cache
def _asset(name: str) -> bytes:
    return (files("fastapi_offline") / "static" / name).read_bytes()


def install(app: FastAPI, docs_url: str = "/docs", redoc_url: str = "/redoc") -> None:
    """Add the docs pages and their assets as plain routes (outside the OpenAPI document and the API-key check)."""
    openapi_url = app.openapi_url or "/openapi.json"
    oauth2_url = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"

    async def swagger(request: Request) -> Response:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(openapi_url=f"{root}{openapi_url}", title=f"{app.title} - Swagger UI",
                                   oauth2_redirect_url=f"{root}{oauth2_url}",
                                   swagger_js_url=f"{root}{ASSET_PREFIX}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{root}{ASSET_PREFIX}/swagger-ui.css",
                                   swagger_favicon_url=f"{root}{ASSET_PREFIX}/favicon.png",
                                   swagger_ui_parameters=app.swagger_ui_parameters)

    async def oauth2_redirect(_: Request) -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    async def redoc(request: Request) -> Response:
        root = request.scope.get("root_path", "")
        return get_redoc_html(openapi_url=f"{root}{openapi_url}", title=f"{app.title} - ReDoc",
                              redoc_js_url=f"{root}{ASSET_PREFIX}/redoc.standalone.js",
                              redoc_favicon_url=f"{root}{ASSET_PREFIX}/favicon.png", with_google_fonts=False)

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ASSETS:
            return PlainTextResponse("No such docs asset.", status_code=404)
        return Response(_asset(name), media_type=ASSETS[name], headers={"Cache-Control": "public, max-age=86400"})

    app.add_route(docs_url, swagger, methods=["GET"], include_in_schema=False)
    app.add_route(oauth2_url, oauth2_redirect, methods=["GET"], include_in_schema=False)
    app.add_route(redoc_url, redoc, methods=["GET"], include_in_schema=False)
    app.add_route(ASSET_PREFIX + "/{name}", asset, methods=["GET"], include_in_schema=False)
