"""Ontology term endpoints: search, lookup, hierarchy, the resolver, a bulk label export, and FlyAOC's term tools
(spec §2.3, §2.4).

Inside a session (``X-Session-Id``) the session's hidden terms apply to every call and the call is traced; a request
may add more with ``hidden=flyaoc`` or comma-separated ids and ``hidden_descendants``, never un-hide. The service is
``request.app.state.terms`` (a ``search.ontology.service.TermService``).
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from pydantic_core import to_json
from starlette.concurrency import run_in_threadpool

from search.api.deps import current_session
from search.api.fast import lean
from search.api.respond import answer, json_response
from search.core.errors import InvalidRequest, LimitExceeded, NotFound
from search.ontology.model import Ontology
from search.ontology.recognise import TASK_ONTOLOGIES, TermRecogniser
from search.ontology.service import TermService
from search.schema.hidden import HiddenQuery, hidden_query
from search.schema.sessions import Session
from search.schema.terms import (
    MAX_RECOGNISE_CHARS,
    RecognisedMention,
    RecogniseRequest,
    RecogniseResponse,
    TermLabelPage,
    TermLabels,
    TermList,
    TermLookup,
    TermResolveResponse,
    TermSearchResponse,
)

router = APIRouter(prefix="/v1", tags=["terms"], dependencies=[Depends(current_session)])

#: characters of ``hidden`` and ``relations``: a URL (request line) over 64 KiB is refused by the HTTP server itself
MAX_HIDDEN_CHARS = 2_000
MAX_RELATIONS_CHARS = 500
Hidden = Query(None, max_length=MAX_HIDDEN_CHARS,
               description="Hidden terms: a named set (flyaoc) and/or comma-separated ids")
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
@lean
async def search_terms(request: Request,
                       query: str | None = Query(None, description="Words, a phrase or a term id (required)"),
                       ontology: str = Query("go", description="go, fbbt, fbdv (or another indexed name)"),
                       aspect: str | None = Query(None, description="GO aspect P, F or C"),
                       limit: int = Query(10, ge=1), include_obsolete: bool = False,
                       q: str | None = Query(None, deprecated=True, include_in_schema=False,
                                             description="Deprecated alias of query (removed in the next release)"),
                       mode: Literal["bm25", "dense", "hybrid"] | None = Query(
                           None, description="bm25: the lexical ranking; dense: nearest terms by the term encoder "
                                             "(or the dense term index); hybrid: both fused. Default: hybrid where "
                                             "the data dir's term encoder fits the ontology, else bm25; dense and "
                                             "hybrid without one are 409 dense_unavailable"),
                       mf_activity_only: bool = Query(
                           False, description="GO: molecular functions only for an activity-shaped query (names "
                                              "an activity, a binding, an enzyme or a transporter); none otherwise"),
                       h: HiddenQuery = Depends(hidden_spec)) -> Response:
    """Terms by name, synonym (weighted by scope), definition or id; hidden and obsolete terms left out. The text
    is ``query``, as in paper and passage search (``q`` still works for one release); ``mode`` as there."""
    return await answer(lambda: _svc(request).search(ontology, term_query(query, q), aspect=aspect, limit=limit,
                                                     hidden=h.hidden, hidden_descendants=h.descendants,
                                                     include_obsolete=include_obsolete, mode=mode,
                                                     mf_activity_only=mf_activity_only))


@router.get("/terms/resolve", response_model=TermResolveResponse)
@lean
async def resolve_terms(request: Request,
                        text: str = Query(..., description="A description, e.g. 'compound eye morphogenesis'"),
                        ontology: str = "go", aspect: str | None = None, limit: int = Query(5, ge=1),
                        h: HiddenQuery = Depends(hidden_spec)) -> Response:
    """Visible terms ranked for a free-text description (post-hoc resolution of natural-language outputs), as
    ``{ontology, text, aspect, hidden, results}`` (a bare list before this release)."""
    return await answer(lambda: _svc(request).resolve_description(text, ontology, aspect=aspect, limit=limit,
                                                                  hidden=h.hidden, hidden_descendants=h.descendants))


@router.get("/terms/{term_id}", response_model=TermLookup)
@lean
async def get_term(request: Request, term_id: str, h: HiddenQuery = Depends(hidden_spec)) -> Response:
    """A term by id. Alt ids resolve to the primary (with a note); obsolete terms list their replacements;
    hidden terms answer 404 ``term_hidden``."""
    return await answer(lambda: _svc(request).lookup(term_id, hidden=h.hidden, hidden_descendants=h.descendants))


def _related(direction: Literal["ancestors", "descendants", "children", "parents"], default_relations: str
             ) -> Callable[..., Awaitable[Response]]:
    async def endpoint(request: Request, term_id: str,
                       relations: str = Query(default_relations, max_length=MAX_RELATIONS_CHARS,
                                              description=Relations.description),
                       limit: int = Query(1000, ge=1, le=100_000),
                       h: HiddenQuery = Depends(hidden_spec)) -> Response:
        return await answer(lambda: _svc(request).related(term_id, direction, relations=relations, limit=limit,
                                                          hidden=h.hidden, hidden_descendants=h.descendants))

    endpoint.__doc__ = f"The term's {direction} over the given relations (hidden terms left out)."
    return lean(endpoint)


for _direction, _default in (("ancestors", "hierarchy"), ("descendants", "hierarchy"), ("parents", "is_a"),
                             ("children", "is_a")):
    router.add_api_route(f"/terms/{{term_id}}/{_direction}", _related(_direction, _default),  # type: ignore[arg-type]
                         methods=["GET"], response_model=TermList, name=f"term_{_direction}")


# ---- FlyAOC tool shapes -------------------------------------------------------------------------------------------

FlyaocTerms = list[dict[str, Any]]


@router.get("/flyaoc/search_go_terms", tags=["flyaoc"], response_model=FlyaocTerms)
@lean
async def search_go_terms(request: Request, query: str, aspect: str | None = None,
                          limit: int = Query(10, ge=1), h: HiddenQuery = Depends(hidden_spec)) -> Response:
    """``search_go_terms``: ``{go_id, name, namespace, definition, synonyms?, parents?, children_count?}``."""
    return await answer(lambda: _svc(request).flyaoc_search("go", query, aspect=aspect, limit=limit, hidden=h.hidden,
                                                            hidden_descendants=h.descendants))


@router.get("/flyaoc/search_anatomy_terms", tags=["flyaoc"], response_model=FlyaocTerms)
@lean
async def search_anatomy_terms(request: Request, query: str, limit: int = Query(10, ge=1)) -> Response:
    """``search_anatomy_terms``: ``{fbbt_id, name, definition, synonyms?, parents?, children_count?}``."""
    return await answer(lambda: _svc(request).flyaoc_search("fbbt", query, limit=limit))


@router.get("/flyaoc/search_stage_terms", tags=["flyaoc"], response_model=FlyaocTerms)
@lean
async def search_stage_terms(request: Request, query: str, limit: int = Query(10, ge=1)) -> Response:
    """``search_stage_terms``: ``{fbdv_id, name, definition, synonyms?, parents?, children_count?}``."""
    return await answer(lambda: _svc(request).flyaoc_search("fbdv", query, limit=limit))


@router.get("/flyaoc/get_term_children", tags=["flyaoc"], response_model=dict[str, Any])
@lean
async def get_term_children(request: Request, term_id: str, limit: int = Query(20, ge=1),
                            relations: str = Query("is_a", max_length=MAX_RELATIONS_CHARS,
                                                   description=Relations.description),
                            h: HiddenQuery = Depends(hidden_spec)) -> Response:
    """``get_term_children``: ``{term_id, term_name, children_count, children, truncated}``. Errors carry FlyAOC's
    ``{term_id, error}`` body in ``details.flyaoc``."""
    return await answer(lambda: _svc(request).flyaoc_children(term_id, limit=limit, relations=relations,
                                                              hidden=h.hidden, hidden_descendants=h.descendants))


# ---- bulk label export ----------------------------------------------------------------------------------------------
#
# A client that recognises terms in text (the lexical curator) needs every label at once; one lookup per term cost it
# ~60,000 calls. ``GET /v1/terms/{ontology}/labels`` pages through the live terms in id order. Each ontology as loaded
# is serialised once per process (one JSON document per term); ``version`` is a digest of exactly what is served
# (and of the hidden ids), so it changes when the ontology is re-indexed with other content, and it is the ETag.

LABELS_DEFAULT = 2000
LABELS_MAX = 10_000
LABELS_CURSOR_MAX_CHARS = 100
_CURSOR_PREFIX = "l1"


class _Labels:
    """Per ontology object: the live terms' label records as JSON, and their digest."""

    def __init__(self, ont: Ontology):
        self.ontology = ont
        self.ids: list[str] = []
        self.records: list[bytes] = []
        digest = hashlib.sha256(ont.name.encode())
        for t in ont.terms():
            if t.obsolete:
                continue
            rec = to_json(TermLabels(id=t.id, name=t.name, aspect=t.aspect, depth=t.depth, synonyms=t.synonyms,
                                     parents=t.parents))
            self.ids.append(t.id)
            self.records.append(rec)
            digest.update(rec)
        self.version = digest.hexdigest()[:20]


