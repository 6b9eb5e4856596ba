"""Collection builds, the write side of the API: index a corpus through the API (e.g. an IR test collection) and
build a collection's dense index. Every route needs the ``admin`` scope.

Open builds live in ``app.state.builds`` of the process that created them, by (collection, build id): one writer per
collection (the engine's lock), and one API call at a time per build (the entry's ``turn``), whatever thread the
server runs it on. A call that fails (other than a publish the guard refused) aborts the build, a build unused for
``build_idle_timeout_s`` is aborted by the next build call, and DELETE aborts one on request: no failed or forgotten
request keeps a collection locked.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from search.api.deps import Search, require_admin
from search.api.models import BuildPapers
from search.core import names
from search.core.errors import FlysiftError
from search.core.models import IndexSummary
from search.engines import Build, BuildRefused
from search.retrieval.vectors import build_any
from search.text.passages import split_passages

router = APIRouter(prefix="/v1", tags=["indexing"], dependencies=[Depends(require_admin)])

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
    request.app.state.search.engine(collection)  # checks the collection name
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


@router.post("/collections/{collection}/builds")
def create_build(collection: str, request: Request, search: Search) -> dict:
    """Open a new build of the collection (one at a time per collection). Add papers, then publish it or DELETE it;
    a build unused for ``build_idle_timeout_s`` (default 15 minutes) is aborted."""
    eng = search.engine(collection)
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


@router.post("/collections/{collection}/builds/{build_id}/papers")
def add_papers(collection: str, build_id: str, body: BuildPapers, request: Request) -> dict:
    """Add (or replace, by pmcid) papers in an open build. A write that fails aborts the build; a paper the engine
    refuses (a cluster's mapping conflict) is left out and listed in ``rejected``, naming the field."""
    with _open_build(request, collection, build_id) as build:
        passages = 0
        for paper in body.papers:
            ps = split_passages(paper)
            build.add(paper, ps)
            passages += len(ps)
        build.flush()  # a cluster may refuse a paper (a mapping conflict): say which, never count it as indexed
        refused = [r.model_dump(exclude_none=True) for r in build.failures]
        build.failures.clear()
        build.commit({})
    return {"indexed": len(body.papers) - len(refused), "passages": passages, "rejected": refused}


@router.post("/collections/{collection}/builds/{build_id}/publish", response_model=IndexSummary)
def publish_build(collection: str, build_id: str, request: Request,
                  allow_shrink: Annotated[bool, Query(description="Publish even when the build holds less than "
                                                      "min_publish_share (default 50%) of the live build's papers")
                                          ] = False) -> IndexSummary:
    """Make the build the one searches see. An empty build, or one much smaller than the live build (unless
    ``allow_shrink``), is refused with 409 ``build_refused``: the live build keeps serving and this one stays open."""
    with _open_build(request, collection, build_id, closes=True) as build:
        n = build.count()
        build.publish(allow_shrink=allow_shrink)
    return IndexSummary(read=n, indexed=n, build=build_id)


@router.delete("/collections/{collection}/builds/{build_id}")
def abort_build(collection: str, build_id: str, request: Request) -> dict:
    """Abort an open build: its files are removed and the collection unlocks; the live build keeps serving."""
    with _open_build(request, collection, build_id, closes=True):
        pass  # leaving the registry aborts and removes it
    return {"collection": collection, "build_id": build_id, "aborted": True}


#: the synchronous API build is for small (IR test) collections; bigger ones use `flysift index dense`
API_DENSE_MAX_PASSAGES = 50_000


@router.post("/collections/{collection}/dense")
def create_dense(collection: str, search: Search, batch_size: int = 64) -> dict:
    """Embed the published build's passages and write its dense index (synchronously: small collections only).
    Returns the index's meta (model, dim, count, timings)."""
    return build_any(search.settings.data_dir, collection, search.engine(collection), batch_size=batch_size,
                     max_passages=API_DENSE_MAX_PASSAGES)
