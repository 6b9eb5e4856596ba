"""Ontology terms on the wire: term search and resolver answers, lookups, hierarchy lists and the label export (the
term itself and a search hit are ``search.core.models.Term`` and ``TermHit``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from search.core.models import Synonym, Term, TermHit


class TermRef(BaseModel):
    id: str
    name: str
    obsolete: bool = False


class TermLookup(BaseModel):
    """A term looked up by id. ``note`` explains an alt id (resolved to its primary) or an obsolete term."""

    requested_id: str
    id: str
    note: str | None = None
    term: Term
    replacements: list[TermRef] = Field(default_factory=list,
                                        description="replaced_by then consider, for obsolete terms")
    children_count: int = Field(0, description="Visible direct is_a children")


class TermList(BaseModel):
    """Ancestors, descendants or children of a term over some relations (hidden terms left out)."""

    id: str
    relations: list[str]
    total: int
    truncated: bool = False
    terms: list[TermRef]


class TermSearchResponse(BaseModel):
    ontology: str
    query: str
    aspect: str | None = None
    hidden: int = Field(0, description="How many ids were hidden from this search")
    mode: str = Field("bm25", description="bm25 (the lexical ranking), dense or hybrid (RRF of both)")
    hits: list[TermHit]


class ResolvedTerm(BaseModel):
    """A candidate term for a free-text description, with the label (name or synonym) that matched best."""

    id: str
    name: str
    aspect: str | None = None
    matched: str
    score: float


class TermResolveResponse(BaseModel):
    """The resolver's answer: an object like every other answer (its list is ``results``)."""

    ontology: str
    text: str
    aspect: str | None = None
    hidden: int = Field(0, description="How many ids were hidden from this resolution")
    results: list[ResolvedTerm]


class TermLabels(BaseModel):
    """One live term's labels for the bulk export (``GET /v1/terms/{ontology}/labels``): name, every synonym with its
    scope, and what ranks or filters it (aspect, depth, direct parents by relation)."""

    id: str
    name: str
    aspect: Literal["P", "F", "C"] | None = None
    depth: int = Field(0, description="Longest is_a path to a root")
    synonyms: list[Synonym] = Field(default_factory=list)
    parents: dict[str, list[str]] = Field(default_factory=dict)


class TermLabelPage(BaseModel):
    ontology: str
    version: str = Field(description="Digest of the served labels (and hidden ids); also the ETag. A cursor is "
                                     "only valid for the version it was issued with")
    total: int = Field(description="Live terms visible to the caller")
    offset: int
    terms: list[TermLabels]
    next_cursor: str | None = Field(None, description="Pass unchanged for the next page; null on the last page")
