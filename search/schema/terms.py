"""Ontology terms on the wire: term search and resolver answers, lookups, hierarchy lists and the label export (the
term itself and a search hit are ``search.core.models.Term`` and ``TermHit``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from search.core.models import Synonym, Term, TermHit
from search.core.names import ONTOLOGY_PATTERN


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
    mode: str = Field("bm25", description="bm25 (the lexical ranking), dense or hybrid (the lexical ranking fused "
                                          "with the term encoder, or RRF with the dense term index)")
    activity_shaped: bool | None = Field(None, description="GO only: whether the query names a molecular function "
                                                           "(docs/ontologies.md, the MF rule)")
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


# ---- term recognition (POST /v1/terms/recognise) -------------------------------------------------------------------

#: bounds of one recognition request: texts, characters per text and in all (the body limit is larger)
MAX_RECOGNISE_TEXTS = 2000
MAX_RECOGNISE_TEXT_CHARS = 200_000
MAX_RECOGNISE_CHARS = 2_000_000
MAX_RECOGNISE_ONTOLOGIES = 8


class RecogniseRequest(BaseModel):
    """Texts of one document (its paragraphs: abbreviations one of them defines count in all) and which terms to
    recognise in them."""

    model_config = ConfigDict(extra="forbid")

    texts: list[Annotated[str, StringConstraints(max_length=MAX_RECOGNISE_TEXT_CHARS)]] = Field(
        max_length=MAX_RECOGNISE_TEXTS, description=f"The document's texts (at most {MAX_RECOGNISE_TEXTS}, "
                                                    f"{MAX_RECOGNISE_CHARS:,} characters in all)")
    ontologies: list[Annotated[str, StringConstraints(pattern=f"^(?:{ONTOLOGY_PATTERN})$")]] | None = Field(
        None, max_length=MAX_RECOGNISE_ONTOLOGIES, description="Ontologies to recognise, in the order that decides "
        "between same-named terms (default: every indexed one)")
    task: Literal["go", "expression"] | None = Field(
        None, description="Instead of ontologies, the order a curation task needs: go (GO, FBbt, FBdv) or "
                          "expression (FBbt, FBdv, GO): a label a GO and an FBbt term share is the GO term for the GO "
                          "task and the FBbt term for expression; mentions of every indexed ontology are reported")
    molecular_function: Literal["activity", "all"] = Field(
        "activity", description="activity: a GO molecular function only where its sentence states an activity "
                                "(\"has kinase activity\", \"binds DNA\", \"DNA binding\"); all: every match")


class RecognisedMention(BaseModel):
    term_id: str
    ontology: str
    name: str
    aspect: str | None = None
    depth: int = 0
    start: int = Field(description="Offset of the mention in its text")
    end: int
    text: str = Field(description="The text matched")
    via: Literal["name", "synonym", "abbreviation"] = Field(
        description="What matched: the term's name, one of its synonyms, or an abbreviation the document defines")
    inflected: bool = Field(False, description="A word matched through its word form (nuclear → nucleus)")
    sentence_start: int = Field(description="Where the mention's sentence starts in its text")
    sentence_end: int


@dataclass(frozen=True)
class TermInfo:
    """A recognised term as each of its mentions carries it: the recogniser (``search.ontology.recognise``) makes one
    per term it knows, the lexical curator rebuilds it from a :class:`RecognisedMention` (:meth:`of`)."""

    id: str
    ontology: str
    name: str
    aspect: str | None
    depth: int

    @classmethod
    def of(cls, m: RecognisedMention) -> TermInfo:
        return cls(m.term_id, m.ontology, m.name, m.aspect, m.depth)


class RecogniseResponse(BaseModel):
    ontologies: list[str] = Field(description="The ontologies recognised, in their order")
    mentions: list[list[RecognisedMention]] = Field(description="Per text, its mentions in text order")