_LABELS: dict[str, _Labels] = {}
_LABELS_LOCK = threading.Lock()


def _labels_of(ont: Ontology) -> _Labels:
    cached = _LABELS.get(ont.name)
    if cached is None or cached.ontology is not ont:
        with _LABELS_LOCK:
            cached = _LABELS.get(ont.name)
            if cached is None or cached.ontology is not ont:
                cached = _LABELS[ont.name] = _Labels(ont)
    return cached


def _labels_cursor(version: str, offset: int) -> str:
    return base64.urlsafe_b64encode(f"{_CURSOR_PREFIX}:{version}:{offset}".encode()).decode().rstrip("=")


def _labels_offset(cursor: str, version: str, total: int) -> int:
    """The offset a cursor of this export names: 422 ``invalid_cursor`` for anything this service did not issue,
    ``cursor_stale`` for one issued before the labels changed (start again without a cursor)."""
    try:
        if len(cursor) > LABELS_CURSOR_MAX_CHARS or not cursor.isascii():
            raise ValueError
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        if _labels_cursor(*_split_cursor(raw)) != cursor:   # only the one canonical spelling
            raise ValueError
        cursor_version, offset = _split_cursor(raw)
        if not 0 < offset < total:
            raise ValueError
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors too
        raise InvalidRequest(f"Invalid cursor {cursor[:100]!r}: pass the next_cursor of the previous page unchanged",
                             code="invalid_cursor", details={"field": "cursor"}) from None
    if cursor_version != version:
        raise InvalidRequest("cursor: the labels changed since it was issued (re-indexed ontology or other hidden "
                             "terms); start again without a cursor", code="cursor_stale",
                             details={"field": "cursor", "version": version})
    return offset


