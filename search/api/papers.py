"""Paper and passage search, paper text, health and stats: the read side (index writes are ``search.api.builds``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse

from search.api.deps import CurrentSession, Search
from search.api.fast import lean
from search.api.respond import answer, dump, json_response
from search.core.errors import InvalidRequest
from search.core.models import IndexStats, PaperSearchResults, PaperText, PassageSearchResults
from search.core.names import DEFAULT_COLLECTION, index_missing
from search.core.query import HighlightSpec
from search.core.querylang import Syntax
from search.retrieval import exports
from search.retrieval.service import SearchService
from search.schema.papers import CollectionList, SearchRequest
from search.schema.sessions import Session
from search.sessions.models import ReadCharge
from search.sessions.policy import search_filters
from search.sessions.service import SessionService

router = APIRouter(prefix="/v1")


def _svc(request: Request) -> SearchService:
    return request.app.state.search


def _sessions(request: Request) -> SessionService:  # read here, not as a dependency: each one costs per request
    return request.app.state.sessions


def _inline(request: Request, body: SearchRequest) -> bool:
    """A BM25 search on an engine that searches in process (``Capabilities.in_process``: the embedded engine) is CPU
    work on files already open: it runs on the event loop (one worker per core keeps the cores busy); a cluster
    engine and dense models do I/O and take the hop."""
    return body.mode == "bm25" and _svc(request).engine().capabilities.in_process


@router.get("/health", tags=["service"])
def health(request: Request) -> dict:
    eng = _svc(request).engine()
    return {"status": "ok", "engine": eng.name, "index": eng.has_index()}


@router.get("/stats", response_model=IndexStats, tags=["service"])
def stats(search: Search, collection: str = DEFAULT_COLLECTION) -> IndexStats:
    """Counts of the published build. The default collection answers zeros before it is indexed; any other collection
    without a published build does not exist (404)."""
    st = search.engine(collection).stats()
    if st.build is None and collection != DEFAULT_COLLECTION:
        raise index_missing(collection, f"Collection {collection!r} does not exist: it has no published build.")
    return st


# Search and read routes are async: their blocking work (expansions, engine, serialisation) runs in one hop
# (``search.api.respond``; none for a BM25 search on the embedded engine: ``_inline``) and the answer is not
# re-validated; ``response_model`` documents it.

def _concepts(session: Session | None) -> bool:
    """Whether ``term:`` may be searched: not in a session that hides terms (mentions would name them)."""
    return session is None or session.hidden_terms is None


def _syntax(body: SearchRequest, session: Session | None) -> Syntax:
    """The request's syntax; by default plain text for an agent's call (within a session), the query language for
    everyone else (docs/search.md, "Query language")."""
    return body.syntax or ("plain" if session is not None else "query")


async def _export(request: Request, kind: Literal["papers", "passages"], body: SearchRequest,
                  session: Session | None, fmt: exports.Format) -> Response:
    """A search's hits as a file, streamed: the query is read and the first hits fetched before the answer starts
    (errors are answered as JSON), the rest as the client reads."""
    search, sessions = _svc(request), _sessions(request)
    size = body.limit if "limit" in body.model_fields_set else (body.max_hits or search.settings.max_export_hits)

    def start() -> Iterator[str]:
        return search.export(kind, body.query, fmt, limit=size, filters=search_filters(session, body.filters),
                             collection=body.collection,
                             expansions=sessions.expansions(body.gene, session), syntax=_syntax(body, session),
                             foldable=sessions.fold_set(), compounds=sessions.compound_set(), qid=body.trec_qid,
                             tag=body.run_tag, concepts=_concepts(session))

    pieces = await run_in_threadpool(start)
    name = f"flysift-{kind}.{exports.EXTENSIONS[fmt]}"
    return StreamingResponse((p.encode() for p in pieces), media_type=exports.MEDIA_TYPES[fmt],
                             headers={"Content-Disposition": f'attachment; filename="{name}"'})


def _format(body: SearchRequest, request: Request) -> exports.Format | None:
    return body.format or exports.format_from_accept(request.headers.get("accept"))


@router.post("/papers/search", response_model=PaperSearchResults, tags=["papers"])
@lean
async def search_papers(body: SearchRequest, request: Request, session: CurrentSession) -> Response:
    """Papers best matching a query. With ``format`` (or an ``Accept`` of one), the hits as a streamed file."""
    if fmt := _format(body, request):
        return await _export(request, "papers", body, session, fmt)
    search, sessions = _svc(request), _sessions(request)
    return await answer(lambda: search.search_papers(
        body.query, limit=body.limit, offset=body.offset, filters=search_filters(session, body.filters),
        snippets=bool(body.snippets),
        collection=body.collection, expansions=sessions.expansions(body.gene, session), mode=body.mode,
        explain_plan=body.explain, foldable=sessions.fold_set(), syntax=_syntax(body, session),
        highlight=body.highlight_spec(), facets=body.facets or (), compounds=sessions.compound_set(),
        concepts=_concepts(session)), inline=_inline(request, body))


@router.post("/passages/search", response_model=PassageSearchResults, tags=["papers"])
@lean
async def search_passages(body: SearchRequest, request: Request, session: CurrentSession) -> Response:
    """Passages best matching a query. With ``format`` (or an ``Accept`` of one), the hits as a streamed file."""
    if fmt := _format(body, request):
        return await _export(request, "passages", body, session, fmt)
    search, sessions = _svc(request), _sessions(request)
    return await answer(lambda: search.search_passages(
        body.query, limit=body.limit, offset=body.offset, filters=search_filters(session, body.filters),
        snippets=body.snippets is not False, collection=body.collection,
        expansions=sessions.expansions(body.gene, session), mode=body.mode, explain_plan=body.explain,
        foldable=sessions.fold_set(), syntax=_syntax(body, session), highlight=body.highlight_spec(),
        facets=body.facets or (), compounds=sessions.compound_set(), titles=body.titles,
        concepts=_concepts(session)), inline=_inline(request, body))


def _from_query(params: dict) -> SearchRequest:
    """A GET search's parameters as the POST body they stand for (the same checks, the same answer)."""
    filters = {k: params.pop(k) for k in ("year_from", "year_to") if params.get(k) is not None}
    sections = [x for s in params.pop("section") or [] for x in s.split(",") if x]
    pmcids = [x for s in params.pop("pmcid") or [] for x in s.split(",") if x]
    if sections:
        filters["section_types"] = sections
    if pmcids:
        filters["pmcids"] = pmcids
    spec = {k: params.pop(k) for k in ("pre_tag", "post_tag", "fragment_size", "number_of_fragments", "encoder")}
    spec = {k: v for k, v in spec.items() if v is not None}
    if params.get("highlight") or spec:
        params["highlight"] = spec or True
    facets = [x for s in params.pop("facets") or [] for x in s.split(",") if x]
    data = {k: v for k, v in params.items() if v is not None}
    if filters:
        data["filters"] = filters
    if facets:
        data["facets"] = facets
    try:
        return SearchRequest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise InvalidRequest(f"{where}: {first['msg']}", details={"field": where}) from None


