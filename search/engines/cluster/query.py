"""The engine-neutral ``EngineQuery`` as query DSL, and passage highlights back as ``Snippet``s (mirrors the embedded
engine's ``_compile``, so both engines match the same documents; paper snippets come from ``search.text.snippets``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from search.core.models import Snippet
from search.core.query import Clause, EngineQuery
from search.text import analysis

PASSAGE_FIELDS = {"text": 1.0}
VIEW_SUBFIELD = {"word": "", "symbol": ".s"}
SNIPPET_CHARS = 240
#: highlighter markers: private-use characters that do not occur in papers
PRE, POST = "\ue000", "\ue001"


def _has_tokens(clause: Clause) -> bool:
    """Whether the clause's text analyses to at least one token (an empty clause is skipped, as in embedded)."""
    spans = analysis.word_spans(clause.text) if clause.view == "word" else analysis.symbol_spans(clause.text)
    return any(len(t.encode()) < analysis.MAX_TOKEN_CHARS for _, _, t in spans)


def compile_query(query: EngineQuery, fields: dict[str, float], section_field: str) -> dict[str, Any]:
    """The engine-neutral query as query DSL: optional clauses OR-ed (at least one must match when present),
    required clauses must match, filters do not score. Mirrors ``EmbeddedEngine._compile``."""
    shoulds: list[dict[str, Any]] = []
    musts: list[dict[str, Any]] = []
    if not fields:   # a source no field of this index holds
        return {"match_none": {}}
    for clause in query.clauses:
        if _has_tokens(clause):
            (musts if clause.required else shoulds).append(_clause(clause, fields))
    if shoulds:
        musts.append(shoulds[0] if len(shoulds) == 1 else {"bool": {"should": shoulds}})
    if not musts:
        return {"match_none": {}}
    f = query.filters
    filters: list[dict[str, Any]] = []
    if f.year_from is not None or f.year_to is not None:
        bounds = {k: v for k, v in (("gte", f.year_from), ("lte", f.year_to)) if v is not None}
        filters.append({"range": {"year": bounds}})
    if f.section_types:
        filters.append({"terms": {section_field: f.section_types}})
    if f.pmcids:
        filters.append({"terms": {"pmcid": f.pmcids}})
    out: dict[str, Any] = {"bool": {"must": musts, "filter": filters}}
    if f.source and section_field == "section_type":   # passages: supplement ones carry ``source``
        marked = {"term": {"source": "supplement"}}
        if f.source == "supplement":
            filters.append(marked)
        else:
            out["bool"]["must_not"] = [marked]
    return out


def _clause(clause: Clause, fields: dict[str, float]) -> dict[str, Any]:
    """One clause over every field in the clause's view; field scores add up (``most_fields``), as in embedded."""
    sub = VIEW_SUBFIELD[clause.view]
    if clause.phrase:
        q: dict[str, Any] = {"bool": {"should": [
            {"match_phrase": {f + sub: {"query": clause.text, "boost": b}}} for f, b in fields.items()]}}
        inner = q["bool"]
    else:
        q = {"multi_match": {"query": clause.text, "type": "most_fields", "operator": "or",
                             "fields": [f"{f}{sub}^{b}" for f, b in fields.items()]}}
        inner = q["multi_match"]
    if clause.boost != 1.0:
        inner["boost"] = clause.boost
    if clause.name:
        inner["_name"] = clause.name
    return q


def highlight(query: EngineQuery, fields: Iterable[str]) -> dict[str, Any]:
    views = {c.view for c in query.clauses}
    return {"type": "unified", "pre_tags": [PRE], "post_tags": [POST], "fragment_size": SNIPPET_CHARS,
            "number_of_fragments": 1, "require_field_match": True,
            "fields": {f + VIEW_SUBFIELD[v]: {} for f in fields for v in ("word", "symbol") if v in views}}


def snippet(field: str, highlight: dict[str, list[str]]) -> Snippet | None:
    """The highlighted fragment of ``field`` (either view; the one with more highlights) as text + ranges."""
    best: Snippet | None = None
    for view in ("word", "symbol"):
        frags = highlight.get(field + VIEW_SUBFIELD[view])
        if not frags:
            continue
        text: list[str] = []
        spans, start = [], 0
        for ch in frags[0]:
            if ch == PRE:
                start = len(text)
            elif ch == POST:
                spans.append((start, len(text)))
            else:
                text.append(ch)
        snip = Snippet(field=field, text="".join(text), highlights=spans)
        if best is None or len(spans) > len(best.highlights):
            best = snip
    return best
