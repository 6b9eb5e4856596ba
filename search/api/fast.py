"""The lean path of the hot read routes (paper and passage search, paper text, a session read, the term routes).

FastAPI spends more CPU on such a request than the search itself: its router walks every route, its request handler
reads and parses the body again (``search.api.guard`` already did), solves the dependency tree through a generic,
cache-keyed solver and wraps the call in two more middleware layers. ``FastPath`` answers a request for a route marked
``@lean`` itself, with FastAPI's own parts where they decide something:

- the route is the one FastAPI's router would pick (the first route in order that matches path and method);
- parameters are read as FastAPI's ``request_params_to_args`` reads them (each one's name, shape and default worked
  out once per route, with FastAPI's own helpers) and validated by the route's own fields; the body is the guard's
  parse, validated by ``request_body_to_args``; all before any dependency runs;
- the dependencies (``search.api.deps``: caller, session, hidden terms) and the route are the same functions, called
  in FastAPI's order, each once per request;
- errors they raise are answered by the app's own exception handlers (one error shape).

Anything else goes down FastAPI's path untouched: a parameter or body that does not validate (so the 422 is
FastAPI's, word for word), a body that is not plain ``application/json``, another method (HEAD) or route. A route
stays declared as usual, so ``/openapi.json`` is FastAPI's document, unchanged.

The parts used are FastAPI internals (``FASTAPI_INTERNALS``), so FastAPI is pinned to the minor release they were
verified on (``VERIFIED_FASTAPI``, the pin in ``pyproject.toml``). ``tests/api/test_fastapi_pin.py`` fails loudly when
another FastAPI is installed, the pin drifts or an internal is gone; ``tests/api/test_fast_path.py`` compares both
paths answer for answer. To upgrade: raise the pin, run both, fix what differs, then set ``VERIFIED_FASTAPI``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from copy import deepcopy
from typing import Any

from fastapi import FastAPI
from fastapi._compat import ModelField, field_annotation_is_sequence
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import _get_param_aliases, _get_param_model, _is_json_field, request_body_to_args
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from search.api.guard import PARSED_BODY

#: the FastAPI minor release the internals below were verified on (pyproject.toml pins it)
VERIFIED_FASTAPI = "0.165"
#: FastAPI's private or undocumented names this module relies on: (module, attribute), and the attributes it reads
#: of the effective routes ``iter_route_contexts`` yields
FASTAPI_INTERNALS = (
    ("fastapi._compat", "ModelField"), ("fastapi._compat", "field_annotation_is_sequence"),
    ("fastapi.dependencies.utils", "_get_param_aliases"), ("fastapi.dependencies.utils", "_get_param_model"),
    ("fastapi.dependencies.utils", "_is_json_field"), ("fastapi.dependencies.utils", "request_body_to_args"),
    ("fastapi.routing", "iter_route_contexts"), ("fastapi.dependencies.models", "Dependant"),
)
ROUTE_INTERNALS = ("original_route", "_embed_body_fields", "dependant", "endpoint", "matches")

#: content types for which FastAPI and the guard agree that the body is JSON (anything else takes FastAPI's path)
JSON_TYPES = frozenset({b"application/json", b"application/json; charset=utf-8"})

#: the endpoints marked ``@lean``
LEAN_ENDPOINTS: set[Callable[..., Any]] = set()


def lean(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a route for the lean path. It must be ``async``, return a ``Response`` and depend only on ``async``
    dependencies without ``yield``; ``FastPath`` refuses to start otherwise."""
    LEAN_ENDPOINTS.add(endpoint)
    return endpoint


class _Fallback(Exception):
    """The request takes FastAPI's path."""