def _get_params(query: Annotated[str, Query(description="The query (the query language unless syntax=plain)")],
                limit: int = 10, offset: int = 0, collection: str = DEFAULT_COLLECTION, year_from: int | None = None,
                year_to: int | None = None,
                section: Annotated[list[str] | None, Query(description="Section types (repeat or comma-separate)")]
                = None,
                pmcid: Annotated[list[str] | None, Query(description="Only these papers (repeat or comma-separate)")]
                = None,
                gene: str | None = None, mode: Literal["bm25", "dense", "hybrid"] = "bm25",
                snippets: bool | None = None, explain: bool = False,
                syntax: Literal["query", "plain"] | None = None, highlight: bool = False,
                pre_tag: str | None = None, post_tag: str | None = None, fragment_size: int | None = None,
                number_of_fragments: int | None = None, encoder: Literal["default", "html"] | None = None,
                facets: Annotated[list[str] | None, Query(description="year, section (repeat or comma-separate)")]
                = None,
                format: Literal["csv", "tsv", "ris", "bibtex", "jsonl", "trec"] | None = None,
                max_hits: int | None = None, trec_qid: str = "1", run_tag: str = "flysift",
                titles: bool = False) -> SearchRequest:
    return _from_query(dict(locals()))


@router.get("/papers/search", response_model=PaperSearchResults, tags=["papers"])
async def search_papers_get(request: Request, session: CurrentSession,
                            body: Annotated[SearchRequest, Depends(_get_params)]) -> Response:
    """The paper search of ``POST /v1/papers/search`` as a link: the same fields as query parameters (filters as
    ``year_from``, ``year_to``, ``section``, ``pmcid``; highlight settings as ``pre_tag``, ``fragment_size``, …), the
    same answer."""
    return await search_papers(_explicit(body, request), request, session)


