"""The reading pages: search (``/``), its exports (``/export``), a paper (``/papers/{pmcid}``), papers like it
(``/papers/{pmcid}/similar``) and a supplementary file (``/papers/{pmcid}/supplements/{file}``).

Each is a call of ``SearchService`` as the REST routes make it: the query language (``syntax=query``, as a GET
search without a session reads it; ``syntax=plain`` for the agents' reading), the gene's names under a synonym
policy (the sessions' rule), highlight fragments (``search.text.highlight``, tagged with characters the page turns
into marks of escaped text), facets, exports, more-like-this, and the marked paper of ``BrowseService.paper_view``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from search.core.errors import FlysiftError, InvalidRequest, NotFound
from search.core.models import SECTION_TYPES, PaperSearchResults, PassageSearchResults
from search.core.names import DEFAULT_COLLECTION
from search.core.query import Filters
from search.core.querylang import Syntax
from search.retrieval import exports
from search.retrieval.browse import PaperView, TermMark
from search.retrieval.service import FACETS, SearchService
from search.sessions.policy import expansion_names
from search.text.highlight import HighlightSpec
from search.web.pages import Ctx, choice, flag, int_param, param
from search.web.render import CLOSE, OPEN
from search.web.security import HEADERS

PAGE_SIZES = (10, 20, 50)
POLICIES = ("none", "snapshot", "full")
KINDS = ("papers", "passages")
SYNTAXES: tuple[Syntax, ...] = ("query", "plain")
#: the fragments a result shows: about this many characters, this many per field (titles are shorter than this,
#: so a title's fragment is the whole title)
HIGHLIGHT = HighlightSpec(pre_tag=OPEN, post_tag=CLOSE, fragment_size=300, number_of_fragments=2)
#: the export formats a result page links to, with their names for people
EXPORTS = (("csv", "CSV"), ("tsv", "TSV"), ("ris", "RIS"), ("bibtex", "BibTeX"), ("jsonl", "JSON Lines"),
           ("trec", "TREC run"))


# ---- the search form --------------------------------------------------------------------------------------------

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
    syntax: Syntax = "query"

    def params(self, **change: Any) -> dict[str, Any]:
        """The URL parameters that reproduce this search (defaults left out), with ``change`` applied."""
        out = {"q": self.q, "kind": self.kind if self.kind != "papers" else None, "gene": self.gene,
               "policy": self.policy if self.gene and self.policy != "snapshot" else None,
               "year_from": self.year_from, "year_to": self.year_to, "section": self.sections,
               "per": self.per if self.per != 10 else None, "explain": self.explain,
               "collection": self.collection if self.collection != DEFAULT_COLLECTION else None,
               "syntax": self.syntax if self.syntax != "query" else None,
               "page": self.page if self.page > 1 else None}
        out.update(change)
        return out

    def marking(self) -> dict[str, Any]:
        """The parameters a link to a paper carries so that the paper marks what this search looked for."""
        p = self.params()
        return {k: p[k] for k in ("q", "gene", "policy", "collection", "syntax")}


def read_search_form(ctx: Ctx) -> SearchForm:
    request, s = ctx.request, ctx.app.state.settings
    sections = [x.strip().upper() for x in request.query_params.getlist("section") if x.strip()][:len(SECTION_TYPES)]
    per = int_param(request, "per", 1, 50, 10) or 10
    if per not in PAGE_SIZES:
        raise InvalidRequest(f"per: one of {', '.join(map(str, PAGE_SIZES))}.", details={"field": "per"})
    syntax: Syntax = "plain" if choice(request, "syntax", SYNTAXES, "query") == "plain" else "query"
    return SearchForm(q=param(request, "q", s.max_query_chars), kind=choice(request, "kind", KINDS, "papers"),
                      gene=param(request, "gene", 200), policy=choice(request, "policy", POLICIES, "snapshot"),
                      year_from=int_param(request, "year_from", 0, 9999),
                      year_to=int_param(request, "year_to", 0, 9999), sections=sections,
                      page=int_param(request, "page", 1, s.max_offset // 10 + 1, 1) or 1, per=per,
                      explain=flag(request, "explain"),
                      collection=param(request, "collection", 63) or DEFAULT_COLLECTION, syntax=syntax)


def filters_of(form: SearchForm) -> Filters | None:
    if form.year_from is None and form.year_to is None and not form.sections:
        return None
    try:
        return Filters(year_from=form.year_from, year_to=form.year_to, section_types=form.sections or None)
    except ValidationError as e:
        msg = e.errors()[0]["msg"].removeprefix("Value error, ")
        raise InvalidRequest(f"Years: {msg}.", details={"field": "year_from"}) from None


def expansions_of(ctx: Ctx, form: SearchForm) -> list[str]:
    """The gene's names under the chosen synonym policy (the sessions' rule, ``expansion_names``)."""
    if not form.gene:
        return []
    return expansion_names(form.policy, ctx.sessions.lexicon().resolve(form.gene))  # type: ignore[arg-type]


# ---- search -----------------------------------------------------------------------------------------------------

def run_search(ctx: Ctx, form: SearchForm) -> dict[str, Any]:
    """The search a page shows: the service call of ``GET /v1/papers/search`` (passages: ``/v1/passages/search``)
    with highlight fragments, facets by year and section, and (passages) the papers' titles."""
    search, sessions = ctx.search, ctx.sessions
    out: dict[str, Any] = {"results": None, "error": None, "gene_error": None, "expansions": []}
    try:
        expansions = expansions_of(ctx, form)
    except FlysiftError as exc:
        out["gene_error"] = exc
        return out
    out["expansions"] = expansions
    try:
        common: dict[str, Any] = {
            "limit": form.per, "offset": (form.page - 1) * form.per, "filters": filters_of(form),
            "collection": form.collection, "expansions": expansions, "explain_plan": form.explain,
            "foldable": sessions.fold_set(), "compounds": sessions.compound_set(), "syntax": form.syntax,
            "highlight": HIGHLIGHT, "facets": FACETS}
        res: PaperSearchResults | PassageSearchResults
        if form.kind == "papers":
            res = search.search_papers(form.q, snippets=False, **common)
        else:
            res = search.search_passages(form.q, snippets=False, titles=True, **common)
        out["results"] = res
    except FlysiftError as exc:
        if exc.status >= 500 and exc.code != "index_missing":
            raise
        out["error"] = exc
    return out