class _Param:
    """How FastAPI reads one path, query or header parameter (``request_params_to_args`` for a plain parameter: one
    name, no parameter model), worked out once instead of per request."""

    __slots__ = ("field", "name", "key", "where", "multi", "seq", "loc", "required", "default", "plain_default",
                 "validate_default")

    def __init__(self, field: ModelField, where: str):
        self.field, self.name, self.where = field, field.name, where
        self.key = _get_param_aliases(field)[0][1]
        self.seq = field_annotation_is_sequence(field.field_info.annotation)
        self.multi = self.seq and where != "path" and not _is_json_field(field)  # read with getlist
        self.loc = (field.field_info.in_.value, self.key)  # type: ignore[attr-defined]
        self.required = field.field_info.is_required()
        self.default = field.default
        self.plain_default = self.default is None or isinstance(self.default, str | int | float | bool)
        self.validate_default = field.field_info.validate_default

    @staticmethod
    def plain(field: ModelField) -> bool:
        return _get_param_model(field) is None and len(_get_param_aliases(field)) == 1

    def value(self, source: Any) -> Any:
        """The validated value, or ``_Fallback``."""
        value = source.getlist(self.key) if self.multi else source.get(self.key)
        if value is None or (self.seq and len(value) == 0):
            if self.required:
                raise _Fallback
            if not self.validate_default:
                return self.default if self.plain_default else deepcopy(self.default)
            value = deepcopy(self.default)
        got, errors = self.field.validate(value, {}, loc=self.loc)
        if errors:
            raise _Fallback
        return got


class _Plan:
    """One lean route: its effective route (path with prefix, methods, dependant) and the routes before it that could
    take the same request."""

    def __init__(self, route: Any, earlier: list[Any]):
        self.route = route
        self.original = route.original_route
        self.earlier = earlier
        self.dependant: Dependant = route.dependant
        self.body_fields = self.dependant.body_params
        self.embed_body = bool(route._embed_body_fields)
        order = _post_order(self.dependant)
        index = {id(dep.call): i for i, dep in enumerate(order)}
        #: per dependant, sub-dependencies first: (call, its parameters, whether it takes the body, the name it takes
        #: the request by, the names it takes sub-dependencies' values by with their place in this list)
        self.steps: list[tuple[Any, list[_Param], bool, str | None, list[tuple[str, int]]]] = []
        for dep in order:
            _check(dep, route.path, top=dep is self.dependant)
            fields = [(f, "path") for f in dep.path_params] + [(f, "query") for f in dep.query_params] + \
                     [(f, "header") for f in dep.header_params]
            if not all(_Param.plain(f) for f, _ in fields):
                raise RuntimeError(f"lean route {route.path}: {dep.call} takes a parameter model or alias choices")
            subs = [(sub.name, index[id(sub.call)]) for sub in dep.dependencies if sub.name is not None]
            self.steps.append((dep.call, [_Param(f, where) for f, where in fields], bool(dep.body_params),
                               dep.request_param_name, subs))
        if inspect.signature(route.endpoint).return_annotation not in (Response, "Response"):
            raise RuntimeError(f"lean route {route.path}: must return a Response")


def _post_order(dep: Dependant, seen: set[int] | None = None) -> list[Dependant]:
    """Every dependant of the tree, each call once, sub-dependencies before their dependant."""
    seen = set() if seen is None else seen
    out: list[Dependant] = []
    for sub in dep.dependencies:
        if id(sub.call) not in seen:
            out += _post_order(sub, seen)
    seen.add(id(dep.call))
    out.append(dep)
    return out


def _check(dep: Dependant, path: str, top: bool) -> None:
    call = dep.call
    problem = None
    if call is None or not inspect.iscoroutinefunction(call):
        problem = "is not async"
    elif not dep.use_cache or dep.cookie_params or dep.security_scopes_param_name or dep.own_oauth_scopes:
        problem = "uses cookies, security scopes or no cache"
    elif (dep.websocket_param_name or dep.http_connection_param_name or dep.response_param_name
          or dep.background_tasks_param_name):
        problem = "takes a websocket, connection, response or background tasks"
    elif dep.body_params and not top:
        problem = "is a dependency with a body"
    if problem:
        raise RuntimeError(f"lean route {path}: {getattr(call, '__name__', call)} {problem}")


