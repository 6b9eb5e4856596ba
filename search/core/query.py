"""The engine-neutral query: what the planner produces and every engine compiles (tantivy queries, query DSL).

A query is a list of clauses OR-ed together (BM25 sums their scores), some of which may be required, plus filters.
Each clause names the text view it targets; the engine analyses ``text`` with that view's analyzer
(``search.text.analysis``) and searches a paper's one ``text`` field, which holds its title, abstract and body, each
repeated by the collection's field weight (``Bm25Params``; default ``FIELD_BOOSTS``), so that a word has one
document frequency and one saturation over the whole paper (docs/search.md, "Scoring").
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, StringConstraints, Tag, model_validator

from search.core.base import Model

#: Default field weights for paper search (a collection may set its own: ``Settings.bm25``): how many times each field
#: is written into the paper's ``text`` field at index time, in both engines (title 2: older gene names reach recall@16
#: 0.949 / 0.977 against 0.909 / 0.944 for per-field scoring, IR nDCG unchanged; ``bench/bench_bm25f.py``). Builds
#: before the one-field layout kept one field each and read these as query-time boosts.
FIELD_BOOSTS: dict[str, float] = {"title": 2.0, "abstract": 1.0, "body": 1.0}
#: the query-time boosts a build from before the one-field layout is searched with when the collection keeps the
#: default weights (the defaults of that layout: its ranking does not change until the next build)
PER_FIELD_BOOSTS: dict[str, float] = {"title": 3.0, "abstract": 2.0, "body": 1.0}
#: the most times a field may be repeated: each repetition adds that field's postings to the index again
MAX_FIELD_REPEAT = 5
#: the one field papers are searched on (and passages, which have only their text)
PAPER_TEXT: dict[str, float] = {"text": 1.0}
PASSAGE_WEIGHTS: dict[str, float] = {"text": 1.0}
#: BM25's term-frequency saturation and length normalisation: tantivy's fixed constants (the embedded engine cannot
#: change them) and the cluster engine's default index similarity (``search.engines.cluster.mappings.similarity``).
BM25_K1 = 1.2
BM25_B = 0.75


class Bm25Params(Model):
    """The BM25 parameters of one collection: ``k1`` and ``b`` (index-time in the cluster engine, fixed in tantivy)
    and the paper fields' weights (every field of ``FIELD_BOOSTS``, in its order): whole repetition counts, written
    at index time (``repeats``)."""

    model_config = ConfigDict(frozen=True)

    k1: float = BM25_K1
    b: float = BM25_B
    field_weights: dict[str, float] = Field(default_factory=lambda: dict(FIELD_BOOSTS))

    def repeats(self) -> dict[str, int]:
        """How many times each field goes into a paper's ``text`` field (the configuration allows whole numbers
        only; a weight handed to an engine directly is rounded into 1 to ``MAX_FIELD_REPEAT``)."""
        return {f: max(1, min(MAX_FIELD_REPEAT, round(w))) for f, w in self.field_weights.items()}

    def per_field(self) -> dict[str, float]:
        """The boosts a per-field build (before the one-field layout) is searched with: the collection's weights, or
        that layout's own defaults where they are the defaults."""
        return dict(PER_FIELD_BOOSTS) if self.field_weights == FIELD_BOOSTS else dict(self.field_weights)

    def report(self, kind: Literal["papers", "passages"] = "papers") -> dict[str, Any]:
        """As ``explain`` and ``/v1/stats`` report them: passages have their one text field."""
        return bm25_parameters(kind, self.k1, self.b, self.field_weights)

    def with_next_build(self, in_force: dict[str, Any]) -> dict[str, Any]:
        """``in_force`` (a papers report) plus ``next_build``: the configured values that differ from it, which the
        collection's next build applies (field weights, and k1/b on the cluster), so that a configuration change
        that is not in force yet says so instead of looking ignored."""
        configured = self.report("papers")
        changed = {k: v for k, v in configured.items() if in_force.get(k) != v}
        return {**in_force, "next_build": changed} if changed else in_force