def _split_cursor(raw: bytes) -> tuple[str, int]:
    prefix, version, offset = raw.decode("ascii").split(":")
    if prefix != _CURSOR_PREFIX or not offset.isdigit():
        raise ValueError
    return version, int(offset)


def label_page(svc: TermService, ontology: str, limit: int, cursor: str | None, h: HiddenQuery
               ) -> tuple[bytes, str]:
    """One page of the export (JSON bytes) and its version."""
    ont = svc.ontology(ontology)
    labels = _labels_of(ont)
    hid = svc.hidden(ont.name, h.hidden, h.descendants)
    version, records = labels.version, labels.records
    if hid.ids:
        shown_ids = sorted(hid.ids & set(labels.ids))
        if shown_ids:
            version = hashlib.sha256("\x00".join([version, *shown_ids]).encode()).hexdigest()[:20]
            records = [r for i, r in zip(labels.ids, labels.records, strict=True) if i not in hid.ids]
    offset = 0 if cursor is None else _labels_offset(cursor, version, len(records))
    end = min(offset + limit, len(records))
    nxt = _labels_cursor(version, end) if end < len(records) else None
    head = to_json({"ontology": ont.name, "version": version, "total": len(records), "offset": offset})
    body = b"".join((head[:-1], b',"terms":[', b",".join(records[offset:end]), b'],"next_cursor":',
                     to_json(nxt), b"}"))
    return body, version


@router.get("/terms/{ontology}/labels", response_model=TermLabelPage,
            responses={200: {"headers": {"ETag": {"description": "The version, quoted", "schema": {"type": "string"}}}},
                       304: {"description": "If-None-Match names the current version: nothing changed"}})
async def term_labels(request: Request, ontology: str,
                      limit: int = Query(LABELS_DEFAULT, ge=1, le=LABELS_MAX, description="Terms per page"),
                      cursor: str | None = Query(None, max_length=LABELS_CURSOR_MAX_CHARS,
                                                 description="next_cursor of the previous page"),
                      if_none_match: str | None = Header(None, max_length=200,
                                                         description="A version (ETag) the caller holds"),
                      h: HiddenQuery = Depends(hidden_spec)) -> Response:
    """Every live term of an ontology with its name, synonyms (with scope), aspect, depth and parents, in pages: one
    sequence of calls instead of a lookup per term. Hidden terms are left out. The ETag is the version: send it as
    If-None-Match (on any page) to learn with a 304 that a copy is still current."""
    body, version = await run_in_threadpool(label_page, _svc(request), ontology, limit, cursor, h)
    etag = f'"{version}"'
    if if_none_match is not None and etag in {t.strip() for t in if_none_match.split(",")}:
        return Response(status_code=304, headers={"ETag": etag})
    return json_response(body, headers={"ETag": etag})


