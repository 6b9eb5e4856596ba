"""The query language's syntax tree (``search.core.querylang``) read into the engine-neutral query.

Every word is read as the planner reads free text (``search.retrieval.planner``: gene-aware, case, stop words,
compounds), with the context of the whole query: the case the query is written in, whether it is running text,
whether stop words are dropped are decided over all its words, as for a plain query. Then:

* a query whose syntax changes nothing (words, phrases, ``gene:``, ``OR``, groups of alternatives, and ``year:``/
  ``section:``/``pmcid:`` restricting the whole query) is planned as the plain text of its words (``plan``), with
  the filters folded into ``Filters``: it is searched exactly as before the language existed;
* anything else (``AND``, ``NOT``, ``-``, ``+``, ``title:``, ``abstract:``, ``term:``, a filter inside a group or
  negated) becomes ``EngineQuery.tree``: a ``BoolNode`` of groups, one ``should`` group of clauses per word, a
  ``ConceptNode`` per ``term:`` (scored like a word, by its mentions).

Semantics are those of Elasticsearch's ``bool``: in a group with a ``must``, its ``should`` operands only add score;
``-x``/``NOT x`` excludes; a word whose every clause was dropped (a stop word in a longer query) leaves its group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any, Literal

from search.core.models import ABSTRACT, SECTION_TYPES
from search.core.query import MAX_YEAR, BoolNode, Clause, ConceptNode, EngineQuery, FilterNode, Filters, QueryNode
from search.core.querylang import Field, Group, Node, Parsed, Phrase, QuerySyntaxError, Unary, Word, leaves
from search.retrieval import planner
from search.text.analysis import split_clitics, symbol_tokens
from search.text.term_search import ID_QUERY_RE

#: how ontology prefixes are written (``term:go:0007219`` is ``GO:0007219``)
ID_PREFIXES = {"go": "GO", "fbbt": "FBbt", "fbdv": "FBdv"}

Target = Literal["papers", "passages"]

#: how people name sections (``section:results``) → the section types of ``search.core.models``
SECTION_NAMES: dict[str, str] = {t.lower(): t for t in (*SECTION_TYPES, ABSTRACT)} | {
    "introduction": "INTRO", "method": "METHODS", "materials": "METHODS", "result": "RESULTS",
    "discussion": "DISCUSS", "conclusion": "CONCL", "conclusions": "CONCL", "figure": "FIG", "figures": "FIG",
    "tables": "TABLE", "supplementary": "SUPPL", "supplement": "SUPPL", "references": "REF",
    "acknowledgements": "ACK_FUND", "acknowledgments": "ACK_FUND", "funding": "ACK_FUND",
}


@dataclass
class _Leaf:
    """One word, phrase or gene mark of the query: what it reads as and where it came from."""

    node: Word | Phrase
    pos: int
    field: Literal["title", "abstract"] | None = None
    gene: bool = False
    tokens: list[str] = dc_field(default_factory=list)   # the word's symbol tokens (after clitics)
    clitics: list[str] = dc_field(default_factory=list)


def _collect(node: Node, field_name: str | None, out: list[_Leaf]) -> None:
    if isinstance(node, Group):
        for x in node.items:
            _collect(x, field_name, out)
    elif isinstance(node, Unary):
        _collect(node.item, field_name, out)
    elif isinstance(node, Field):
        if node.name in ("title", "abstract", "gene"):
            _collect(node.value, node.name, out)
    else:
        leaf = _Leaf(node, node.pos, field=field_name if field_name in ("title", "abstract") else None,  # type: ignore[arg-type]
                     gene=field_name == "gene")
        if isinstance(node, Word) and not leaf.gene:
            rest, leaf.clitics = split_clitics(node.text)
            leaf.tokens = [t for chunk in rest.split() for t in symbol_tokens(chunk)]
        out.append(leaf)


def _plain_equivalent(node: Node, top: bool = True) -> bool:
    """Whether the tree means what its words mean as plain text: alternatives only, filters only at the top."""
    if isinstance(node, Word | Phrase):
        return True
    if isinstance(node, Field):
        if node.name == "gene":
            return isinstance(node.value, Word)
        value_ok = isinstance(node.value, Word) or (isinstance(node.value, Group) and node.value.op == "or")
        return top and node.name in ("year", "section", "pmcid") and value_ok
    if isinstance(node, Group):
        return node.op == "or" and all(_plain_equivalent(x, top and not isinstance(x, Group)) for x in node.items)
    return False


def _source(leaf: Word | Phrase | Field) -> str:
    if isinstance(leaf, Word):
        return leaf.text
    if isinstance(leaf, Phrase):
        return f'"{leaf.text}"'
    return f"gene:{_source(leaf.value)}" if isinstance(leaf.value, Word | Phrase) else ""


class Reader:
    """Reads one parsed query into an ``EngineQuery`` (see the module docstring)."""

    def __init__(self, text: str, parsed: Parsed, target: Target, *, known_symbols: frozenset[str] | set[str],
                 foldable: frozenset[str] | set[str], compounds: frozenset[str] | set[str],
                 plan: Callable[..., EngineQuery] = planner.plan, concepts: bool = True):
        self.text, self.parsed, self.target = text, parsed, target
        #: whether ``term:`` may be used (not in a session that hides terms: mentions would name hidden ids)
        self.concepts_allowed = concepts
        self.known, self.foldable, self.compounds = known_symbols, foldable, compounds
        self.plan = plan
        self.trace: list[dict[str, Any]] = []
        self.case: planner.Case = "as written"
        #: the text planned as plain text, when the query's syntax changes nothing
        self.plain_text: str | None = None

    def error(self, pos: int, rule: str, message: str, hint: str) -> QuerySyntaxError:
        return QuerySyntaxError(self.text, pos, rule, message, hint)

    # ---- filters ------------------------------------------------------------------------------------------------
    def filter_node(self, f: Field) -> FilterNode | BoolNode:
        """``year:2005``, ``year:2005..2010``, ``section:results``, ``pmcid:PMC123``; a group of values is OR-ed."""
        values = self._filter_values(f.value, f.name)
        if f.name == "year":
            nodes: list[FilterNode | BoolNode] = [self._year(v, pos) for v, pos in values]
        elif f.name == "section":
            nodes = [FilterNode(field="section", values=[self._section(v, pos)]) for v, pos in values]
        else:
            nodes = [FilterNode(field="pmcid", values=[v]) for v, _ in values]
        if isinstance(f.value, Group) and f.value.op == "and":
            return BoolNode(must=list(nodes))
        return nodes[0] if len(nodes) == 1 else BoolNode(should=list(nodes))

    def _filter_values(self, node: Node, name: str) -> list[tuple[str, int]]:
        if isinstance(node, Word):
            return [(node.text, node.pos)]
        if isinstance(node, Group) and all(isinstance(x, Word) for x in node.items):
            return [(x.text, x.pos) for x in node.items if isinstance(x, Word)]
        raise self.error(getattr(node, "pos", 0), "filter_value", f"{name}: takes a value, not a phrase or an "
                         "expression", f"Write {name}:VALUE or {name}:(VALUE OR VALUE).")

    def concept_node(self, f: Field) -> ConceptNode | BoolNode:
        """``term:GO:0007219``, ``term:(GO:1 OR GO:2)`` (either), ``term:(GO:1 AND GO:2)`` (both)."""
        if not self.concepts_allowed:
            raise self.error(f.pos, "term_in_session", "term: is not available in a session that hides terms",
                             "Search words and names here; concept search would name the hidden terms.")
        ids = []
        for value, pos in self._filter_values(f.value, "term"):
            m = ID_QUERY_RE.fullmatch(value)
            if m is None:
                raise self.error(pos, "term_id", f"term:{value[:40]} is not a term id",
                                 "Write term:GO:0007219 (an ontology id: GO, FBbt, FBdv); find ids with "
                                 "/v1/terms/search.")
            prefix, _, local = m.group(1).partition(":")
            ids.append(f"{ID_PREFIXES.get(prefix.lower(), prefix)}:{local}")
        if isinstance(f.value, Group) and f.value.op == "and":
            return BoolNode(must=[ConceptNode(ids=[i]) for i in ids])
        return ConceptNode(ids=list(dict.fromkeys(ids)))

    def _year(self, value: str, pos: int) -> FilterNode:
        lo, sep, hi = value.partition("..")
        try:
            y_from = int(lo) if lo else None
            y_to = (int(hi) if hi else None) if sep else y_from
        except ValueError:
            y_from = y_to = -1
        ok = (y_from is not None or y_to is not None) and all(
            y is None or 0 <= y <= MAX_YEAR for y in (y_from, y_to)) and len(value) <= 10
        if not ok or (y_from is not None and y_to is not None and y_from > y_to):
            raise self.error(pos, "year", f"year:{value[:20]} is not a year or a range of years",
                             "Write year:2005, year:2005..2010, year:2005.. or year:..2010 (years 0-9999, the first "
                             "not after the second).")
        return FilterNode(field="year", year_from=y_from, year_to=y_to)

    def _section(self, value: str, pos: int) -> str:
        kind = SECTION_NAMES.get(value.lower())
        if kind is None:
            raise self.error(pos, "section", f"unknown section {value[:40]!r}",
                             "Sections are " + ", ".join(sorted({k.lower() for k in SECTION_NAMES.values()})) + ".")
        if kind == ABSTRACT and self.target == "papers":
            raise self.error(pos, "section", "section:abstract does not filter papers",
                             "To search abstracts write abstract:WORDS; section: keeps papers that have a body "
                             "section of that type.")
        return kind

    # ---- reading ------------------------------------------------------------------------------------------------
    def read(self, filters: Filters | None, expansions: Iterable[str]) -> EngineQuery:
        tree = self.parsed.tree
        assert tree is not None
        all_leaves = leaves(tree)
        if not self.parsed.syntax:
            return self._plain(self.text, filters, expansions)
        if _plain_equivalent(tree):
            restrict = [x for x in all_leaves if isinstance(x, Field) and x.name in ("year", "section", "pmcid")]
            text = " ".join(_source(x) for x in all_leaves if x not in restrict)
            merged = self._merge_filters(filters, restrict)
            if not text.strip():
                self.plain_text = ""
                return EngineQuery(filters=merged, tree=BoolNode())   # filters only: every paper they keep
            return self._plain(text, merged, expansions)
        return self._tree(tree, filters, expansions)

    def _plain(self, text: str, filters: Filters | None, expansions: Iterable[str]) -> EngineQuery:
        self.plain_text = text
        return self.plan(text, filters=filters, known_symbols=self.known, expansions=expansions,
                         foldable=self.foldable, compounds=self.compounds)

    def reading(self) -> tuple[list[dict[str, Any]], planner.Case]:
        """The reading token by token (``explain``)."""
        if self.plain_text is not None:
            _, trace, case = planner._reading(self.plain_text, self.known, self.foldable, self.compounds)
            return trace, case
        return self.trace, self.case

    def _merge_filters(self, filters: Filters | None, restrict: list[Field]) -> Filters:
        """The request's filters and the query's top-level ``year:``/``section:``/``pmcid:`` (all must hold)."""
        out = (filters or Filters()).model_copy(deep=True)
        for f in restrict:
            values = self._filter_values(f.value, f.name)
            if f.name == "year":
                if len(values) != 1:
                    raise self.error(f.pos, "year", "year:(…) takes one range", "Write year:2005..2010.")
                n = self._year(*values[0])
                lo = max((y for y in (out.year_from, n.year_from) if y is not None), default=None)
                hi = min((y for y in (out.year_to, n.year_to) if y is not None), default=None)
                if lo is not None and hi is not None and lo > hi:
                    raise self.error(f.pos, "year", "the year ranges of this query exclude each other",
                                     "Give one year range (the request's filters count too).")
                out.year_from, out.year_to = lo, hi
            elif f.name == "section":
                out.section_types = _intersect(out.section_types, [self._section(v, pos) for v, pos in values])
            else:
                out.pmcids = _intersect(out.pmcids, [v for v, _ in values])
        return out

    def _tree(self, tree: Node, filters: Filters | None, expansions: Iterable[str]) -> EngineQuery:
        found: list[_Leaf] = []
        _collect(tree, None, found)
        words = [t for leaf in found if isinstance(leaf.node, Word) and not leaf.gene for t in leaf.tokens]
        marked = sum(1 for leaf in found if leaf.gene or isinstance(leaf.node, Phrase))
        ctx = planner._Context(words, marked, self.known, self.foldable, self.compounds)
        self.case = ctx.case
        readings = iter(ctx.read)
        self._leaf_clauses: dict[int, list[Clause]] = {}
        for leaf in found:
            self._leaf_clauses[id(leaf.node)] = self._read_leaf(leaf, ctx, readings)
        node = self._node(tree, top=True)
        if node is None:
            raise self.error(tree.pos, "nothing_to_find", "this query has only stop words",
                             "Add a content word, or quote the words (\"to be\") to search for them as a phrase.")
        positive: list[Clause] = []
        _positive(node, positive)
        names = [planner.expansion_clause(n, self.known) for n in dict.fromkeys(expansions)]
        root = node if isinstance(node, BoolNode) else BoolNode(should=[node])
        if names:
            root = root.model_copy(update={"should": [*root.should, *names]})
        if not _matches_something(root):
            raise self.error(tree.pos, "nothing_to_find", "this query only excludes",
                             "Add a word, a phrase or a filter to search for (NOT and - only take away).")
        dropped = [t["token"] for t in self.trace if t.get("view") == "dropped"]
        return EngineQuery(clauses=positive + names, filters=filters or Filters(), dropped=dropped, case=ctx.case,
                           tree=root)

    def _read_leaf(self, leaf: _Leaf, ctx: planner._Context, readings: Iterable[tuple[str, str, str]]
                   ) -> list[Clause]:
        node = leaf.node
        clauses: list[Clause] = []
        if leaf.gene:
            for tok in symbol_tokens(node.text)[:1] if isinstance(node, Word) else symbol_tokens(node.text):
                clauses.append(Clause(text=tok, view="symbol"))
                self.trace.append({"token": tok, "view": "symbol", "why": "marked gene:"})
        elif isinstance(node, Phrase):
            clause, entry = planner.quoted_clause(node.text)
            if clause is not None and entry is not None:
                clauses.append(clause)
                self.trace.append(entry)
        else:
            self.trace += [{"token": c, "view": "dropped", "why": "clitic"} for c in leaf.clitics]
            it = iter(readings)
            for _ in leaf.tokens:
                tok, view, why = next(it)
                more, entry = planner.token_clauses(tok, view, why, ctx)
                clauses += more
                self.trace.append(entry)
        if leaf.field:
            clauses = [c.model_copy(update={"field": leaf.field}) for c in clauses]
            if leaf.field == "title" and self.target == "passages":
                raise self.error(leaf.pos, "field_target", "title: does not apply to passages",
                                 "Passages have no title: search papers for title:…, or drop title: here.")
        return clauses

    def _node(self, node: Node, top: bool) -> QueryNode | None:
        """The engine node of a syntax node; None for one that reads as nothing (only dropped stop words)."""
        if isinstance(node, Word | Phrase):
            clauses = self._leaf_clauses[id(node)]
            if not clauses:
                return None
            return clauses[0] if len(clauses) == 1 else BoolNode(should=list(clauses))
        if isinstance(node, Field):
            if node.name in ("year", "section", "pmcid"):
                return self.filter_node(node)
            if node.name == "term":
                return self.concept_node(node)
            return self._node(node.value, top=False)
        if isinstance(node, Unary):
            inner = self._node(node.item, top=False)
            if inner is None:
                return None
            return BoolNode(must_not=[inner]) if node.op == "not" else BoolNode(must=[inner])
        must: list[QueryNode] = []
        should: list[QueryNode] = []
        must_not: list[QueryNode] = []
        restrict: list[QueryNode] = []
        for item in node.items:
            sub = self._node(item, top=False)
            if sub is None:
                continue
            if isinstance(item, Unary) and item.op == "not":
                must_not.extend(sub.must_not)   # type: ignore[union-attr]
            elif top and _is_filter(item if not isinstance(item, Unary) else item.item):
                restrict.append(sub.must[0] if isinstance(item, Unary) else sub)  # type: ignore[union-attr]
            elif isinstance(item, Unary):
                must.extend(sub.must)   # type: ignore[union-attr]
            elif node.op == "and":
                must.append(sub)
            else:
                should.append(sub)
        if not (must or should or must_not or restrict):
            return None
        return BoolNode(must=must, should=should, must_not=must_not, filter=restrict)


def _is_filter(node: Node) -> bool:
    return isinstance(node, Field) and node.name in ("year", "section", "pmcid")


def _intersect(have: list[str] | None, values: list[str]) -> list[str]:
    """Filter values that satisfy both the request's list (if any) and the query's."""
    if have is None:
        return list(dict.fromkeys(values))
    return [v for v in dict.fromkeys(values) if v in have]


def _positive(node: QueryNode | None, out: list[Clause]) -> None:
    """The clauses that can match a hit (not under ``must_not``), for highlighting and ``matched``."""
    if isinstance(node, Clause):
        out.append(node)
    elif isinstance(node, BoolNode):
        for x in (*node.must, *node.should):
            _positive(x, out)


def _matches_something(node: QueryNode) -> bool:
    """Whether a node can match a document by itself (a group of ``must_not`` alone cannot)."""
    if isinstance(node, Clause | FilterNode | ConceptNode):
        return True
    return any(_matches_something(x) for x in (*node.must, *node.should, *node.filter))


def read_query(text: str, parsed: Parsed, target: Target, *, filters: Filters | None = None,
               expansions: Iterable[str] = (), known_symbols: frozenset[str] | set[str] = frozenset(),
               foldable: frozenset[str] | set[str] = frozenset(), compounds: frozenset[str] | set[str] = frozenset(),
               plan: Callable[..., EngineQuery] = planner.plan, concepts: bool = True) -> tuple[EngineQuery, Reader]:
    """The engine query of a parsed query (``search.core.querylang.parse``) for a paper or passage search, and its
    reader (``reader.reading()``: the reading token by token, for ``explain``). ``plan`` plans a query whose syntax
    changes nothing (the service passes its own, which benchmarks may replace)."""
    reader = Reader(text, parsed, target, known_symbols=known_symbols, foldable=foldable, compounds=compounds,
                    plan=plan, concepts=concepts)
    return reader.read(filters, expansions), reader


def positive_text(parsed: Parsed) -> str:
    """The words and phrases a query searches for (not those it excludes): what a dense search embeds."""
    out: list[str] = []

    def walk(node: Node | None, negated: bool) -> None:
        if node is None:
            return
        if isinstance(node, Group):
            for x in node.items:
                walk(x, negated)
        elif isinstance(node, Unary):
            walk(node.item, negated or node.op == "not")
        elif isinstance(node, Field):
            if node.name in ("title", "abstract", "gene"):
                walk(node.value, negated)   # term:, year:, section:, pmcid: are no words to embed
        elif not negated:
            out.append(node.text)

    walk(parsed.tree, False)
    return " ".join(out)


@dataclass
class Reading:
    """A query as a search reads it: the engine query, the query language's reader (None for plain text) and the
    text a dense search embeds."""

    text: str
    query: EngineQuery
    reader: Reader | None
    dense_text: str
