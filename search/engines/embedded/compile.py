"""The engine-neutral ``EngineQuery`` as tantivy queries (the cluster engine's ``query`` module mirrors this one, so
that both engines match the same documents), and the names of the named clauses each hit matched.

A query without a ``tree`` is its clauses OR-ed (at least one must match), required clauses and filters added as
musts (``source``: passages marked or not as a supplement's, papers searched on the fields ``paper_fields`` chose).
A query with a ``tree`` (the query language's operators and fields: ``search.retrieval.boolean``) is compiled
node by node: ``BoolNode`` → a boolean query (``should`` bundled into one must when the group has no ``must``, as
Elasticsearch's ``minimum_should_match`` 1), ``FilterNode`` → a range or term filter that does not score, a clause
with a ``field`` → that paper field (``title_w``/``abstract_w``, layout 7+), or, in passages, the clause within an
abstract passage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import groupby

import tantivy

from search.core.errors import FlysiftError
from search.core.models import ABSTRACT
from search.core.query import BoolNode, Clause, ConceptNode, EngineQuery, FilterNode, Filters, QueryNode, concept_score
from search.engines.embedded.match import any_of
from search.text.analysis import analyze

VIEW_SUFFIX = {"word": "_w", "symbol": "_s"}
_MIN, _MAX = -(2**62), 2**62


def fields_unavailable(field: str) -> FlysiftError:
    return FlysiftError(f"This collection's index predates {field}: search (its build has no separate {field} "
                        "field); rebuild it (flysift index corpus …) to search one field.", code="rebuild_needed",
                        status=409, details={"field": field})


class Compiler:
    """Compiles queries against one index: ``fields`` are the text fields a clause searches with their boosts,
    ``section_field`` the papers' ``section_types`` or the passages' ``section_type``, ``kind`` which index it is
    and ``paper_fields`` whether a papers index has the separate title and abstract fields."""

    def __init__(self, schema: tantivy.Schema, fields: dict[str, float], section_field: str, *,
                 kind: str = "papers", paper_fields: bool = False, supplements: bool = False,
                 concepts: Callable[[list[str]], dict[str, int]] | None = None):
        self.schema, self.fields, self.section_field = schema, fields, section_field
        self.kind, self.paper_fields, self.supplements = kind, paper_fields, supplements
        #: the documents (pmcid or passage id) that mention terms, with how often (``term:``)
        self.concepts = concepts

    def query(self, query: EngineQuery) -> tantivy.Query:
        if not self.fields:   # a source filter no field of this build can answer (supplements of a build without)
            return tantivy.Query.empty_query()
        if query.tree is not None:
            root = self.node(query.tree)
            if root is None:
                # nothing left to match: only filters (a browse of what they keep), or nothing at all
                root = tantivy.Query.all_query() if _only_filters(query.tree) else tantivy.Query.empty_query()
            return self._with_filters(root, query.filters)
        shoulds: list[tantivy.Query] = []
        musts: list[tantivy.Query] = []
        for clause in query.clauses:
            q = self.clause(clause)
            if q is None:
                continue
            (musts if clause.required else shoulds).append(q)
        if shoulds:
            musts.append(tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in shoulds]))
        if not musts:
            return tantivy.Query.empty_query()
        root = musts[0] if len(musts) == 1 else tantivy.Query.boolean_query([(tantivy.Occur.Must, q) for q in musts])
        return self._with_filters(root, query.filters)

    def _with_filters(self, root: tantivy.Query, f: Filters) -> tantivy.Query:
        filters = []
        if f.year_from is not None or f.year_to is not None:
            filters.append(self._years(f.year_from, f.year_to))
        if f.section_types:
            filters.append(any_of(self.schema, self.section_field, f.section_types))
        if f.pmcids:
            filters.append(any_of(self.schema, "pmcid", f.pmcids))
        excluded = None
        if f.source and self.kind == "passages":   # supplement passages are marked in ``source`` (layout 6+)
            if not self.supplements:
                if f.source == "supplement":
                    return tantivy.Query.empty_query()
            else:
                marked = tantivy.Query.term_query(self.schema, "source", "supplement")
                if f.source == "supplement":
                    filters.append(marked)
                else:
                    excluded = marked
        if not filters and excluded is None:
            return root
        clauses = [(tantivy.Occur.Must, root)]
        clauses += [(tantivy.Occur.Must, tantivy.Query.const_score_query(q, 0.0)) for q in filters]
        if excluded is not None:
            clauses.append((tantivy.Occur.MustNot, excluded))
        return tantivy.Query.boolean_query(clauses)

    def _years(self, lo: int | None, hi: int | None) -> tantivy.Query:
        return tantivy.Query.range_query(self.schema, "year", tantivy.FieldType.Integer,
                                         lo if lo is not None else _MIN, hi if hi is not None else _MAX)

    # ---- nodes ------------------------------------------------------------------------------------------------
    def node(self, node: QueryNode) -> tantivy.Query | None:
        if isinstance(node, Clause):
            return self.clause(node)
        if isinstance(node, ConceptNode):
            return self.concept(node)
        if isinstance(node, FilterNode):
            return tantivy.Query.const_score_query(self.filter(node), 0.0)
        musts = [q for q in (self.node(n) for n in node.must) if q is not None]
        shoulds = [q for q in (self.node(n) for n in node.should) if q is not None]
        nots = [q for q in (self.node(n) for n in node.must_not) if q is not None]
        filters = [tantivy.Query.const_score_query(self.filter_or_node(n), 0.0) for n in node.filter]
        if shoulds and not musts:
            musts.append(shoulds[0] if len(shoulds) == 1 else
                         tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in shoulds]))
            shoulds = []
        if not musts and not filters:
            return None
        occurs = [(tantivy.Occur.Must, q) for q in musts + filters] + [(tantivy.Occur.Should, q) for q in shoulds]
        occurs += [(tantivy.Occur.MustNot, q) for q in nots]
        return occurs[0][1] if len(occurs) == 1 else tantivy.Query.boolean_query(occurs)

    def concept(self, node: ConceptNode) -> tantivy.Query:
        """The documents mentioning the terms (or a descendant), each scored by its mentions: one constant-score
        group per mention count (``search.engines.embedded.concepts.score``)."""
        if self.concepts is None:
            raise FlysiftError("term: needs the collection's concept index", code="concepts_missing", status=409)
        counts = self.concepts(node.ids)
        if not counts:
            return tantivy.Query.empty_query()
        key = "pmcid" if self.kind == "papers" else "id"
        groups = [(n, [k for k, _ in g]) for n, g in groupby(sorted(counts.items(), key=lambda kv: kv[1]),
                                                             key=lambda kv: kv[1])]
        parts = [tantivy.Query.const_score_query(any_of(self.schema, key, keys), concept_score(n))
                 for n, keys in groups]
        return parts[0] if len(parts) == 1 else tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, q) for q in parts])

    def filter_or_node(self, node: QueryNode) -> tantivy.Query:
        if isinstance(node, FilterNode):
            return self.filter(node)
        q = self.node(node)
        return q if q is not None else tantivy.Query.empty_query()

    def filter(self, node: FilterNode) -> tantivy.Query:
        if node.field == "year":
            return self._years(node.year_from, node.year_to)
        if node.field == "section":
            return any_of(self.schema, self.section_field, node.values)
        return any_of(self.schema, "pmcid", node.values)

    def clause(self, clause: Clause) -> tantivy.Query | None:
        """One clause over every field in its view (the field's score times its boost, summed), or over the one
        paper field it names."""
        if clause.field and self.kind == "papers":
            if not self.paper_fields:
                raise fields_unavailable(clause.field)
            q = clause_query(clause, self.schema, {clause.field: 1.0})
        else:
            q = clause_query(clause, self.schema, self.fields)
        if q is not None and clause.field == "abstract" and self.kind == "passages":
            q = tantivy.Query.boolean_query([
                (tantivy.Occur.Must, q),
                (tantivy.Occur.Must, tantivy.Query.const_score_query(
                    any_of(self.schema, self.section_field, [ABSTRACT]), 0.0))])
        return q


def _only_filters(node: BoolNode) -> bool:
    return not node.must and not node.should and not node.must_not


def clause_query(clause: Clause, schema: tantivy.Schema, fields: dict[str, float]) -> tantivy.Query | None:
    tokens = analyze(clause.view, clause.text)
    if not tokens:
        return None
    per_field = []
    for field, boost in fields.items():
        name = field + VIEW_SUFFIX[clause.view]
        if len(tokens) == 1:
            q = tantivy.Query.term_query(schema, name, tokens[0])
        elif clause.phrase and clause.view == "word":   # the symbol view has no positions (layout 4)
            q = tantivy.Query.phrase_query(schema, name, [*tokens])
        elif clause.phrase:
            q = tantivy.Query.boolean_query([(tantivy.Occur.Must, tantivy.Query.term_query(schema, name, t))
                                             for t in tokens])
        else:
            q = tantivy.Query.boolean_query([(tantivy.Occur.Should, tantivy.Query.term_query(schema, name, t))
                                             for t in tokens])
        per_field.append(tantivy.Query.boost_query(q, boost) if boost != 1.0 else q)
    q = per_field[0] if len(per_field) == 1 else tantivy.Query.boolean_query(
        [(tantivy.Occur.Should, q) for q in per_field])
    return tantivy.Query.boost_query(q, clause.boost) if clause.boost != 1.0 else q


def matched(searcher: tantivy.Searcher, schema: tantivy.Schema, query: EngineQuery, fields: dict[str, float],
            key: str, keys: list[str], addrs: Sequence[tantivy.DocAddress]) -> dict[str, list[str]]:
    """For each hit key, the names of the named clauses it matches (one filtered query per named clause).

    A match is mapped to its hit by document address (``addrs``, the hits' own): loading the stored document of
    every (hit, name) pair cost a gene-expanded search in a session (a dozen names) more than the search."""
    out: dict[str, list[str]] = {k: [] for k in keys}
    if not keys:
        return out
    at = {(a.segment_ord, a.doc): k for k, a in zip(keys, addrs, strict=True)}
    restrict = tantivy.Query.const_score_query(any_of(schema, key, keys), 0.0)
    for clause in query.named():
        q = clause_query(clause.model_copy(update={"boost": 1.0}), schema, fields)
        if q is None or clause.name is None:
            continue
        both = tantivy.Query.boolean_query([(tantivy.Occur.Must, q), (tantivy.Occur.Must, restrict)])
        res = searcher.search(both, len(keys), count=False)
        for _, addr in res.hits:
            k = at.get((addr.segment_ord, addr.doc))
            if k is None:   # another document with a hit's key (none in a published build): read its key
                k = searcher.doc(addr)[key][0]
            if k in out:
                out[k].append(clause.name)
    return out
