"""Paper and passage search, paper text, health, stats and collection builds."""

from __future__ import annotations

import hashlib

from fastapi import APIRouter, Depends, Query, Request, Response

from search.api.deps import current_session, lexicon, require_admin, store
from search.api.schemas import BuildPapers, SearchRequest
from search.dense import build_dense
from search.errors import DEFAULT_COLLECTION, NotFound, index_missing
from search.models import IndexStats, IndexSummary, PaperSearchResults, PaperText, PassageSearchResults
from search.passages import split_passages
from search.service import SearchService
from search.sessions import Session, charged_read, search_expansions

router = APIRouter(prefix="/v1")


def _svc(request: Request) -> SearchService:
    return request.app.state.search


@router.get("/health", tags=["service"])
def health(request: Request) -> dict:
    eng = _svc(request).engine()
    return {"status": "ok", "engine": eng.name, "index": eng.has_index() if hasattr(eng, "has_index") else None}


@router.get("/stats", response_model=IndexStats, tags=["service"])
def stats(request: Request, collection: str = "default") -> IndexStats:
    """Counts of the published build. The default collection answers zeros before it is indexed; any other collection
    without a published build does not exist (404)."""
    st = _svc(request).engine(collection).stats()
    if st.build is None and collection != DEFAULT_COLLECTION:
        raise index_missing(collection, f"Collection {collection!r} does not exist: it has no published build.")
    return st


def _expansions(request: Request, body: SearchRequest, session: Session | None) -> list[str]:
    return search_expansions(lexicon(request), body.gene, session) if body.gene else []


@router.post("/papers/search", response_model=PaperSearchResults, tags=["papers"])
def search_papers(body: SearchRequest, request: Request,
                  session: Session | None = Depends(current_session)) -> PaperSearchResults:
    return _svc(request).search_papers(body.query, limit=body.limit, offset=body.offset, filters=body.filters,
                                       snippets=bool(body.snippets), collection=body.collection,
                                       expansions=_expansions(request, body, session), mode=body.mode)


@router.post("/passages/search", response_model=PassageSearchResults, tags=["papers"])
def search_passages(body: SearchRequest, request: Request,
                    session: Session | None = Depends(current_session)) -> PassageSearchResults:
    return _svc(request).search_passages(body.query, limit=body.limit, offset=body.offset, filters=body.filters,
                                         snippets=body.snippets is not False, collection=body.collection,
                                         expansions=_expansions(request, body, session), mode=body.mode)


@router.get("/papers/{pmcid}", response_model=PaperText, tags=["papers"])
def get_paper(pmcid: str, request: Request, response: Response,
              sections: list[str] | None = Query(None, description="Section names (repeat or comma-separate); ABSTRACT selects the abstract"),
              max_chars: int | None = Query(None, description="Page size in characters; a cursor continues"),
              cursor: str | None = None, collection: str = "default",
              session: Session | None = Depends(current_session)) -> PaperText:
    """A page of a paper's text. Within a session (X-Session-Id) this spends reading budget; X-Budget-Used and
    X-Budget-Max say how much."""
    names = [n for s in sections for n in s.split(",")] if sections else None

    def read() -> PaperText:
        return _svc(request).paper_text(pmcid, sections=names, max_chars=max_chars, cursor=cursor,
                                        collection=collection)

    if session is None:
        return read()
    text, charge = charged_read(store(request), session, pmcid, cursor is not None, read)
    response.headers["X-Budget-Used"] = str(charge.used)
    response.headers["X-Budget-Max"] = str(charge.max_papers)
    return text


# ---- collection builds: index a corpus through the API (e.g. an IR test collection) ---------------------------
# Open builds live in ``app.state.builds`` of the process that created them (one writer per collection).


@router.post("/collections/{collection}/builds", dependencies=[Depends(require_admin)], tags=["indexing"])
def create_build(collection: str, request: Request) -> dict:
    eng = _svc(request).engine(collection)
    build = eng.open_build(fingerprint=hashlib.sha256(f"api:{collection}".encode()).hexdigest(), resume=False)
    request.app.state.builds[(collection, build.id)] = build
    return {"collection": collection, "build_id": build.id}


def _build(request: Request, collection: str, build_id: str):
    try:
        return request.app.state.builds[(collection, build_id)]
    except KeyError:
        raise NotFound(f"No open build {build_id!r} for collection {collection!r}; create one with "
                       f"POST /v1/collections/{collection}/builds.") from None


@router.post("/collections/{collection}/builds/{build_id}/papers",
             dependencies=[Depends(require_admin)], tags=["indexing"])
def add_papers(collection: str, build_id: str, body: BuildPapers, request: Request) -> dict:
    build = _build(request, collection, build_id)
    passages = 0
    for paper in body.papers:
        ps = split_passages(paper)
        build.add(paper, ps)
        passages += len(ps)
    build.commit({})
    return {"indexed": len(body.papers), "passages": passages}


@router.post("/collections/{collection}/builds/{build_id}/publish",
             dependencies=[Depends(require_admin)], response_model=IndexSummary, tags=["indexing"])
def publish_build(collection: str, build_id: str, request: Request) -> IndexSummary:
    build = _build(request, collection, build_id)
    n = build.count()
    build.publish()
    del request.app.state.builds[(collection, build_id)]
    return IndexSummary(read=n, indexed=n, build=build_id)


#: the synchronous API build is for small (IR test) collections; bigger ones use `flysift index dense`
API_DENSE_MAX_PASSAGES = 50_000


@router.post("/collections/{collection}/dense", dependencies=[Depends(require_admin)], tags=["indexing"])
def create_dense(collection: str, request: Request, batch_size: int = 64) -> dict:
    """Embed the published build's passages and write its dense index (synchronously: small collections only).
    Returns the index's meta (model, dim, count, timings)."""
    svc = _svc(request)
    svc.dense(collection)  # validates the name and the engine kind
    return build_dense(svc.settings.data_dir, collection, batch_size=batch_size,
                       max_passages=API_DENSE_MAX_PASSAGES)
