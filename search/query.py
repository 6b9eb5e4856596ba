"""The engine-neutral query: what the planner produces and every engine compiles (tantivy queries, query DSL).

A query is a list of clauses OR-ed together (BM25 sums their scores), some of which may be required, plus filters.
Each clause names the text view it targets; the engine analyses ``text`` with that view's analyzer
(``search.analysis``) and searches title, abstract and body with ``FIELD_BOOSTS``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

#: Field weights for paper search; passages have a single text field.
FIELD_BOOSTS: dict[str, float] = {"title": 3.0, "abstract": 2.0, "body": 1.0}


class Clause(BaseModel):
    """One query element. ``phrase`` asks for the analysed tokens in order; otherwise any token may match.

    ``name`` labels the clause in ``hit.matched`` (the planner names gene-name expansions this way).
    """

    text: str
    view: Literal["word", "symbol"] = "word"
    phrase: bool = False
    boost: float = 1.0
    required: bool = False
    name: str | None = None


class Filters(BaseModel):
    year_from: int | None = None
    year_to: int | None = None
    section_types: list[str] | None = Field(None, description="Papers having / passages in one of these section types")
    pmcids: list[str] | None = None


class EngineQuery(BaseModel):
    clauses: list[Clause] = Field(default_factory=list)
    filters: Filters = Field(default_factory=Filters)

    def named(self) -> list[Clause]:
        return [c for c in self.clauses if c.name]
