"""The engine-neutral query: what the planner produces and every engine compiles (tantivy queries, query DSL).

A query is a list of clauses OR-ed together (BM25 sums their scores), some of which may be required, plus filters.
Each clause names the text view it targets; the engine analyses ``text`` with that view's analyzer
(``search.text.analysis``) and searches title, abstract and body with the collection's field weights (``Bm25Params``;
default ``FIELD_BOOSTS``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from search.core.base import Model

#: Default field weights for paper search (a collection may set its own: ``Settings.bm25``); query-time boosts in both
#: engines. Passages have a single text field, weight 1.
FIELD_BOOSTS: dict[str, float] = {"title": 3.0, "abstract": 2.0, "body": 1.0}
PASSAGE_WEIGHTS: dict[str, float] = {"text": 1.0}
#: BM25's term-frequency saturation and length normalisation: tantivy's fixed constants (the embedded engine cannot
#: change them) and the cluster engine's default index similarity (``search.engines.cluster.mappings.similarity``).
BM25_K1 = 1.2
BM25_B = 0.75


class Bm25Params(Model):
    """The BM25 parameters of one collection: ``k1`` and ``b`` (index-time in the cluster engine, fixed in tantivy)
    and the paper fields' query-time weights (every field of ``FIELD_BOOSTS``, in its order)."""

    model_config = ConfigDict(frozen=True)

    k1: float = BM25_K1
    b: float = BM25_B
    field_weights: dict[str, float] = Field(default_factory=lambda: dict(FIELD_BOOSTS))

    def report(self, kind: Literal["papers", "passages"] = "papers") -> dict[str, Any]:
        """As ``explain`` and ``/v1/stats`` report them: passages have their one text field."""
        return bm25_parameters(kind, self.k1, self.b, self.field_weights)


def bm25_parameters(kind: Literal["papers", "passages"] = "papers", k1: float = BM25_K1, b: float = BM25_B,
                    field_weights: dict[str, float] | None = None) -> dict[str, Any]:
    """The BM25 parameters a search ran under, as ``explain`` reports them."""
    fields = dict(field_weights or FIELD_BOOSTS) if kind == "papers" else dict(PASSAGE_WEIGHTS)
    return {"k1": k1, "b": b, "field_weights": fields}


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

    @model_validator(mode="after")
    def _ordered_years(self) -> Filters:
        """An inverted range matches nothing: refused instead of answering 0 hits without a word."""
        if self.year_from is not None and self.year_to is not None and self.year_from > self.year_to:
            raise ValueError(f"year_from ({self.year_from}) is after year_to ({self.year_to})")
        return self


class EngineQuery(Model):
    """Clauses and filters (what engines compile), plus what the planner noted while reading the text: the stop
    words it ``dropped`` and the ``case`` it read the query in (engines ignore both)."""

    clauses: list[Clause] = Field(default_factory=list)
    filters: Filters = Field(default_factory=Filters)
    dropped: list[str] = Field(default_factory=list)
    case: Literal["as written", "capitals", "title"] = "as written"

    def named(self) -> list[Clause]:
        return [c for c in self.clauses if c.name]
