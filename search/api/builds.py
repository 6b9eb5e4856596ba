"""Collection builds over REST, the write side of the API: index a corpus through the API (e.g. an IR test
collection) and build a collection's dense index. Every route needs the ``admin`` scope.

The routes are an adapter of ``search.builds.service.BuildService`` (``app.state.builds``), which keeps the open
builds of this process: one writer per collection, one call at a time per build, and no failed or forgotten request
keeps a collection locked (see there).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from search.api.deps import Search, require_admin
from search.builds.service import BuildService
from search.core.models import IndexSummary
from search.retrieval.vectors import build_any
from search.schema.papers import BuildPapers

router = APIRouter(prefix="/v1", tags=["indexing"], dependencies=[Depends(require_admin)])


def _builds(request: Request) -> BuildService:
    return request.app.state.builds


@router.post("/collections/{collection}/builds")
def create_build(collection: str, request: Request) -> dict:
    """Open a new build of the collection (one at a time per collection). Add papers, then publish it or DELETE it;
    a build unused for ``build_idle_timeout_s`` (default 15 minutes) is aborted."""
    return {"collection": collection, "build_id": _builds(request).create(collection)}


@router.post("/collections/{collection}/builds/{build_id}/papers")
def add_papers(collection: str, build_id: str, body: BuildPapers, request: Request) -> dict:
    """Add (or replace, by pmcid) papers in an open build. A write that fails aborts the build; a paper the engine
    refuses (a cluster's mapping conflict) is left out and listed in ``rejected``, naming the field. A pmcid sent
    twice in one request is one paper (the last copy, as a later request would replace it): ``indexed`` counts
    distinct papers and ``duplicates`` the copies that replaced an earlier one."""
    papers = {p.pmcid: p for p in body.papers}
    out = _builds(request).add_papers(collection, build_id, papers.values())
    return {**out, "duplicates": len(body.papers) - len(papers)}


@router.post("/collections/{collection}/builds/{build_id}/publish", response_model=IndexSummary)
def publish_build(collection: str, build_id: str, request: Request,
                  allow_shrink: Annotated[bool, Query(description="Publish even when the build holds less than "
                                                      "min_publish_share (default 50%) of the live build's papers")
                                          ] = False) -> IndexSummary:
    """Make the build the one searches see. An empty build, or one much smaller than the live build (unless
    ``allow_shrink``), is refused with 409 ``build_refused``: the live build keeps serving and this one stays open."""
    return _builds(request).publish(collection, build_id, allow_shrink=allow_shrink)


@router.delete("/collections/{collection}/builds/{build_id}")
def abort_build(collection: str, build_id: str, request: Request) -> dict:
    """Abort an open build: its files are removed and the collection unlocks; the live build keeps serving."""
    _builds(request).abort(collection, build_id)
    return {"collection": collection, "build_id": build_id, "aborted": True}


#: the synchronous API build is for small (IR test) collections; bigger ones use `flysift index dense`
API_DENSE_MAX_PASSAGES = 50_000
#: passages embedded per batch over the API: the schema says so, and a caller cannot ask for one batch of 50,000
#: (activations of that size would take the server's memory; twice the CUDA default is plenty)
API_DENSE_MAX_BATCH = 1024


@router.post("/collections/{collection}/dense")
def create_dense(collection: str, search: Search,
                 batch_size: Annotated[int, Query(ge=1, le=API_DENSE_MAX_BATCH,
                                                  description="Passages embedded per batch")] = 64) -> dict:
    """Embed the published build's passages and write its dense index (synchronously: small collections only).
    Returns the index's meta (model, dim, count, timings)."""
    search.dense(collection)  # validates the name, and that the engine can hold a dense index
    return build_any(search.engine(collection), search.settings.data_dir, batch_size=batch_size,
                     max_passages=API_DENSE_MAX_PASSAGES)