def _routes(app: FastAPI) -> dict[str, list[_Plan]]:
    """The lean routes by method, each with the routes before it (in the router's order) that take that method."""
    flat = list(iter_route_contexts(app.routes))
    plans: dict[str, list[_Plan]] = {}
    for i, route in enumerate(flat):
        if getattr(route, "endpoint", None) not in LEAN_ENDPOINTS:
            continue
        methods = set(route.methods or ())
        earlier = [r for r in flat[:i] if not r.methods or methods & set(r.methods)]
        plan = _Plan(route, earlier)
        for m in methods:
            plans.setdefault(m, []).append(plan)
    return plans


def _handler(app: FastAPI, exc: Exception) -> Callable[..., Any] | None:
    """The app's handler for ``exc`` as Starlette's ``ExceptionMiddleware`` finds it (an HTTP exception's status, then
    by class, most specific first); 500 and ``Exception`` belong to the server-error layer outside, so they are not
    looked up here."""
    if isinstance(exc, HTTPException) and exc.status_code != 500 and exc.status_code in app.exception_handlers:
        return app.exception_handlers[exc.status_code]
    for cls in type(exc).__mro__:
        if cls is Exception:
            return None
        handler = app.exception_handlers.get(cls)
        if handler is not None:
            return handler
    return None


class FastPath:
    """ASGI middleware (innermost of the app's own): lean routes answered here, everything else passed on."""

    def __init__(self, app: ASGIApp):
        self.app = app
        self.plans: dict[str, list[_Plan]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.plans is None:
            self.plans = _routes(scope["app"])
        candidates = self.plans.get(scope["method"])
        if candidates:
            for plan in candidates:
                match, child = plan.route.matches(scope)
                if match is Match.FULL:
                    if not any(r.matches(scope)[0] is Match.FULL for r in plan.earlier):
                        try:
                            return await self._answer(plan, child, scope, receive, send)
                        except _Fallback:
                            pass
                    break
        return await self.app(scope, receive, send)

    async def _answer(self, plan: _Plan, child: dict[str, Any], scope: Scope, receive: Receive, send: Send) -> None:
        scope.update(child)  # what the router would set: endpoint and path parameters (the trace reads both)
        request = Request(scope, receive, send)
        args: list[dict[str, Any]] = []
        # every parameter first: a request that fails validation has run no dependency
        for _, params, takes_body, request_name, _ in plan.steps:
            values: dict[str, Any] = {}
            for p in params:
                source = (child["path_params"] if p.where == "path" else
                          request.query_params if p.where == "query" else request.headers)
                values[p.name] = p.value(source)
            if takes_body:
                values.update(await self._body(plan, scope))
            if request_name:
                values[request_name] = request
            args.append(values)
        if plan.body_fields:
            await receive()  # the guard's replay of the body: the trace records it as FastAPI's read would
        scope["route"] = plan.original
        app: FastAPI = scope["app"]
        try:
            done: list[Any] = []
            for (call, _, _, _, subs), kwargs in zip(plan.steps, args, strict=True):
                for name, i in subs:
                    kwargs[name] = done[i]
                done.append(await call(**kwargs))
            response = done[-1]
        except Exception as exc:
            handler = _handler(app, exc)
            if handler is None:
                raise
            response = await handler(request, exc)
        await response(scope, receive, send)

    async def _body(self, plan: _Plan, scope: Scope) -> dict[str, Any]:
        if PARSED_BODY not in scope:
            raise _Fallback
        content_type = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
        if content_type.lower() not in JSON_TYPES:
            raise _Fallback
        values, errors = await request_body_to_args(plan.body_fields, scope[PARSED_BODY], plan.embed_body)
        if errors:
            raise _Fallback
        return values