@router.get("/passages/search", response_model=PassageSearchResults, tags=["papers"])
async def search_passages_get(request: Request, session: CurrentSession,
                              body: Annotated[SearchRequest, Depends(_get_params)]) -> Response:
    """The passage search of ``POST /v1/passages/search`` as a link (see ``GET /v1/papers/search``)."""
    return await search_passages(_explicit(body, request), request, session)


def _explicit(body: SearchRequest, request: Request) -> SearchRequest:
    """Marks ``limit`` as given when the link gives it (an export then holds that many hits)."""
    if "limit" not in request.query_params:
        body.__pydantic_fields_set__.discard("limit")
    return body


@router.get("/collections", response_model=CollectionList, tags=["service"])
def collections(search: Search) -> CollectionList:
    """Every collection with a published build: papers, passages, build, index size and the ontologies beside it."""
    return CollectionList(engine=search.engine().name, collections=search.collections())


@router.get("/papers/{pmcid}/similar", response_model=PaperSearchResults, tags=["papers"])
def similar_papers(pmcid: str, search: Search, collection: str = DEFAULT_COLLECTION,
                   limit: Annotated[int, Query(ge=1, le=100)] = 10, offset: Annotated[int, Query(ge=0)] = 0,
                   snippets: bool = False, highlight: bool = False) -> PaperSearchResults:
    """Papers like this one (more-like-this): its significant words against the collection, OR-ed; the paper itself
    is left out. ``query.terms`` lists the words with their frequencies and weights."""
    return search.more_like_this(pmcid, collection=collection, limit=limit, offset=offset, snippets=snippets,
                                 highlight=HighlightSpec() if highlight else None)


@router.get("/papers/{pmcid}", response_model=PaperText, tags=["papers"])
@lean
async def get_paper(pmcid: str, request: Request, session: CurrentSession,
                    sections: Annotated[list[str] | None,
                                        Query(description="Section names (repeat or comma-separate); ABSTRACT "
                                                          "selects the abstract")] = None,
                    max_chars: Annotated[int | None,
                                         Query(description="Page size in characters; a cursor continues")] = None,
                    cursor: str | None = None, collection: str = DEFAULT_COLLECTION) -> Response:
    """A page of a paper's text. Within a session (X-Session-Id) this spends reading budget; X-Budget-Used and
    X-Budget-Max say how much. The unit is spent when the answer is recorded in the session's trace (see
    ``search.sessions.policy``), and cursors are signed for the session that got them."""
    names = [n for s in sections for n in s.split(",")] if sections else None
    search, sessions = _svc(request), _sessions(request)

    def read() -> PaperText:
        return search.paper_text(pmcid, sections=names, max_chars=max_chars, cursor=cursor, collection=collection,
                                 reader=session.id if session else "")

    if session is None:
        return await answer(read)

    def hold(charge: ReadCharge) -> None:  # the trace middleware spends it with the call's event
        request.state.read_charge = charge

    def read_in_session() -> tuple[bytes, ReadCharge]:
        text, charge = sessions.read(session, pmcid, cursor is not None, read, hold)
        return dump(text), charge

    body, charge = await run_in_threadpool(read_in_session)
    return json_response(body, headers={"X-Budget-Used": str(charge.used), "X-Budget-Max": str(charge.max_papers)})