# ---- term recognition -----------------------------------------------------------------------------------------------
#
# ``POST /v1/terms/recognise``: the dictionary recogniser of ``search.ontology.recognise`` over every indexed
# ontology, built once per set of loaded ontology objects (a re-index makes a new one) and shared by all requests.

class _Recognisers:
    def __init__(self) -> None:
        self.key: tuple[Ontology, ...] = ()
        self.recogniser: TermRecogniser | None = None
        self.lock = threading.Lock()

    def get(self, onts: list[Ontology]) -> TermRecogniser:
        key = tuple(onts)
        current = self.recogniser
        if current is not None and len(key) == len(self.key) and all(a is b for a, b in zip(key, self.key,
                                                                                               strict=True)):
            return current
        with self.lock:
            if self.recogniser is None or len(key) != len(self.key) or \
                    not all(a is b for a, b in zip(key, self.key, strict=True)):
                r = TermRecogniser()
                for ont in onts:
                    r.extend(ont.name, (t for t in ont.terms() if not t.obsolete))
                self.recogniser, self.key = r.learn_morphology(), key
            return self.recogniser


_RECOGNISERS = _Recognisers()


def recognise(svc: TermService, body: RecogniseRequest, h: HiddenQuery) -> RecogniseResponse:
    """The work of the route: bounds, the ontologies asked for (a task names its own), the hidden ids, the matches."""
    total = sum(len(t) for t in body.texts)
    if total > MAX_RECOGNISE_CHARS:
        raise LimitExceeded(f"texts hold {total:,} characters; at most {MAX_RECOGNISE_CHARS:,} per request: send "
                            "a document's paragraphs in several requests", details={"field": "texts",
                                                                                    "max": MAX_RECOGNISE_CHARS})
    if body.task is not None and body.ontologies is not None:
        raise InvalidRequest("give ontologies or task, not both", details={"field": "task"})
    indexed = svc.names()
    if body.task is not None:
        wanted = [o for o in TASK_ONTOLOGIES[body.task] if o in indexed]
        if not wanted:
            raise NotFound(f"task {body.task} needs the ontologies {', '.join(TASK_ONTOLOGIES[body.task])}; none "
                           "is indexed", details={"valid": indexed})
    else:
        wanted = list(dict.fromkeys(body.ontologies if body.ontologies is not None else indexed))
    for name in wanted:
        svc.ontology(name)   # an unknown name is a 404 listing the indexed ones
    recogniser = _RECOGNISERS.get([svc.ontology(n) for n in indexed])
    hidden: set[str] = set()
    for name in wanted:
        hidden |= svc.hidden(name, h.hidden, h.descendants).ids
    found = recogniser.recognise(body.texts, wanted, hidden, activity_rule=body.molecular_function == "activity")
    return RecogniseResponse(ontologies=wanted, mentions=[[RecognisedMention.model_validate({
        "term_id": m.term.id, "ontology": m.term.ontology, "name": m.term.name, "aspect": m.term.aspect,
        "depth": m.term.depth, "start": m.start, "end": m.end, "text": m.text, "via": m.via, "inflected": m.inflected,
        "sentence_start": m.sentence_start, "sentence_end": m.sentence_end}) for m in ms] for ms in found])


@router.post("/terms/recognise", response_model=RecogniseResponse)
async def recognise_terms(request: Request, body: RecogniseRequest,
                          h: HiddenQuery = Depends(hidden_spec)) -> Response:
    """Ontology terms in the texts of one document, by dictionary: leftmost-longest matches of names and synonyms
    within sentences, word forms, the document's own abbreviations, ontology acronyms only where the document names
    the term; per text, each mention's term, span, matched text, what matched and its sentence. ``task`` (or the
    order of ``ontologies``) decides between same-named terms of two ontologies; hidden terms are never reported.
    The rules: docs/ontologies.md."""
    return await answer(lambda: recognise(_svc(request), body, h))
