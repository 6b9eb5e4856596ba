"""The pages' shared frame: parameters read within bounds, the caller (signed-in cookie or ``local``), the CSRF
token of a browser's forms, the security headers, errors as pages; and the sign-in pages. The pages themselves are
``reading`` (search, exports, papers, similar papers, supplements), ``terms`` and ``audit`` (sessions, runs).

Each handler reads its parameters, asks the services the REST routes use (``SearchService``, ``SessionService``,
``TermService``, the FlyAOC rules of ``search.flyaoc``) in one thread-pool hop and renders a template; nothing here
ranks, budgets or validates on its own. A ``FlysiftError`` becomes an error page with the same status and message
the REST API would answer (a query error is shown next to the search box instead).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from search.core.errors import FlysiftError, InvalidRequest, LimitExceeded
from search.ontology.service import TermService
from search.retrieval.cursors import load_secret
from search.retrieval.service import SearchService
from search.sessions.keys import LOCAL, Principal, RateLimiter, Unauthorized, key_id_of, verify
from search.sessions.service import SessionService
from search.web.render import render
from search.web.security import (
    AUTH_COOKIE,
    CSRF_COOKIE,
    CSRF_FIELD,
    HEADERS,
    SIGNIN_MAX_AGE_S,
    Signer,
    derive_key,
    new_csrf_cookie,
    principal_of,
    safe_next,
)

log = logging.getLogger("flysift.web")

MAX_FORM_BYTES = 16_384
MAX_PARAM_CHARS = 2000
#: sign-in attempts are rate-limited per client address in this bucket (besides each key's own limit)
SIGNIN_BUCKET = "signin:"
NUMBER = re.compile(r"-?\d{1,18}")


# ---- parameters ---------------------------------------------------------------------------------------------------

def param(request: Request, name: str, max_chars: int = MAX_PARAM_CHARS) -> str:
    value = request.query_params.get(name, "")
    if len(value) > max_chars:
        raise LimitExceeded(f"{name} is {len(value):,} characters; at most {max_chars:,}.",
                            details={"field": name, "max": max_chars})
    return value.strip()


def int_param(request: Request, name: str, lo: int, hi: int, default: int | None = None) -> int | None:
    raw = param(request, name, 20)
    if not raw:
        return default
    if not NUMBER.fullmatch(raw):
        raise InvalidRequest(f"{name}: a whole number, please (got {raw[:20]!r}).", details={"field": name})
    value = int(raw)
    if not lo <= value <= hi:
        raise InvalidRequest(f"{name}: between {lo} and {hi} (got {value}).", details={"field": name})
    return value


def choice(request: Request, name: str, choices: tuple[str, ...], default: str) -> str:
    value = param(request, name, 40) or default
    if value not in choices:
        raise InvalidRequest(f"{name}: one of {', '.join(choices)} (got {value[:40]!r}).", details={"field": name})
    return value


def flag(request: Request, name: str) -> bool:
    return param(request, name, 10).lower() in ("1", "true", "on", "yes")


# ---- the shared frame: caller, CSRF cookie, headers ---------------------------------------------------------------

@dataclass
class Ctx:
    """What every page knows: the request, the caller, the CSRF token for its forms."""

    request: Request
    caller: Principal
    csrf_cookie: str
    new_csrf: bool
    signer: Signer

    @property
    def app(self) -> Any:
        return self.request.app

    @property
    def search(self) -> SearchService:
        return self.app.state.search

    @property
    def sessions(self) -> SessionService:
        return self.app.state.sessions

    @property
    def terms(self) -> TermService:
        return self.app.state.terms

    def base(self) -> dict[str, Any]:
        s = self.app.state.settings
        return {"auth": s.auth, "caller": self.caller, "csrf": self.signer.csrf_token(self.csrf_cookie),
                "csrf_field": CSRF_FIELD, "path": self.request.url.path, "runs_enabled": s.runs_dir is not None}

    def page(self, template: str, status: int = 200, headers: dict[str, str] | None = None, **context: Any
             ) -> HTMLResponse:
        html = render(template, **self.base(), **context)
        resp = HTMLResponse(html, status_code=status, headers={**HEADERS, **(headers or {})})
        secure = self.request.url.scheme == "https"
        if self.new_csrf:
            resp.set_cookie(CSRF_COOKIE, self.csrf_cookie, httponly=True, samesite="strict", secure=secure, path="/")
        return resp

    def error(self, exc: FlysiftError) -> HTMLResponse:
        return self.page("error.html", status=exc.status, headers=exc.headers, error=exc, title="Error")


def signer_of(request: Request) -> Signer:
    state = request.app.state
    signer = getattr(state, "web_signer", None)
    if signer is None:
        s = state.settings
        secret = load_secret(s.cursor_secret.get_secret_value() if s.cursor_secret else None, s.data_dir)
        signer = state.web_signer = Signer(derive_key(secret))
    return signer


async def caller_of(request: Request, signer: Signer) -> Principal | None:
    """The signed-in caller (everyone is ``local`` with auth off); None when a sign-in is needed."""
    settings = request.app.state.settings
    if not settings.auth:
        return LOCAL
    signed = signer.read_signin(request.cookies.get(AUTH_COOKIE))
    if signed is None:
        return None
    sessions: SessionService = request.app.state.sessions
    p = principal_of(signed, await run_in_threadpool(sessions.api_key, signed.key_id))
    if p is not None:
        limiter: RateLimiter = request.app.state.limiter
        limiter.hit(p.key_id or "")
    return p


Handler = Callable[[Ctx], Awaitable[Response]]


def page(handler: Handler, public: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """A route: the caller (else a redirect to the sign-in page), the CSRF cookie, errors as pages."""

    async def endpoint(request: Request) -> Response:
        signer = signer_of(request)
        cookie = request.cookies.get(CSRF_COOKIE)
        fresh = not cookie or len(cookie) > 64
        ctx = Ctx(request, LOCAL, new_csrf_cookie() if fresh else str(cookie), fresh, signer)
        try:
            caller = await caller_of(request, signer)
            if caller is None and not public:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                resp = RedirectResponse(f"/signin?next={quote_part(target)}", status_code=303, headers=HEADERS)
                if request.cookies.get(AUTH_COOKIE):
                    resp.delete_cookie(AUTH_COOKIE, path="/")
                return resp
            ctx.caller = caller or LOCAL
            return await handler(ctx)
        except FlysiftError as exc:
            return ctx.error(exc)
        except Exception as exc:   # a bug: the log has the traceback, the person a page that says so
            log.exception("page %s failed", request.url.path)
            return ctx.error(FlysiftError(f"Internal error ({type(exc).__name__}); the service log has details.",
                                          code="internal_error", status=500))

    endpoint.__name__ = handler.__name__
    return endpoint


def quote_part(value: str) -> str:
    return quote(value, safe="")


async def read_form(request: Request) -> dict[str, str]:
    """A small urlencoded form (sign-in, sign-out, close): bounded, single values, text only."""
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if not ctype and request.headers.get("content-length", "0") == "0":
        return {}   # an empty form: the CSRF check refuses it
    if ctype != "application/x-www-form-urlencoded":
        raise InvalidRequest("Forms are sent as application/x-www-form-urlencoded.", details={"field": "body"})
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise LimitExceeded(f"The form is larger than {MAX_FORM_BYTES:,} bytes.", details={"field": "body"})
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        raise InvalidRequest("The form could not be read.", details={"field": "body"}) from None
    return {k: v for k, v in pairs}


class CsrfFailed(FlysiftError):
    status = 403
    code = "csrf_failed"


def check_csrf(ctx: Ctx, form: dict[str, str]) -> None:
    """A state-changing form must carry the token of this browser's CSRF cookie and come from this site."""
    site = ctx.request.headers.get("sec-fetch-site")
    if site not in (None, "same-origin", "none"):
        raise CsrfFailed("This form was sent from another site; open the page here and send it again.")
    if ctx.new_csrf or not ctx.signer.csrf_ok(ctx.csrf_cookie, form.get(CSRF_FIELD)):
        raise CsrfFailed("The form's security token is missing or out of date; reload the page and send it again.")


