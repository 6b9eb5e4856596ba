"""Ontology term endpoints: search, lookup, hierarchy, the resolver, and FlyAOC's term tools (spec §2.3, §2.4).

Inside a session (``X-Session-Id``) the session's hidden terms apply to every call and the call is traced; a request
may add more with ``hidden=flyaoc`` or comma-separated ids and ``hidden_descendants``, never un-hide. The service is
``request.app.state.terms`` (a ``search.ontology.service.TermService``).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response

from search.api.deps import current_session
from search.api.respond import answer
from search.core.errors import InvalidRequest
from search.ontology.hidden import HiddenQuery, hidden_query
from search.ontology.service import ResolvedTerm, TermList, TermLookup, TermSearchResponse, TermService
from search.sessions.models import Session

router = APIRouter(prefix="/v1", tags=["terms"], dependencies=[Depends(current_session)])

Hidden = Query(None, description="Hidden terms: a named set (flyaoc) and/or comma-separated ids")
HiddenDesc = Query(False, description="Also hide every descendant (is_a, part_of) of the hidden ids")
Relations = Query("hierarchy", description="Relation set (is_a, hierarchy, regulates, all) or comma-separated names")


async def hidden_spec(hidden: str | None = Hidden, hidden_descendants: bool = HiddenDesc,
                      session: Session | None = Depends(current_session)) -> HiddenQuery:
    """The request's hidden terms plus the session's."""
    return hidden_query(hidden, hidden_descendants, session.hidden_terms if session else None)


def _svc(request: Request) -> TermService:
    return request.app.state.terms


# Every route is async and answers in one hop (``search.api.respond``): the term service's work and the JSON together,
# not re-validated; ``response_model`` documents the answer.


def term_query(query: str | None, q: str | None) -> str:
    """The search text from ``query``, or from ``q``, its deprecated alias (one release); both at once is refused."""
    if query is not None and q is not None:
        raise InvalidRequest("give query, not also q (its deprecated alias)", details={"field": "q"})
    text = query if query is not None else q
    if text is None:
        raise InvalidRequest("query: required (words, a phrase or a term id)", details={"field": "query"})
    return text


@router.get("/terms/search", response_model=TermSearchResponse)
async def search_terms(request: Request,
                       query: str | None = Query(None, description="Words, a phrase or a term id (required)"),
                       ontology: str = Query("go", description="go, fbbt, fbdv (or another indexed name)"),
                       aspect: str | None = Query(None, description="GO aspect P, F or C"),
                       limit: int = Query(10, ge=1, le=100), include_obsolete: bool = False,
                       q: str | None = Query(None, deprecated=True,
                                             description="Deprecated alias of query (removed in the next release)"),
                       h: HiddenQuery = Depends(hidden_spec)) -> Response:
    """Terms by name, synonym (weighted by scope), definition or id; hidden and obsolete terms left out. The text
    is ``query``, as in paper and passage search (``q`` still works for one release)."""
    return await answer(lambda: _svc(request).search(ontology, term_query(query, q), aspect=aspect, limit=limit,
                                                     hidden=h.hidden, hidden_descendants=h.descendants,
                                                     include_obsolete=include_obsolete))


@router.get("/terms/resolve", response_model=list[ResolvedTerm])
async def resolve_terms(request: Request,
                        text: str = Query(..., description="A description, e.g. 'compound eye morphogenesis'"),
                        ontology: str = "go", aspect: str | None = None, limit: int = Query(5, ge=1, le=100),
                        h: HiddenQuery = Depends(hidden_spec)) -> Response:
    """Visible terms ranked for a free-text description (post-hoc resolution of natural-language outputs)."""
    return await answer(lambda: _svc(request).resolve_description(text, ontology, aspect=aspect, limit=limit,
                                                                  hidden=h.hidden, hidden_descendants=h.descendants))


@router.get("/terms/{term_id}", response_model=TermLookup)
async def get_term(request: Request, term_id: str, h: HiddenQuery = Depends(hidden_spec)) -> Response:
    """A term by id. Alt ids resolve to the primary (with a note); obsolete terms list their replacements;
    hidden terms answer 404 ``term_hidden``."""
    return await answer(lambda: _svc(request).lookup(term_id, hidden=h.hidden, hidden_descendants=h.descendants))


def _related(direction: Literal["ancestors", "descendants", "children", "parents"], default_relations: str):
    async def endpoint(request: Request, term_id: str,
                       relations: str = Query(default_relations, description=Relations.description),
                       limit: int = Query(1000, ge=1, le=100_000),
                       h: HiddenQuery = Depends(hidden_spec)) -> Response:
        return await answer(lambda: _svc(request).related(term_id, direction, relations=relations, limit=limit,
                                                          hidden=h.hidden, hidden_descendants=h.descendants))

    endpoint.__doc__ = f"The term's {direction} over the given relations (hidden terms left out)."
    return endpoint


for _direction, _default in (("ancestors", "hierarchy"), ("descendants", "hierarchy"), ("parents", "is_a"),
                             ("children", "is_a")):
    router.add_api_route(f"/terms/{{term_id}}/{_direction}", _related(_direction, _default),  # type: ignore[arg-type]
                         methods=["GET"], response_model=TermList, name=f"term_{_direction}")


# ---- FlyAOC tool shapes -------------------------------------------------------------------------------------------

FlyaocTerms = list[dict[str, Any]]


@router.get("/flyaoc/search_go_terms", tags=["flyaoc"], response_model=FlyaocTerms)
async def search_go_terms(request: Request, query: str, aspect: str | None = None,
                          limit: int = Query(10, ge=1, le=100), h: HiddenQuery = Depends(hidden_spec)) -> Response:
    """``search_go_terms``: ``{go_id, name, namespace, definition, synonyms?, parents?, children_count?}``."""
    return await answer(lambda: _svc(request).flyaoc_search("go", query, aspect=aspect, limit=limit, hidden=h.hidden,
                                                            hidden_descendants=h.descendants))


@router.get("/flyaoc/search_anatomy_terms", tags=["flyaoc"], response_model=FlyaocTerms)
async def search_anatomy_terms(request: Request, query: str, limit: int = Query(10, ge=1, le=100)) -> Response:
    """``search_anatomy_terms``: ``{fbbt_id, name, definition, synonyms?, parents?, children_count?}``."""
    return await answer(lambda: _svc(request).flyaoc_search("fbbt", query, limit=limit))


@router.get("/flyaoc/search_stage_terms", tags=["flyaoc"], response_model=FlyaocTerms)
async def search_stage_terms(request: Request, query: str, limit: int = Query(10, ge=1, le=100)) -> Response:
    """``search_stage_terms``: ``{fbdv_id, name, definition, synonyms?, parents?, children_count?}``."""
    return await answer(lambda: _svc(request).flyaoc_search("fbdv", query, limit=limit))


@router.get("/flyaoc/get_term_children", tags=["flyaoc"], response_model=dict[str, Any])
async def get_term_children(request: Request, term_id: str, limit: int = Query(20, ge=1, le=100),
                            relations: str = Query("is_a", description=Relations.description),
                            h: HiddenQuery = Depends(hidden_spec)) -> Response:
    """``get_term_children``: ``{term_id, term_name, children_count, children, truncated}``. Errors carry FlyAOC's
    ``{term_id, error}`` body in ``details.flyaoc``."""
    return await answer(lambda: _svc(request).flyaoc_children(term_id, limit=limit, relations=relations,
                                                              hidden=h.hidden, hidden_descendants=h.descendants))
