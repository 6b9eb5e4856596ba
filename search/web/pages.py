"""The page routes: search, paper, terms, sessions, runs, sign-in. Each one reads its parameters within bounds,
asks the services the REST routes use (``SearchService``, ``SessionService``, ``TermService``, the FlyAOC rules of
``search.flyaoc``) and renders a template; nothing here ranks, budgets or validates on its own.

Every handler runs its service calls in one thread-pool hop and answers HTML with the security headers of
``search.web.security``. A ``FlysiftError`` becomes an error page with the same status and message the REST API
would answer (a query error is shown next to the search box instead).
"""

from __future__ import annotations

import logging
import math
import re
from bisect import bisect_left
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from search.core.errors import FlysiftError, InvalidRequest, LimitExceeded, NotFound
from search.core.models import ABSTRACT, SECTION_TYPES, Paper, Passage
from search.core.names import DEFAULT_COLLECTION
from search.core.query import Filters
from search.flyaoc.groundtruth import GeneRecord, load_ground_truth
from search.ontology.service import TermService
from search.retrieval.cursors import load_secret
from search.retrieval.service import SearchService
from search.schema.sessions import Session
from search.schema.terms import TermRef
from search.sessions.keys import LOCAL, Principal, RateLimiter, Unauthorized, key_id_of, verify
from search.sessions.policy import expansion_names, papers_read_in, trace_coverage
from search.sessions.service import SessionService
from search.text.analysis import stem
from search.text.passages import split_passages
from search.text.snippets import Highlighter
from search.web import runs as run_files
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

PAGE_SIZES = (10, 20, 50)
POLICIES = ("none", "snapshot", "full")
KINDS = ("papers", "passages")
MAX_FORM_BYTES = 16_384
MAX_PARAM_CHARS = 2000
#: trace events shown per page of a session audit
TRACE_PAGE = 500
SESSIONS_PAGE = 50
#: returned ids listed per trace event (the rest are counted)
IDS_SHOWN = 20
#: sign-in attempts are rate-limited per client address in this bucket (besides each key's own limit)
SIGNIN_BUCKET = "signin:"
TERM_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]*:[A-Za-z0-9_.-]{1,60}")
PASSAGE_ID = re.compile(r"(.+):(\d+):(\d+)(?:\.(\d+))?")
#: a supplement passage's id: ``PMCID:S<file>.<part>:<chunk>`` (``search.core.supplements.passage_id``)
SUPPLEMENT_ID = re.compile(r"(.+):S(\d+)\.(\d+):(\d+)")


# ---- parameters ---------------------------------------------------------------------------------------------------

def _param(request: Request, name: str, max_chars: int = MAX_PARAM_CHARS) -> str:
    value = request.query_params.get(name, "")
    if len(value) > max_chars:
        raise LimitExceeded(f"{name} is {len(value):,} characters; at most {max_chars:,}.",
                            details={"field": name, "max": max_chars})
    return value.strip()


def _int(request: Request, name: str, lo: int, hi: int, default: int | None = None) -> int | None:
    raw = _param(request, name, 20)
    if not raw:
        return default
    if not re.fullmatch(r"-?\d{1,18}", raw):
        raise InvalidRequest(f"{name}: a whole number, please (got {raw[:20]!r}).", details={"field": name})
    value = int(raw)
    if not lo <= value <= hi:
        raise InvalidRequest(f"{name}: between {lo} and {hi} (got {value}).", details={"field": name})
    return value


def _choice(request: Request, name: str, choices: tuple[str, ...], default: str) -> str:
    value = _param(request, name, 40) or default
    if value not in choices:
        raise InvalidRequest(f"{name}: one of {', '.join(choices)} (got {value[:40]!r}).", details={"field": name})
    return value


def _flag(request: Request, name: str) -> bool:
    return _param(request, name, 10).lower() in ("1", "true", "on", "yes")


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
                resp = RedirectResponse(f"/signin?next={_quote(target)}", status_code=303, headers=HEADERS)
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