# ---- sign-in ------------------------------------------------------------------------------------------------------

async def signin_page(ctx: Ctx) -> Response:
    nxt = safe_next(ctx.request.query_params.get("next"))
    return ctx.page("signin.html", next=nxt, message=None, title="Sign in")


async def signin(ctx: Ctx) -> Response:
    form = await read_form(ctx.request)
    check_csrf(ctx, form)
    nxt = safe_next(form.get("next"))
    settings = ctx.app.state.settings
    if not settings.auth:
        return RedirectResponse(nxt, status_code=303, headers=HEADERS)
    key = form.get("key", "").strip()
    limiter: RateLimiter = ctx.app.state.limiter
    client = ctx.request.client.host if ctx.request.client else "unknown"
    try:
        limiter.hit(SIGNIN_BUCKET + client)
        key_id = key_id_of(key)
        record = await run_in_threadpool(ctx.sessions.api_key, key_id)
        verify(key, record)
    except Unauthorized as exc:
        return ctx.page("signin.html", status=401, next=nxt, message=exc.message, title="Sign in")
    assert record is not None
    resp = RedirectResponse(nxt, status_code=303, headers=HEADERS)
    resp.set_cookie(AUTH_COOKIE, ctx.signer.signin_cookie(record), max_age=SIGNIN_MAX_AGE_S, httponly=True,
                    samesite="strict", secure=ctx.request.url.scheme == "https", path="/")
    return resp


async def signout(ctx: Ctx) -> Response:
    form = await read_form(ctx.request)
    check_csrf(ctx, form)
    resp = RedirectResponse("/signin" if ctx.app.state.settings.auth else "/", status_code=303, headers=HEADERS)
    resp.delete_cookie(AUTH_COOKIE, path="/")
    return resp