async def search_page(ctx: Ctx) -> Response:
    s = ctx.app.state.settings
    form = read_search_form(ctx)
    if not form.q:
        stats = await run_in_threadpool(_stats, ctx.search, form.collection)
        return ctx.page("home.html", form=form, stats=stats, sections=SECTION_TYPES, title="Search")
    found = await run_in_threadpool(run_search, ctx, form)
    res = found["results"]
    pages = math.ceil(min(res.total, s.max_offset + form.per) / form.per) if res is not None else 0
    status = 200 if found["error"] is None and found["gene_error"] is None else 422
    if found["error"] is not None and found["error"].status in (404, 409, 413):
        status = found["error"].status
    return ctx.page("search.html", status=status, form=form, found=found, res=res, pages=pages,
                    sections=SECTION_TYPES, policies=POLICIES, page_sizes=PAGE_SIZES, exports=EXPORTS,
                    export_max=s.max_export_hits, title=f"{form.q} – search")


def _stats(search: SearchService, collection: str) -> Any:
    try:
        return search.engine(collection).stats()
    except FlysiftError:
        return None


# ---- exports ----------------------------------------------------------------------------------------------------

async def export_page(ctx: Ctx) -> Response:
    """``/export?…&format=csv``: the search of ``/?…`` as a file, streamed, through ``SearchService.export`` (the
    work of ``format=`` in the REST API). A GET that changes nothing, so a link is enough (no CSRF token); with auth
    on it is the signed-in person's, like every page. ``limit``: how many hits (default: the service's most)."""
    s = ctx.app.state.settings
    form = read_search_form(ctx)
    fmt = exports.check_format(choice(ctx.request, "format", exports.FORMATS, "csv"))
    assert fmt is not None
    limit = int_param(ctx.request, "limit", 1, s.max_export_hits, s.max_export_hits) or s.max_export_hits
    kind: Literal["papers", "passages"] = "passages" if form.kind == "passages" else "papers"

    def start() -> Any:
        return ctx.search.export(kind, form.q, fmt, limit=limit, filters=filters_of(form), collection=form.collection,
                                 expansions=expansions_of(ctx, form), syntax=form.syntax,
                                 foldable=ctx.sessions.fold_set(), compounds=ctx.sessions.compound_set())

    if not form.q:
        raise InvalidRequest("An export needs a query (q).", details={"field": "q"})
    pieces = await run_in_threadpool(start)
    name = f"flysift-{kind}.{exports.EXTENSIONS[fmt]}"
    return StreamingResponse((p.encode() for p in pieces), media_type=exports.MEDIA_TYPES[fmt],
                             headers={**HEADERS, "Content-Disposition": f'attachment; filename="{name}"'})


# ---- a paper ----------------------------------------------------------------------------------------------------

