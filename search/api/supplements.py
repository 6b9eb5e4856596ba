"""A paper's supplementary files: the registry, and a page of one sheet, table, text or PDF (JSON, or CSV with
formula injection neutralised). Within a session, reading spends the paper's budget as reading the paper does
(``search.sessions.policy``); a FlyAOC-parity (``flyaoc``) session has no supplements."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from search.api.deps import CurrentSession
from search.api.respond import answer, dump, json_response
from search.core.names import DEFAULT_COLLECTION
from search.core.supplements import SupplementList, SupplementRead
from search.retrieval.service import SearchService
from search.retrieval.supplements import as_csv
from search.sessions.models import ReadCharge
from search.sessions.policy import supplements_allowed
from search.sessions.service import SessionService

router = APIRouter(prefix="/v1")


@router.get("/papers/{pmcid}/supplements", response_model=SupplementList, tags=["papers"])
async def list_supplements(pmcid: str, request: Request, session: CurrentSession,
                           collection: str = DEFAULT_COLLECTION) -> Response:
    """The paper's supplementary files: label, caption, media type, size, sheets or pages, and an extraction status
    (ok, partial, unsupported, encrypted, corrupt, too_large, missing, refused) with its reason. Free in a session."""
    supplements_allowed(session)
    search: SearchService = request.app.state.search
    return await answer(lambda: search.supplements(pmcid, collection))


@router.get("/papers/{pmcid}/supplements/{file}", response_model=SupplementRead, tags=["papers"],
            responses={200: {"content": {"text/csv": {"schema": {"type": "string"}}}}})
async def read_supplement(
        pmcid: str, file: Annotated[str, "file number in the registry, or its name"], request: Request,
        session: CurrentSession,
        part: Annotated[str | None, Query(max_length=300, description="Sheet or part: its number (0 first) or name; "
                                                                      "default the first")] = None,
        start: Annotated[int | None, Query(ge=0, le=2**31, description="First row, paragraph or page number")] = None,
        limit: Annotated[int | None, Query(ge=1, le=1000, description="Rows per page (default 100)")] = None,
        max_chars: Annotated[int | None, Query(ge=1000, le=200_000,
                                               description="About this many characters per page")] = None,
        format: Annotated[Literal["json", "csv"], Query(description="csv: the header and rows of a table, cells "
                                                                    "that would run as formulas neutralised")] = "json",
        collection: str = DEFAULT_COLLECTION) -> Response:
    """A page of one part of a file: rows with the header (tables), or paragraphs or pages; ``next_start``
    continues. In a session this is a read of the paper (X-Budget-Used, X-Budget-Max)."""
    supplements_allowed(session)
    search: SearchService = request.app.state.search
    sessions: SessionService = request.app.state.sessions

    def read() -> SupplementRead:
        return search.read_supplement(pmcid, file, part=part, start=start, limit=limit, max_chars=max_chars,
                                      collection=collection)

    def render(page: SupplementRead) -> Response:
        if format == "csv":
            return Response(as_csv(page), media_type="text/csv; charset=utf-8")
        return json_response(dump(page))

    if session is None:
        return render(await run_in_threadpool(read))

    def hold(charge: ReadCharge) -> None:  # the trace middleware spends it with the call's event
        request.state.read_charge = charge

    page, charge = await run_in_threadpool(lambda: sessions.read(session, pmcid, False, read, hold))
    out = render(page)
    out.headers.update({"X-Budget-Used": str(charge.used), "X-Budget-Max": str(charge.max_papers)})
    return out