def _quote(value: str) -> str:
    return quote(value, safe="")


async def _form(request: Request) -> dict[str, str]:
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


# ---- search -------------------------------------------------------------------------------------------------------

@dataclass
class SearchForm:
    q: str = ""
    kind: str = "papers"
    gene: str = ""
    policy: str = "snapshot"
    year_from: int | None = None
    year_to: int | None = None
    sections: list[str] = field(default_factory=list)
    page: int = 1
    per: int = 10
    explain: bool = False
    collection: str = DEFAULT_COLLECTION

    def params(self, **change: Any) -> dict[str, Any]:
        out = {"q": self.q, "kind": self.kind if self.kind != "papers" else None, "gene": self.gene,
               "policy": self.policy if self.gene and self.policy != "snapshot" else None,
               "year_from": self.year_from, "year_to": self.year_to, "section": self.sections,
               "per": self.per if self.per != 10 else None, "explain": self.explain,
               "collection": self.collection if self.collection != DEFAULT_COLLECTION else None,
               "page": self.page if self.page > 1 else None}
        out.update(change)
        return out


def read_search_form(request: Request, max_query: int, max_offset: int) -> SearchForm:
    sections = [s.strip().upper() for s in request.query_params.getlist("section") if s.strip()][:len(SECTION_TYPES)]
    per = _int(request, "per", 1, 50, 10) or 10
    if per not in PAGE_SIZES:
        raise InvalidRequest(f"per: one of {', '.join(map(str, PAGE_SIZES))}.", details={"field": "per"})
    return SearchForm(q=_param(request, "q", max_query), kind=_choice(request, "kind", KINDS, "papers"),
                      gene=_param(request, "gene", 200), policy=_choice(request, "policy", POLICIES, "snapshot"),
                      year_from=_int(request, "year_from", 0, 9999), year_to=_int(request, "year_to", 0, 9999),
                      sections=sections, page=_int(request, "page", 1, max_offset // 10 + 1, 1) or 1, per=per,
                      explain=_flag(request, "explain"),
                      collection=_param(request, "collection", 63) or DEFAULT_COLLECTION)


def _filters(form: SearchForm) -> Filters | None:
    if form.year_from is None and form.year_to is None and not form.sections:
        return None
    try:
        return Filters(year_from=form.year_from, year_to=form.year_to, section_types=form.sections or None)
    except ValidationError as e:
        msg = e.errors()[0]["msg"].removeprefix("Value error, ")
        raise InvalidRequest(f"Years: {msg}.", details={"field": "year_from"}) from None


def _expansions(ctx: Ctx, form: SearchForm) -> list[str]:
    """The gene's names under the chosen synonym policy (the sessions' rule, ``expansion_names``)."""
    if not form.gene:
        return []
    return expansion_names(form.policy, ctx.sessions.lexicon().resolve(form.gene))  # type: ignore[arg-type]


def run_search(ctx: Ctx, form: SearchForm) -> dict[str, Any]:
    """The search a page shows: the same service call as ``POST /v1/papers/search`` (snippets on)."""
    search, sessions = ctx.search, ctx.sessions
    out: dict[str, Any] = {"results": None, "error": None, "gene_error": None, "expansions": []}
    try:
        expansions = _expansions(ctx, form)
    except FlysiftError as exc:
        out["gene_error"] = exc
        return out
    out["expansions"] = expansions
    offset = (form.page - 1) * form.per
    call = search.search_papers if form.kind == "papers" else search.search_passages
    try:
        out["results"] = call(form.q, limit=form.per, offset=offset, filters=_filters(form), snippets=True,
                              collection=form.collection, expansions=expansions, explain_plan=form.explain,
                              foldable=sessions.fold_set())
    except FlysiftError as exc:
        if exc.status >= 500 and exc.code != "index_missing":
            raise
        out["error"] = exc
    return out


async def search_page(ctx: Ctx) -> Response:
    s = ctx.app.state.settings
    form = read_search_form(ctx.request, s.max_query_chars, s.max_offset)
    if not form.q:
        stats = await run_in_threadpool(_stats, ctx.search, form.collection)
        return ctx.page("home.html", form=form, stats=stats, sections=SECTION_TYPES, title="Search")
    found = await run_in_threadpool(run_search, ctx, form)
    res = found["results"]
    pages = math.ceil(min(res.total, s.max_offset + form.per) / form.per) if res is not None else 0
    status = 200 if found["error"] is None and found["gene_error"] is None else 422
    if found["error"] is not None and found["error"].status in (404, 409):
        status = found["error"].status
    return ctx.page("search.html", status=status, form=form, found=found, res=res, pages=pages,
                    sections=SECTION_TYPES, policies=POLICIES, page_sizes=PAGE_SIZES, title=f"{form.q} – search")


def _stats(search: SearchService, collection: str) -> Any:
    try:
        return search.engine(collection).stats()
    except FlysiftError:
        return None


# ---- paper --------------------------------------------------------------------------------------------------------

@dataclass
class Para:
    passage: Passage
    html: Any
    evidence: bool = False


@dataclass
class Sec:
    anchor: str
    heading: str
    type: str
    paras: list[Para]


def _term_mentions(ctx: Ctx, texts: list[str]) -> list[list[tuple[int, int, str, str]]]:
    """Ontology terms named in a paper's texts, by the term recogniser's one home (``POST /v1/terms/recognise``'s work,
    with its bounds): per text, (start, end, term id, name)."""
    from search.api.terms import recognise
    from search.schema.hidden import hidden_query
    from search.schema.terms import RecogniseRequest

    if not ctx.terms.names():
        raise NotFound("No ontology is indexed, so no term can be marked: run `flysift index ontology`.",
                       code="ontology_missing")
    found = recognise(ctx.terms, RecogniseRequest(texts=texts), hidden_query(None, False, None))
    return [[(m.start, m.end, m.term_id, m.name) for m in ms] for ms in found.mentions]


def _marker(ctx: Ctx, form: SearchForm) -> Callable[..., list[Any]]:
    """A function that marks texts: query words as ``q``, the gene's names as ``g``, where the planner's clauses
    match (``search.text.snippets.Highlighter``, as the engines' snippets). The texts are highlighted as one, joined by
    blank lines (no token spans whitespace): two passes per page, not two per passage."""
    from search.web.render import mark

    if not form.q and not form.gene:
        return lambda texts, terms=None: [mark(t, terms=terms[i] if terms else ()) for i, t in enumerate(texts)]
    expansions = _expansions(ctx, form)
    query = ctx.search.build_query(form.q or form.gene, None, expansions, foldable=ctx.sessions.fold_set())
    names = {c.text for c in query.named()}   # a query word that is one of the gene's names is marked as a name
    words = Highlighter([c for c in query.clauses if not c.name and c.text not in names], stem)
    genes = Highlighter(query.named(), stem) if names else None

    def marked(texts: list[str], terms: list[list[tuple[int, int, str, str]]] | None = None) -> list[Any]:
        whole = "\n\n".join(texts)
        g = genes.spans(whole) if genes else []
        starts = [s for s, _ in g]

        def free(s: int, e: int) -> bool:   # not in the gene span starting last before e (mark() merges the rest)
            i = bisect_left(starts, e) - 1
            return i < 0 or g[i][1] <= s

        spans = sorted([(s, e, "g") for s, e in g] + [(s, e, "q") for s, e in words.spans(whole) if free(s, e)])
        out: list[Any] = []
        start, i = 0, 0
        for t in texts:
            end = start + len(t)
            mine = []
            while i < len(spans) and spans[i][0] < end:
                mine.append((spans[i][0] - start, spans[i][1] - start, spans[i][2]))
                i += 1
            out.append(mark(t, more=mine, terms=terms[len(out)] if terms else ()))
            start = end + 2
        return out

    return marked


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def paper_view(ctx: Ctx, pmcid: str, form: SearchForm, evidence: str, mark_terms: bool = False) -> dict[str, Any]:
    paper: Paper = ctx.search.get_paper(pmcid, form.collection)
    query_error = None
    try:
        marked = _marker(ctx, form)
    except FlysiftError as exc:   # a bad query still shows the paper, unmarked, with the reason
        query_error, marked = exc, _marker(ctx, SearchForm(collection=form.collection))
    passages = split_passages(paper)
    wanted = _norm(evidence)
    hit: str | None = None
    if wanted:
        hit = next((p.id for p in passages if wanted in _norm(p.text)), None)
        if hit is None:   # not verbatim: the passage search ranks the paper's passages for it
            try:
                res = ctx.search.search_passages(evidence[:ctx.app.state.settings.max_query_chars], limit=1,
                                                 filters=Filters(pmcids=[paper.pmcid]), collection=form.collection)
                hit = res.hits[0].passage_id if res.hits else None
            except FlysiftError:
                hit = None
    by_section: dict[int, list[Passage]] = {}
    for p in passages:
        by_section.setdefault(p.section_index, []).append(p)
    texts = [paper.title, *(p.text for p in passages)]
    title_html, *marks = marked(texts)
    terms_error = None
    if mark_terms:
        try:
            mentions = _term_mentions(ctx, texts)
            title_html, *marks = marked(texts, mentions)
        except FlysiftError as exc:
            terms_error = exc
    html_of = {p.id: m for p, m in zip(passages, marks, strict=True)}
    sections: list[Sec] = []
    for si, ps in sorted(by_section.items()):
        if si == 0:
            heading, typ = "Abstract", ABSTRACT
        else:
            sec = paper.sections[si - 1]
            heading, typ = sec.title or sec.type.title(), sec.type
        sections.append(Sec(anchor=f"s{si}", heading=heading, type=typ,
                            paras=[Para(p, html_of[p.id], evidence=p.id == hit) for p in ps]))
    return {"paper": paper, "sections": sections, "evidence_passage": hit, "query_error": query_error,
            "title_html": title_html, "terms_error": terms_error}


async def paper_page(ctx: Ctx) -> Response:
    s = ctx.app.state.settings
    pmcid = ctx.request.path_params["pmcid"]
    if len(pmcid) > 256:
        raise InvalidRequest("pmcid: at most 256 characters.", details={"field": "pmcid"})
    form = read_search_form(ctx.request, s.max_query_chars, s.max_offset)
    evidence = _param(ctx.request, "evidence", 1000)
    mark_terms = _flag(ctx.request, "terms")
    view = await run_in_threadpool(paper_view, ctx, pmcid, form, evidence, mark_terms)
    return ctx.page("paper.html", form=form, evidence=evidence, mark_terms=mark_terms, **view,
                    title=view["paper"].title or pmcid)


#: rows of a supplementary file's part shown per page
SUPPLEMENT_ROWS = 100


def supplement_view(ctx: Ctx, pmcid: str, file: str, part: str | None, start: int | None, form: SearchForm
                    ) -> dict[str, Any]:
    """A page of one part of a supplementary file (``SearchService.read_supplement``), query words marked."""
    page = ctx.search.read_supplement(pmcid, file, part=part or None, start=start, limit=SUPPLEMENT_ROWS,
                                      collection=form.collection)
    try:
        marked = _marker(ctx, form)
    except FlysiftError:
        marked = _marker(ctx, SearchForm(collection=form.collection))
    cells = [c for row in page.rows for c in row.cells]
    html = iter(marked(cells))
    rows = [(row.n, [next(html) for _ in row.cells]) for row in page.rows]
    return {"read": page, "rows": rows}


async def supplement_page(ctx: Ctx) -> Response:
    s = ctx.app.state.settings
    pmcid, file = ctx.request.path_params["pmcid"], ctx.request.path_params["file"]
    if len(pmcid) > 256 or len(file) > 300:
        raise InvalidRequest("pmcid or file: too long.", details={"field": "file"})
    form = read_search_form(ctx.request, s.max_query_chars, s.max_offset)
    part = _param(ctx.request, "part", 300)
    start = _int(ctx.request, "start", 0, 2**31)
    view = await run_in_threadpool(supplement_view, ctx, pmcid, file, part, start, form)
    f = view["read"].file
    return ctx.page("supplement.html", form=form, **view, title=f"{f.label or f.name} – {view['read'].pmcid}")


# ---- terms --------------------------------------------------------------------------------------------------------

async def terms_page(ctx: Ctx) -> Response:
    q = _param(ctx.request, "q", 500)
    names = await run_in_threadpool(ctx.terms.names)
    ontology = _param(ctx.request, "ontology", 40) or (names[0] if names else "go")
    if "go" in names and not ctx.request.query_params.get("ontology"):
        ontology = "go"
    res, error = None, None
    if q:
        try:
            res = await run_in_threadpool(lambda: ctx.terms.search(ontology, q, limit=25))
        except FlysiftError as exc:
            if exc.status >= 500:
                raise
            error = exc
    status = 200 if error is None else error.status
    return ctx.page("terms.html", status=status, q=q, ontology=ontology, ontologies=names, res=res, error=error,
                    title=f"{q} – terms" if q else "Terms")


def term_view(ctx: Ctx, term_id: str, collection: str) -> dict[str, Any]:
    svc = ctx.terms
    found = svc.lookup(term_id)
    parents = {r.id: r for r in svc.related(found.id, "parents", relations="all").terms}
    by_relation = [(rel, [parents.get(i) or _ref(i) for i in ids]) for rel, ids in sorted(found.term.parents.items())]
    children = svc.related(found.id, "children", relations="hierarchy", limit=200)
    mentions, mention_query = None, ""
    if found.term.name and not found.term.obsolete:
        mention_query = f'"{found.term.name}"'
        try:
            mentions = ctx.search.search_passages(mention_query, limit=10, collection=collection, snippets=True)
        except FlysiftError:
            mentions = None
    return {"found": found, "term": found.term, "parents": by_relation, "children": children, "mentions": mentions,
            "mention_query": mention_query}


def _ref(term_id: str) -> TermRef:
    return TermRef(id=term_id, name="")


async def term_page(ctx: Ctx) -> Response:
    term_id = ctx.request.path_params["term_id"]
    if len(term_id) > 100:
        raise InvalidRequest("term id: at most 100 characters.", details={"field": "term_id"})
    collection = _param(ctx.request, "collection", 63) or DEFAULT_COLLECTION
    view = await run_in_threadpool(term_view, ctx, term_id, collection)
    return ctx.page("term.html", **view, title=f"{view['term'].id} {view['term'].name}")


# ---- sessions -----------------------------------------------------------------------------------------------------

async def sessions_page(ctx: Ctx) -> Response:
    offset = _int(ctx.request, "offset", 0, 9000, 0) or 0
    team = _param(ctx.request, "team", 64) or None
    rows = await run_in_threadpool(ctx.sessions.list_sessions, ctx.caller, team, SESSIONS_PAGE + 1, offset)
    return ctx.page("sessions.html", sessions=rows[:SESSIONS_PAGE], more=len(rows) > SESSIONS_PAGE, offset=offset,
                    page_size=SESSIONS_PAGE, team=team, title="Sessions")


@dataclass
class Event:
    """A trace event as the timeline shows it."""

    seq: int
    time: float
    kind: str           # search, read, terms, submit, names, other
    tool: str
    status: int
    summary: str
    ids: list[tuple[str, str]]   # (id, link)
    more_ids: int
    error: dict[str, Any] | None
    refused: bool


def _link_for(returned: str) -> str:
    supp = SUPPLEMENT_ID.fullmatch(returned)
    if supp:
        return f"/papers/{_quote(supp.group(1))}/supplements/{supp.group(2)}?part={supp.group(3)}"
    m = PASSAGE_ID.fullmatch(returned)
    if returned.startswith("PMC") and m:
        return f"/papers/{_quote(m.group(1))}#{_quote(returned)}"
    if returned.startswith(("PMC", "PMID:", "DOI:")):
        return f"/papers/{_quote(returned)}"
    if TERM_ID.fullmatch(returned):
        return f"/terms/{_quote(returned)}"
    return ""


def _summary(args: dict[str, Any]) -> str:
    raw = args.get("body")
    body: dict[str, Any] = raw if isinstance(raw, dict) else {}
    parts = []
    for key in ("query", "q", "text", "gene", "pmcid", "term_id", "sections", "names"):
        v = body.get(key) if key in body else args.get(key)
        if v not in (None, "", []):
            parts.append(f"{key}={v if isinstance(v, str) else str(v)}"[:200])
    return " · ".join(parts)


KIND_OF = {"search_papers": "search", "search_passages": "search", "get_paper": "read", "submit": "submit",
           "register_names": "names"}


def timeline(trace: list[Any]) -> list[Event]:
    out = []
    for ev in trace:
        kind = KIND_OF.get(ev.tool, "terms" if "term" in ev.tool else "other")
        out.append(Event(seq=ev.seq, time=ev.time, kind=kind, tool=ev.tool, status=ev.status,
                         summary=_summary(ev.arguments), ids=[(i, _link_for(i)) for i in ev.returned_ids[:IDS_SHOWN]],
                         more_ids=max(0, len(ev.returned_ids) - IDS_SHOWN), error=ev.error,
                         refused=bool(ev.error) and ev.status in (403, 409, 429)))
    return out


def _term_names(ctx: Ctx, session: Session | None, ids: list[str]) -> dict[str, str | None]:
    """Names of submitted term ids; ``None`` for an id the session hides (its name stays hidden too)."""
    hidden = session.hidden_terms if session else None
    names = hidden.names() if hidden is not None else []
    out: dict[str, str | None] = {}
    for i in ids[:500]:
        try:
            found = ctx.terms.lookup(i, hidden=names or None, hidden_descendants=bool(hidden and hidden.descendants))
            out[i] = found.term.name
        except FlysiftError as exc:
            out[i] = None if exc.code == "term_hidden" else ""
    return out


def _submitted_ids(annotations: dict[str, Any]) -> list[str]:
    ids = []
    for key, fields in (("task1_function", ("go_id",)), ("task2_expression", ("anatomy_id", "stage_id"))):
        items = annotations.get(key)
        for item in items if isinstance(items, list) else []:
            for f in fields:
                if isinstance(item, dict) and isinstance(item.get(f), str):
                    ids.append(item[f])
    return list(dict.fromkeys(ids))


def session_view(ctx: Ctx, session_id: str, after: int) -> dict[str, Any]:
    sessions = ctx.sessions
    s = sessions.get(session_id, ctx.caller)
    trace = sessions.trace(s, after, TRACE_PAGE + 1)
    subs = sessions.submissions(s)
    coverage, coverage_note = None, None
    try:
        coverage = sessions.coverage(s, None)
    except FlysiftError as exc:
        coverage_note = exc.message
    last = subs[-1] if subs else None
    names = _term_names(ctx, s, _submitted_ids(last.annotations)) if last else {}
    return {"s": s, "events": timeline(trace[:TRACE_PAGE]), "more_events": len(trace) > TRACE_PAGE,
            "next_after": trace[TRACE_PAGE - 1].seq if len(trace) > TRACE_PAGE else None, "submissions": subs,
            "last": last, "term_names": names, "coverage": coverage, "coverage_note": coverage_note,
            "refusals": sum(1 for e in trace if e.error and e.status in (403, 409, 429))}


async def session_page(ctx: Ctx) -> Response:
    sid = ctx.request.path_params["session_id"]
    after = _int(ctx.request, "after", 0, 2**62, 0) or 0
    view = await run_in_threadpool(session_view, ctx, sid, after)
    return ctx.page("session.html", **view, title=f"Session {view['s'].id}")


async def close_session(ctx: Ctx) -> Response:
    form = await _form(ctx.request)
    check_csrf(ctx, form)
    sid = ctx.request.path_params["session_id"]
    await run_in_threadpool(lambda: ctx.sessions.close(ctx.sessions.get(sid, ctx.caller)))
    return RedirectResponse(f"/sessions/{_quote(sid)}", status_code=303, headers=HEADERS)


# ---- runs ---------------------------------------------------------------------------------------------------------

def _truth(ctx: Ctx) -> dict[str, GeneRecord] | None:
    """The configured FlyAOC ground truth, read once per process."""
    gt = ctx.app.state.settings.ground_truth
    if gt is None:
        return None
    cache = ctx.app.state.__dict__.setdefault("web_truth", {})
    if gt not in cache:
        cache[gt] = load_ground_truth(gt)
    return cache[gt]


async def runs_page(ctx: Ctx) -> Response:
    root = ctx.app.state.settings.runs_dir
    listed = await run_in_threadpool(run_files.list_runs, root)
    return ctx.page("runs.html", runs=list(listed), root_set=root is not None, title="Runs")


def run_view(ctx: Ctx, name: str, gene: str) -> dict[str, Any]:
    run = run_files.open_run(ctx.app.state.settings.runs_dir, name)
    truth = _truth(ctx)
    rows: list[dict[str, Any]] = []
    for gid in run.genes:
        g = run.gene(gid)
        t = truth.get(gid) if truth else None
        cmp = run_files.compare(g.prediction, t)
        cov = trace_coverage(gid, papers_read_in(g.trace), g.trace, list(t.cited_pmcids), "ground_truth") \
            if t is not None and g.trace else None
        rows.append({"g": g, "compare": cmp, "coverage": cov, "truth": t})
    chosen = next((r for r in rows if r["g"].gene_id == gene), None)
    if gene and chosen is None:
        run.gene(gene)   # 404 gene_not_in_run
    ids = [i for c in chosen["compare"] if c.task != "synonyms" for i in (*c.hits, *c.misses, *c.wrong)] \
        if chosen else []
    tasks = [t for t in ("go", "anatomy", "synonyms")   # a task no gene predicts or expects is left out
             if any(c.task == t and (c.hits or c.misses or c.wrong) for r in rows for c in r["compare"])]
    return {"run": run, "rows": rows, "chosen": chosen, "has_truth": truth is not None, "tasks": tasks,
            "term_names": _term_names(ctx, None, list(dict.fromkeys(ids)))}


async def run_page(ctx: Ctx) -> Response:
    name = ctx.request.path_params["name"]
    gene = _param(ctx.request, "gene", 40)
    view = await run_in_threadpool(run_view, ctx, name, gene)
    return ctx.page("run.html", **view, title=f"Run {name}")


# ---- sign-in ------------------------------------------------------------------------------------------------------

async def signin_page(ctx: Ctx) -> Response:
    nxt = safe_next(ctx.request.query_params.get("next"))
    return ctx.page("signin.html", next=nxt, message=None, title="Sign in")


async def signin(ctx: Ctx) -> Response:
    form = await _form(ctx.request)
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
    form = await _form(ctx.request)
    check_csrf(ctx, form)
    resp = RedirectResponse("/signin" if ctx.app.state.settings.auth else "/", status_code=303, headers=HEADERS)
    resp.delete_cookie(AUTH_COOKIE, path="/")
    return resp
