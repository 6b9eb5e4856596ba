"""The term pages: term search (``/terms?q=…&ontology=…``) and a term (``/terms/{id}``) with its relations and the
passages and papers that mention it.

Where the collection is concept-indexed for the term's ontology (``flysift index concepts``), the mentions come
from the concept search ``term:ID`` (the term or any descendant, as recognised in the text); elsewhere from a phrase
search of the term's name, and the page says so.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from search.core.errors import FlysiftError, InvalidRequest
from search.core.models import ConceptMention, PaperSearchResults, PassageSearchResults
from search.core.names import DEFAULT_COLLECTION
from search.schema.terms import TermRef
from search.web.pages import Ctx, param
from search.web.reading import HIGHLIGHT

#: hits listed per kind on a term page
MENTIONS_SHOWN = 10
#: characters of a passage shown around its first mentions
WINDOW = 300


async def terms_page(ctx: Ctx) -> Response:
    q = param(ctx.request, "q", 500)
    names = await run_in_threadpool(ctx.terms.names)
    ontology = param(ctx.request, "ontology", 40) or (names[0] if names else "go")
    if "go" in names and not ctx.request.query_params.get("ontology"):
        ontology = "go"
    res, error = None, None
    if q:
        try:
            res = await run_in_threadpool(lambda: ctx.terms.search(ontology, q, limit=25))
        except FlysiftError as exc:
            if exc.status >= 500:
                raise
            error = exc
    status = 200 if error is None else error.status
    return ctx.page("terms.html", status=status, q=q, ontology=ontology, ontologies=names, res=res, error=error,
                    title=f"{q} – terms" if q else "Terms")


Mark = tuple[int, int, str, str]


def window(text: str, mentions: list[ConceptMention], size: int = WINDOW) -> tuple[str, list[Mark], bool, bool]:
    """A piece of ``text`` of about ``size`` characters around its first mentions, at word boundaries: (piece, the
    mentions in it as (start, end, term id, words), cut before, cut after)."""
    if not mentions or len(text) <= size:
        return text, [(m.start, m.end, m.term_id, m.text) for m in mentions], False, False
    first = min(m.start for m in mentions)
    start = max(0, first - size // 3)
    if start and not text[start - 1].isspace():
        nxt = text.find(" ", start, first)
        start = nxt + 1 if nxt >= 0 else start
    end = min(len(text), start + size)
    if end < len(text) and not text[end].isspace():
        back = text.rfind(" ", start, end)
        end = back if back > first else end
    spans = [(m.start - start, m.end - start, m.term_id, m.text) for m in mentions if start <= m.start and m.end <= end]
    return text[start:end], spans, start > 0, end < len(text)


def term_view(ctx: Ctx, term_id: str, collection: str) -> dict[str, Any]:
    svc = ctx.terms
    found = svc.lookup(term_id)
    term = found.term
    parents = {r.id: r for r in svc.related(found.id, "parents", relations="all").terms}
    by_relation = [(rel, [parents.get(i) or TermRef(id=i, name="") for i in ids])
                   for rel, ids in sorted(term.parents.items())]
    children = svc.related(found.id, "children", relations="hierarchy", limit=200)
    out: dict[str, Any] = {"found": found, "term": term, "parents": by_relation, "children": children,
                           "passages": None, "papers": None, "mention_query": "", "mode": None, "note": None,
                           "collection": collection}
    if term.obsolete:
        return out
    search = ctx.search
    try:
        info = search.engine(collection).concepts_info()
    except FlysiftError as exc:
        out["note"] = exc.message
        return out
    indexed = list((info or {}).get("ontologies") or [])
    if term.ontology in indexed:
        query = f"term:{term.id}"
        out["mode"], out["mention_query"] = "concepts", query
        try:
            passages: PassageSearchResults = search.search_passages(
                query, syntax="query", limit=MENTIONS_SHOWN, collection=collection, snippets=False, titles=True)
            papers: PaperSearchResults = search.search_papers(query, syntax="query", limit=MENTIONS_SHOWN,
                                                              collection=collection)
        except FlysiftError as exc:
            out["note"] = exc.message
            return out
        out["passages"] = [(h, *window(h.text, h.mentions or [])) for h in passages.hits]
        out["passages_total"], out["papers"] = passages.total, papers
        return out
    if info is not None:
        out["note"] = (f"This collection's concept index covers {', '.join(indexed) or 'no ontology'}, not "
                       f"{term.ontology}: passages are found by the term's name.")
    if not term.name:
        return out
    query = '"' + term.name.replace('"', " ") + '"'
    out["mode"], out["mention_query"] = "phrase", query
    try:
        res = search.search_passages(query, limit=MENTIONS_SHOWN, collection=collection, snippets=False,
                                     highlight=HIGHLIGHT, titles=True)
    except FlysiftError as exc:
        out["note"] = exc.message
        return out
    out["passages"] = [(h, None, None, False, False) for h in res.hits]
    out["passages_total"] = res.total
    return out


async def term_page(ctx: Ctx) -> Response:
    term_id = ctx.request.path_params["term_id"]
    if len(term_id) > 100:
        raise InvalidRequest("term id: at most 100 characters.", details={"field": "term_id"})
    collection = param(ctx.request, "collection", 63) or DEFAULT_COLLECTION
    view = await run_in_threadpool(term_view, ctx, term_id, collection)
    return ctx.page("term.html", **view, title=f"{view['term'].id} {view['term'].name}")
