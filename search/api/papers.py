"""Paper and passage search, paper text, health and stats: the read side (index writes are ``search.api.builds``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from search.api.deps import CurrentSession, Search
from search.api.fast import lean
from search.api.models import SearchRequest
from search.api.respond import answer, dump, json_response
from search.core.errors import DEFAULT_COLLECTION, index_missing
from search.core.models import IndexStats, PaperSearchResults, PaperText, PassageSearchResults
from search.retrieval.service import SearchService
from search.sessions.models import ReadCharge
from search.sessions.policy import search_filters
from search.sessions.service import SessionService

router = APIRouter(prefix="/v1")


def _svc(request: Request) -> SearchService:
    return request.app.state.search


def _sessions(request: Request) -> SessionService:  # read here, not as a dependency: each one costs per request
    return request.app.state.sessions


def _inline(request: Request, body: SearchRequest) -> bool:
    """A BM25 search on the embedded engine is CPU work on files already open: it runs on the event loop (one worker
    per core keeps the cores busy); the cluster engine and dense models do I/O and take the hop."""
    return body.mode == "bm25" and request.app.state.settings.engine_kind == "embedded"


@router.get("/health", tags=["service"])
def health(request: Request) -> dict:
    eng = _svc(request).engine()
    return {"status": "ok", "engine": eng.name, "index": eng.has_index()}


@router.get("/stats", response_model=IndexStats, tags=["service"])
def stats(search: Search, collection: str = "default") -> IndexStats:
    """Counts of the published build. The default collection answers zeros before it is indexed; any other collection
    without a published build does not exist (404)."""
    st = search.engine(collection).stats()
    if st.build is None and collection != DEFAULT_COLLECTION:
        raise index_missing(collection, f"Collection {collection!r} does not exist: it has no published build.")
    return st


# Search and read routes are async: their blocking work (expansions, engine, serialisation) runs in one hop
# (``search.api.respond``; none for a BM25 search on the embedded engine: ``_inline``) and the answer is not
# re-validated; ``response_model`` documents it.

@router.post("/papers/search", response_model=PaperSearchResults, tags=["papers"])
@lean
async def search_papers(body: SearchRequest, request: Request, session: CurrentSession) -> Response:
    search, sessions = _svc(request), _sessions(request)
    return await answer(lambda: search.search_papers(
        body.query, limit=body.limit, offset=body.offset, filters=search_filters(session, body.filters),
        snippets=bool(body.snippets),
        collection=body.collection, expansions=sessions.expansions(body.gene, session), mode=body.mode,
        explain_plan=body.explain, foldable=sessions.fold_set()), inline=_inline(request, body))


@router.post("/passages/search", response_model=PassageSearchResults, tags=["papers"])
@lean
async def search_passages(body: SearchRequest, request: Request, session: CurrentSession) -> Response:
    search, sessions = _svc(request), _sessions(request)
    return await answer(lambda: search.search_passages(
        body.query, limit=body.limit, offset=body.offset, filters=search_filters(session, body.filters),
        snippets=body.snippets is not False, collection=body.collection,
        expansions=sessions.expansions(body.gene, session), mode=body.mode, explain_plan=body.explain,
        foldable=sessions.fold_set()), inline=_inline(request, body))


@router.get("/papers/{pmcid}", response_model=PaperText, tags=["papers"])
@lean
async def get_paper(pmcid: str, request: Request, session: CurrentSession,
                    sections: Annotated[list[str] | None,
                                        Query(description="Section names (repeat or comma-separate); ABSTRACT "
                                                          "selects the abstract")] = None,
                    max_chars: Annotated[int | None,
                                         Query(description="Page size in characters; a cursor continues")] = None,
                    cursor: str | None = None, collection: str = "default") -> Response:
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