def bm25_parameters(kind: Literal["papers", "passages"] = "papers", k1: float = BM25_K1, b: float = BM25_B,
                    field_weights: dict[str, float] | None = None) -> dict[str, Any]:
    """The BM25 parameters a search ran under, as ``explain`` reports them."""
    fields = dict(field_weights or FIELD_BOOSTS) if kind == "papers" else dict(PASSAGE_WEIGHTS)
    return {"k1": k1, "b": b, "field_weights": fields}


def recorded_weights(value: Any) -> dict[str, float] | None:
    """The field weights a one-field build recorded (``build.json``, an index's ``_meta``) as ``Bm25Params`` holds
    them; None when the record is not what a build writes (the configured weights are reported then)."""
    if isinstance(value, dict) and set(value) == set(FIELD_BOOSTS) \
            and all(type(v) is int and 1 <= v <= MAX_FIELD_REPEAT for v in value.values()):
        return {f: float(value[f]) for f in FIELD_BOOSTS}
    return None


class Clause(Model):
    """One query element. ``phrase`` asks for the analysed tokens in order; otherwise any token may match.

    ``name`` labels the clause in ``hit.matched`` (the planner names gene-name expansions this way).
    """

    text: str
    view: Literal["word", "symbol"] = "word"
    phrase: bool = False
    boost: float = 1.0
    required: bool = False
    name: str | None = None
    #: the one paper field the clause searches (``title:``/``abstract:`` of the query language); None: the whole
    #: paper (or the passage). A passage search reads ``abstract`` as "in an abstract passage".
    field: Literal["title", "abstract"] | None = None


#: bounds of a filter as a request may send it (a year is four digits; lists are what one query can carry)
MAX_YEAR = 9999
MAX_FILTER_PMCIDS = 10_000
MAX_FILTER_SECTIONS = 64


class Filters(Model):
    """Restrictions of a search. Unknown keys are refused (``year_form`` is a typo, not a filter that is off)."""

    model_config = ConfigDict(extra="forbid")

    year_from: int | None = Field(None, ge=0, le=MAX_YEAR)
    year_to: int | None = Field(None, ge=0, le=MAX_YEAR)
    section_types: list[Annotated[str, StringConstraints(max_length=64)]] | None = Field(
        None, max_length=MAX_FILTER_SECTIONS, description="Papers having / passages in one of these section types")
    pmcids: list[Annotated[str, StringConstraints(max_length=256)]] | None = Field(None, max_length=MAX_FILTER_PMCIDS)
    source: Literal["paper", "supplement"] | None = Field(
        None, description="paper: the articles' text only; supplement: their supplementary files only (papers "
                          "matched in a supplement); none: both")

    @model_validator(mode="after")
    def _ordered_years(self) -> Filters:
        """An inverted range matches nothing: refused instead of answering 0 hits without a word."""
        if self.year_from is not None and self.year_to is not None and self.year_from > self.year_to:
            raise ValueError(f"year_from ({self.year_from}) is after year_to ({self.year_to})")
        return self


class FilterNode(Model):
    """A filter inside a boolean query (``-section:methods``, ``(year:2005 OR title:Shh)``): restricts, never
    scores. ``field`` is ``year`` (``year_from``/``year_to``), ``section`` or ``pmcid`` (``values``, any of)."""

    kind: Literal["filter"] = "filter"
    field: Literal["year", "section", "pmcid"]
    values: list[str] = Field(default_factory=list)
    year_from: int | None = None
    year_to: int | None = None


class ConceptNode(Model):
    """``term:GO:0007219`` of the query language: documents that mention one of ``ids`` or a descendant (the
    collection's concept index, ``flysift index concepts``), scored by ``concept_score``, like a word."""

    kind: Literal["concept"] = "concept"
    ids: list[str] = Field(default_factory=list)


#: term ids one ``term:`` leaf may name
MAX_CONCEPT_IDS = 64


