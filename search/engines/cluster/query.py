"""The engine-neutral ``EngineQuery`` as query DSL, and passage highlights back as ``Snippet``s (mirrors the embedded
engine's ``compile`` module, so both engines match the same documents; paper snippets come from
``search.text.snippets``).

A query with a ``tree`` (the query language) becomes nested ``bool`` queries: ``should`` bundled into one ``must``
when a group has no ``must`` (``minimum_should_match`` 1 would do the same, but a ``filter`` beside it makes the
cluster's default 0), ``filter`` and ``FilterNode`` as non-scoring filters, a clause with a ``field`` on that paper
field (``title``/``abstract``, indexed from papers layout 6) or, in passages, within an abstract passage."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from search.core.errors import FlysiftError
from search.core.models import ABSTRACT, Snippet
from search.core.query import BoolNode, Clause, ConceptNode, EngineQuery, FilterNode, Filters, QueryNode, concept_score
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


def compile_query(query: EngineQuery, fields: dict[str, float], section_field: str, *, kind: str = "papers",
                  paper_fields: bool = True, concepts: Callable[[list[str]], dict[str, int]] | None = None
                  ) -> dict[str, Any]:
    """The engine-neutral query as query DSL: optional clauses OR-ed (at least one must match when present),
    required clauses must match, filters do not score; or the ``tree``. Mirrors the embedded engine's ``Compiler``.
    ``paper_fields``: the papers index has the separate title and abstract fields (layout 6)."""
    if not fields:   # a source no field of this index holds
        return {"match_none": {}}
    if query.tree is not None:
        ctx = _Ctx(fields, section_field, kind, paper_fields, concepts)
        root = ctx.node(query.tree)
        if root is None:
            root = {"match_all": {}} if not (query.tree.must or query.tree.should or query.tree.must_not) \
                else {"match_none": {}}
        return _with_filters(root, query.filters, section_field)
    shoulds: list[dict[str, Any]] = []
    musts: list[dict[str, Any]] = []
    for clause in query.clauses:
        if _has_tokens(clause):
            (musts if clause.required else shoulds).append(_clause(clause, fields))
    if shoulds:
        musts.append(shoulds[0] if len(shoulds) == 1 else {"bool": {"should": shoulds}})
    if not musts:
        return {"match_none": {}}
    out = _with_filters(musts[0], query.filters, section_field)
    out["bool"]["must"] = musts
    return out


def _filters(f: Filters, section_field: str) -> list[dict[str, Any]]:
    filters: list[dict[str, Any]] = []
    if f.year_from is not None or f.year_to is not None:
        bounds = {k: v for k, v in (("gte", f.year_from), ("lte", f.year_to)) if v is not None}
        filters.append({"range": {"year": bounds}})
    if f.section_types:
        filters.append({"terms": {section_field: f.section_types}})
    if f.pmcids:
        filters.append({"terms": {"pmcid": f.pmcids}})
    return filters


def _with_filters(root: dict[str, Any], f: Filters, section_field: str) -> dict[str, Any]:
    """``root`` restricted by the filters (``source``: passages marked or not as a supplement's)."""
    filters = _filters(f, section_field)
    out: dict[str, Any] = {"bool": {"must": [root], "filter": filters}}
    if f.source and section_field == "section_type":   # passages: supplement ones carry ``source``
        marked = {"term": {"source": "supplement"}}
        if f.source == "supplement":
            filters.append(marked)
        else:
            out["bool"]["must_not"] = [marked]
    return out


#: keys one ``terms`` query of a ``term:`` leaf holds (the cluster's default limit is 65,536)
TERMS_CHUNK = 10_000


class _Ctx:
    def __init__(self, fields: dict[str, float], section_field: str, kind: str, paper_fields: bool,
                 concepts: Callable[[list[str]], dict[str, int]] | None = None):
        self.fields, self.section_field, self.kind, self.paper_fields = fields, section_field, kind, paper_fields
        self.concepts = concepts

    def node(self, node: QueryNode) -> dict[str, Any] | None:
        if isinstance(node, Clause):
            return self.clause(node)
        if isinstance(node, FilterNode):
            return {"bool": {"filter": [self.filter(node)]}}
        if isinstance(node, ConceptNode):
            return self.concept(node)
        return self.bool(node)

    def concept(self, node: ConceptNode) -> dict[str, Any]:
        """The documents mentioning the terms (or a descendant), each scored by its mentions (``concept_score``),
        as the embedded engine scores them: one constant score per mention count."""
        if self.concepts is None:
            raise FlysiftError("term: needs the collection's concept index", code="concepts_missing", status=409)
        counts = self.concepts(node.ids)
        if not counts:
            return {"match_none": {}}
        key = "pmcid" if self.kind == "papers" else "id"
        by_count: dict[int, list[str]] = {}
        for k, n in counts.items():
            by_count.setdefault(n, []).append(k)
        parts = [{"constant_score": {"filter": {"terms": {key: keys[i:i + TERMS_CHUNK]}}, "boost": concept_score(n)}}
                 for n, keys in sorted(by_count.items()) for i in range(0, len(keys), TERMS_CHUNK)]
        return parts[0] if len(parts) == 1 else {"bool": {"should": parts}}

    def bool(self, node: BoolNode) -> dict[str, Any] | None:
        musts = [q for q in (self.node(n) for n in node.must) if q is not None]
        shoulds = [q for q in (self.node(n) for n in node.should) if q is not None]
        nots = [q for q in (self.node(n) for n in node.must_not) if q is not None]
        filters = [self.filter(n) if isinstance(n, FilterNode) else (self.node(n) or {"match_none": {}})
                   for n in node.filter]
        if shoulds and not musts:
            musts.append(shoulds[0] if len(shoulds) == 1 else {"bool": {"should": shoulds}})
            shoulds = []
        if not musts and not filters:
            return None
        out: dict[str, Any] = {"must": musts}
        for key, value in (("should", shoulds), ("must_not", nots), ("filter", filters)):
            if value:
                out[key] = value
        return {"bool": out}

    def filter(self, node: FilterNode) -> dict[str, Any]:
        if node.field == "year":
            bounds = {k: v for k, v in (("gte", node.year_from), ("lte", node.year_to)) if v is not None}
            return {"range": {"year": bounds}}
        return {"terms": {self.section_field if node.field == "section" else "pmcid": node.values}}

    def clause(self, clause: Clause) -> dict[str, Any] | None:
        if not _has_tokens(clause):
            return None
        if clause.field and self.kind == "papers":
            if not self.paper_fields:
                raise FlysiftError(f"This collection's index predates {clause.field}: search (its papers have no "
                                   f"separate {clause.field} field); rebuild it (flysift index corpus …) to search "
                                   "one field.", code="rebuild_needed", status=409, details={"field": clause.field})
            return _clause(clause, {clause.field: 1.0})
        q = _clause(clause, self.fields)
        if clause.field == "abstract" and self.kind == "passages":
            return {"bool": {"must": [q], "filter": [{"term": {self.section_field: ABSTRACT}}]}}
        return q


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
