"""Routes for operators: ``/v1/ready`` (may this process take traffic, and if not, why) and ``/metrics``
(Prometheus text). ``/v1/health`` (is the process alive) stays with the read side in ``search.api.papers``.

``/v1/ready`` is public like ``/v1/health`` (probes send no key): it answers 200 with the checks of
``search.ops.readiness`` while none fails, else 503 ``not_ready`` in the one error shape with the checks in
``details.checks``; files are named relative to the data dir. ``/metrics`` needs the ``admin`` scope when auth is on.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from search.api.deps import require_admin
from search.api.respond import dump, json_response
from search.core.checks import Check
from search.core.errors import FlysiftError
from search.ops.readiness import Readiness

router = APIRouter(tags=["service"])


class ReadyResponse(BaseModel):
    status: Literal["ready"]
    checks: list[Check]


class NotReady(FlysiftError):
    status = 503
    code = "not_ready"


@router.get("/v1/ready", response_model=ReadyResponse)
async def ready(request: Request) -> Response:
    """Whether this process can serve: the engine (published builds open, or the cluster answers), the session store
    (a write goes through) and the data dir's files (ontologies, cursor secret, free space). 503 ``not_ready`` with
    ``details.checks`` when a check fails; warnings (low disk space, unfinished builds) do not."""
    readiness: Readiness = request.app.state.readiness
    checks = await run_in_threadpool(readiness.checks)
    failed = [c for c in checks if c.state == "fail"]
    if failed:
        raise NotReady("Not ready: " + "; ".join(f"{c.name}: {c.message}" for c in failed[:5]),
                       details={"checks": [c.model_dump(exclude_none=True) for c in checks]},
                       headers={"Retry-After": "10"})
    return json_response(dump(ReadyResponse(status="ready", checks=checks)))


@router.get("/metrics", dependencies=[Depends(require_admin)], response_class=Response,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                             "description": "Prometheus text format (docs/operations.md lists the metrics)"}})
async def metrics(request: Request) -> Response:
    """Prometheus metrics of this process (of every worker when ``serve`` runs several): requests by route, status
    and team, latency, engine time, budget charges and refusals, open sessions, builds, errors by code."""
    body, content_type = await run_in_threadpool(request.app.state.metrics.exposition)
    return Response(body, media_type=content_type)
