"""Paper and passage search, paper text, health, stats and collection builds."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from fastapi import APIRouter, Depends, Query, Request, Response

from search.core import names
from search.api.deps import current_session, lexicon, require_admin, store
from search.api.models import BuildPapers, SearchRequest
from search.retrieval.dense import build_dense
from search.engines import Build, BuildRefused
from search.core.errors import DEFAULT_COLLECTION, FlysiftError, index_missing
from search.core.models import IndexStats, IndexSummary, PaperSearchResults, PaperText, PassageSearchResults
from search.text.passages import split_passages
from search.retrieval.service import SearchService
from search.sessions.models import ReadCharge, Session, charged_read, search_expansions

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
    X-Budget-Max say how much. The unit is spent when the answer is recorded in the session's trace (see
    ``search.sessions.models``), and cursors are signed for the session that got them."""
    names = [n for s in sections for n in s.split(",")] if sections else None

    def read() -> PaperText:
        return _svc(request).paper_text(pmcid, sections=names, max_chars=max_chars, cursor=cursor,
                                        collection=collection, reader=session.id if session else "")

    if session is None:
        return read()

    def hold(charge: ReadCharge) -> None:  # the trace middleware commits it with the call's event
        request.state.read_charge = charge

    text, charge = charged_read(store(request), session, pmcid, cursor is not None, read, hold)
    response.headers["X-Budget-Used"] = str(charge.used)
    response.headers["X-Budget-Max"] = str(charge.max_papers)
    return text


# ---- collection builds: index a corpus through the API (e.g. an IR test collection) ---------------------------
# Open builds live in ``app.state.builds`` of the process that created them, by (collection, build id): one writer per
# collection (the engine's lock), and one API call at a time per build (the entry's ``turn``), whatever thread the
# server runs it on. A call that fails (other than a publish the guard refused) aborts the build, a build unused for
# ``build_idle_timeout_s`` is aborted by the next build call, and DELETE aborts one on request: no failed or
# forgotten request keeps a collection locked.

#: guards every app's ``app.state.builds`` (taking, adding, expiring entries); never held while a build works
_BUILDS_LOCK = threading.Lock()


@dataclass
class _OpenBuild:
    build: Build
    used: float = field(default_factory=time.monotonic)  # when the last call on it ended
    users: int = 0  # calls holding or waiting for its turn: an entry in use never expires
    turn: threading.Lock = field(default_factory=threading.Lock)


def _expire_idle(request: Request) -> None:
    """Abort and forget the builds unused for ``build_idle_timeout_s``, so their collections unlock."""
    builds, limit = request.app.state.builds, request.app.state.settings.build_idle_timeout_s
    with _BUILDS_LOCK:
        now = time.monotonic()
        stale = [builds.pop(key) for key, e in list(builds.items()) if not e.users and now - e.used >= limit]
    for entry in stale:
        entry.build.abort(discard=True)


@contextmanager
def _open_build(request: Request, collection: str, build_id: str, *, closes: bool = False) -> Iterator[Build]:
    """The open build ``build_id`` of ``collection``, for this call alone; ``closes``: a success ends the build."""
    _svc(request).engine(collection)  # checks the collection name
    _expire_idle(request)
    builds, key = request.app.state.builds, (collection, build_id)
    with _BUILDS_LOCK:
        names.lookup("build_id", build_id, [b for c, b in builds if c == collection], field="build_id",
                     hint=f"collection {collection!r} has no open build with this id (published, aborted or idle too "
                          f"long); open one with POST /v1/collections/{collection}/builds")
        entry = builds[key]
        entry.users += 1
    keep = False
    try:
        with entry.turn:
            yield entry.build
        keep = not closes
    except BuildRefused:
        keep = True  # the build is intact and open: add papers, publish with allow_shrink, or DELETE it
        raise
    finally:
        with _BUILDS_LOCK:
            entry.users -= 1
            entry.used = time.monotonic()
            if not keep and builds.get(key) is entry:
                del builds[key]
        if not keep:
            entry.build.abort(discard=True)  # after a publish, a no-op; after a failure, frees lock and disk


@router.post("/collections/{collection}/builds", dependencies=[Depends(require_admin)], tags=["indexing"])
def create_build(collection: str, request: Request) -> dict:
    """Open a new build of the collection (one at a time per collection). Add papers, then publish it or DELETE it;
    a build unused for ``build_idle_timeout_s`` (default 15 minutes) is aborted."""
    eng = _svc(request).engine(collection)
    _expire_idle(request)
    with _BUILDS_LOCK:
        held = [b for c, b in request.app.state.builds if c == collection]
    if held:
        raise FlysiftError(f"Collection {collection!r} already has an open build {held[0]!r}: publish it, or abort it "
                           f"with DELETE /v1/collections/{collection}/builds/{held[0]}.", code="busy", status=409,
                           details={"build_id": held[0]})
    build = eng.open_build(fingerprint=hashlib.sha256(f"api:{collection}".encode()).hexdigest(), resume=False)
    with _BUILDS_LOCK:
        request.app.state.builds[(collection, build.id)] = _OpenBuild(build)
    return {"collection": collection, "build_id": build.id}


@router.post("/collections/{collection}/builds/{build_id}/papers",
             dependencies=[Depends(require_admin)], tags=["indexing"])
def add_papers(collection: str, build_id: str, body: BuildPapers, request: Request) -> dict:
    """Add (or replace, by pmcid) papers in an open build. A write that fails aborts the build."""
    with _open_build(request, collection, build_id) as build:
        passages = 0
        for paper in body.papers:
            ps = split_passages(paper)
            build.add(paper, ps)
            passages += len(ps)
        build.commit({})
    return {"indexed": len(body.papers), "passages": passages}


@router.post("/collections/{collection}/builds/{build_id}/publish",
             dependencies=[Depends(require_admin)], response_model=IndexSummary, tags=["indexing"])
def publish_build(collection: str, build_id: str, request: Request,
                  allow_shrink: bool = Query(False, description="Publish even when the build holds less than "
                                             "min_publish_share (default 50%) of the live build's papers"),
                  ) -> IndexSummary:
    """Make the build the one searches see. An empty build, or one much smaller than the live build (unless
    ``allow_shrink``), is refused with 409 ``build_refused``: the live build keeps serving and this one stays open."""
    with _open_build(request, collection, build_id, closes=True) as build:
        n = build.count()
        build.publish(allow_shrink=allow_shrink)
    return IndexSummary(read=n, indexed=n, build=build_id)


@router.delete("/collections/{collection}/builds/{build_id}", dependencies=[Depends(require_admin)],
               tags=["indexing"])
def abort_build(collection: str, build_id: str, request: Request) -> dict:
    """Abort an open build: its files are removed and the collection unlocks; the live build keeps serving."""
    with _open_build(request, collection, build_id, closes=True):
        pass  # leaving the registry aborts and removes it
    return {"collection": collection, "build_id": build_id, "aborted": True}


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