def _recogniser(ctx: Ctx) -> Any:
    """The term recogniser's one home (``POST /v1/terms/recognise``'s work, with its bounds) as the paper view's
    ``recognise``: per text, the terms it names."""
    from search.api.terms import recognise
    from search.schema.hidden import hidden_query
    from search.schema.terms import RecogniseRequest

    def run(texts: list[str]) -> list[list[TermMark]]:
        if not ctx.terms.names():
            raise NotFound("No ontology is indexed, so no term can be marked: run `flysift index ontology`.",
                           code="ontology_missing")
        found = recognise(ctx.terms, RecogniseRequest(texts=texts), hidden_query(None, False, None))
        return [[TermMark(start=m.start, end=m.end, term_id=m.term_id, name=m.name) for m in ms]
                for ms in found.mentions]

    return run


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def paper_view(ctx: Ctx, pmcid: str, form: SearchForm, evidence: str, mark_terms: bool = False) -> dict[str, Any]:
    """The paper as ``BrowseService.paper_view`` marks it (query words, the gene's names, ontology terms on
    request), and the passage holding ``evidence`` (a quote from an annotation)."""
    search = ctx.search
    query_error = terms_error = None
    try:
        expansions = expansions_of(ctx, form)
    except FlysiftError as exc:
        query_error, expansions = exc, []
    options: dict[str, Any] = {"collection": form.collection, "expansions": expansions, "syntax": form.syntax,
                               "foldable": ctx.sessions.fold_set(), "compounds": ctx.sessions.compound_set()}
    view: PaperView | None = None
    if query_error is None:
        try:
            view = search.paper_view(pmcid, query=form.q, **options)
        except FlysiftError as exc:   # a bad query still shows the paper, unmarked, with the reason
            if exc.status >= 500 or isinstance(exc, NotFound):
                raise
            query_error = exc
    if view is None:
        view = search.paper_view(pmcid, collection=form.collection)
    if mark_terms:
        try:
            search.mark_terms(view, form.collection, _recogniser(ctx))
        except FlysiftError as exc:
            terms_error = exc
    passages = [p for s in view.sections for p in s.passages]
    wanted = _norm(evidence)
    hit: str | None = None
    if wanted:
        hit = next((p.passage_id for p in passages if wanted in _norm(p.text)), None)
        if hit is None:   # not verbatim: the passage search ranks the paper's passages for it
            try:
                res = search.search_passages(evidence[:ctx.app.state.settings.max_query_chars], limit=1,
                                             filters=Filters(pmcids=[view.pmcid]), collection=form.collection)
                hit = res.hits[0].passage_id if res.hits else None
            except FlysiftError:
                hit = None
    return {"paper": view, "evidence_passage": hit, "query_error": query_error, "terms_error": terms_error}


async def paper_page(ctx: Ctx) -> Response:
    pmcid = ctx.request.path_params["pmcid"]
    if len(pmcid) > 256:
        raise InvalidRequest("pmcid: at most 256 characters.", details={"field": "pmcid"})
    form = read_search_form(ctx)
    evidence = param(ctx.request, "evidence", 1000)
    mark_terms = flag(ctx.request, "terms")
    view = await run_in_threadpool(paper_view, ctx, pmcid, form, evidence, mark_terms)
    return ctx.page("paper.html", form=form, evidence=evidence, mark_terms=mark_terms, **view,
                    title=view["paper"].title or pmcid)


async def similar_page(ctx: Ctx) -> Response:
    """Papers like one paper (more-like-this: its significant words against the collection, the paper left out)."""
    pmcid = ctx.request.path_params["pmcid"]
    if len(pmcid) > 256:
        raise InvalidRequest("pmcid: at most 256 characters.", details={"field": "pmcid"})
    form = read_search_form(ctx)

    def run() -> tuple[Any, PaperSearchResults]:
        paper = ctx.search.get_paper(pmcid, form.collection)
        return paper, ctx.search.more_like_this(pmcid, collection=form.collection, limit=form.per,
                                                offset=(form.page - 1) * form.per, filters=filters_of(form),
                                                highlight=HIGHLIGHT)

    paper, res = await run_in_threadpool(run)
    s = ctx.app.state.settings
    pages = math.ceil(min(res.total, s.max_offset + form.per) / form.per)
    return ctx.page("similar.html", form=form, paper=paper, res=res, pages=pages,
                    title=f"Papers like {paper.title or pmcid}")


# ---- a supplementary file ---------------------------------------------------------------------------------------

#: rows of a supplementary file's part shown per page
SUPPLEMENT_ROWS = 100


def supplement_view(ctx: Ctx, pmcid: str, file: str, part: str | None, start: int | None, form: SearchForm
                    ) -> dict[str, Any]:
    """A page of one part of a supplementary file (``SearchService.read_supplement``), query words and the gene's
    names marked by the paper view's marker."""
    search = ctx.search
    page = search.read_supplement(pmcid, file, part=part or None, start=start, limit=SUPPLEMENT_ROWS,
                                  collection=form.collection)
    try:
        marker = search.marker(form.q, expansions_of(ctx, form), syntax=form.syntax,
                               foldable=ctx.sessions.fold_set(), compounds=ctx.sessions.compound_set())
    except FlysiftError:
        marker = search.marker()
    rows = [(row.n, [(c, marker.marks(c)) for c in row.cells]) for row in page.rows]
    return {"read": page, "rows": rows}


async def supplement_page(ctx: Ctx) -> Response:
    pmcid, file = ctx.request.path_params["pmcid"], ctx.request.path_params["file"]
    if len(pmcid) > 256 or len(file) > 300:
        raise InvalidRequest("pmcid or file: too long.", details={"field": "file"})
    form = read_search_form(ctx)
    part = param(ctx.request, "part", 300)
    start = int_param(ctx.request, "start", 0, 2**31)
    view = await run_in_threadpool(supplement_view, ctx, pmcid, file, part, start, form)
    f = view["read"].file
    return ctx.page("supplement.html", form=form, **view, title=f"{f.label or f.name} – {view['read'].pmcid}")