def concept_score(mentions: int) -> float:
    """What ``term:`` adds to a document that mentions the concept ``mentions`` times: 1 + ln(mentions), about a
    word's BM25 score, in every engine."""
    return round(1.0 + math.log(max(1, mentions)), 4)


class BoolNode(Model):
    """A boolean group of the query language: every ``must`` and ``filter`` matches (a filter without scoring), none
    of ``must_not``; ``should`` add score and, in a group without ``must``, at least one of them matches
    (Elasticsearch's ``bool`` with ``minimum_should_match`` 1 when there is no ``must``). A leaf ``Clause`` matches
    when its analysed tokens do; one word of the query is usually a group of several clauses (its word view, an
    exact-case bonus…) in ``should``. A group with nothing but ``filter`` matches every document they keep."""

    kind: Literal["bool"] = "bool"
    must: list[QueryNode] = Field(default_factory=list)
    should: list[QueryNode] = Field(default_factory=list)
    must_not: list[QueryNode] = Field(default_factory=list)
    filter: list[QueryNode] = Field(default_factory=list)


def _node_kind(value: Any) -> str:
    kind = value.get("kind", "clause") if isinstance(value, dict) else getattr(value, "kind", "clause")
    return kind if kind in ("bool", "filter", "concept") else "clause"


QueryNode = Annotated[Annotated[Clause, Tag("clause")] | Annotated[BoolNode, Tag("bool")]
                      | Annotated[FilterNode, Tag("filter")] | Annotated[ConceptNode, Tag("concept")],
                      Discriminator(_node_kind)]
BoolNode.model_rebuild()


class EngineQuery(Model):
    """Clauses and filters (what engines compile), plus what the planner noted while reading the text: the stop
    words it ``dropped`` and the ``case`` it read the query in (engines ignore both).

    ``tree`` is set for a query that uses the query language's operators or fields (``search.retrieval.boolean``):
    engines then match and score by it (plus ``filters``), and ``clauses`` lists its positive leaves, for
    highlighting and ``matched``. Without a tree (every plain query), ``clauses`` are OR-ed as before."""

    clauses: list[Clause] = Field(default_factory=list)
    filters: Filters = Field(default_factory=Filters)
    dropped: list[str] = Field(default_factory=list)
    case: Literal["as written", "capitals", "title"] = "as written"
    tree: BoolNode | None = None

    def named(self) -> list[Clause]:
        return [c for c in self.clauses if c.name]

    def fields(self) -> set[str]:
        """The paper fields (``title``, ``abstract``) the query restricts a clause to."""
        return {c.field for c in self.clauses if c.field}

    def concepts(self) -> list[str]:
        """The term ids of the tree's ``term:`` leaves that can match (not under ``must_not``)."""
        out: list[str] = []

        def walk(node: Any) -> None:
            if isinstance(node, ConceptNode):
                out.extend(node.ids)
            elif isinstance(node, BoolNode):
                for x in (*node.must, *node.should, *node.filter):
                    walk(x)

        walk(self.tree)
        return list(dict.fromkeys(out))


# ---- highlight settings (search.text.highlight makes the fragments) ------------------------------------------------

MAX_TAG_CHARS = 64
MAX_FRAGMENT_CHARS = 2000
MAX_FRAGMENTS = 20


class HighlightSpec(Model):
    """What a search request's ``highlight`` asks for (``true`` is all defaults)."""

    model_config = ConfigDict(extra="forbid")

    pre_tag: str = Field("<em>", max_length=MAX_TAG_CHARS, description="Put before each matched word")
    post_tag: str = Field("</em>", max_length=MAX_TAG_CHARS, description="Put after each matched word")
    fragment_size: int = Field(150, ge=20, le=MAX_FRAGMENT_CHARS, description="Characters per fragment (about: "
                               "fragments start and end at word boundaries)")
    number_of_fragments: int = Field(3, ge=0, le=MAX_FRAGMENTS, description="Fragments per field, best first by "
                                     "matches, returned in text order; 0: the whole field")
    encoder: Literal["default", "html"] = Field("default", description="html: escape the text around the tags")
