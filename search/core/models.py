"""The domain model: one place for the shapes every package exchanges.

Papers are stored and served in this shape whatever the source format was; passages are the unit of
evidence an agent quotes, so their ids and character offsets must be stable across rebuilds.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from search.core.base import Model
from search.core.supplements import Source, SupplementChunk, SupplementFile, SupplementPlace

#: Section types, as in PMC's BioC output (the names FlyAOC's tools use). ``OTHER`` holds what maps to none.
SECTION_TYPES: tuple[str, ...] = (
    "INTRO", "METHODS", "RESULTS", "DISCUSS", "CONCL", "CASE", "FIG", "TABLE", "SUPPL",
    "APPENDIX", "ACK_FUND", "AUTH_CONT", "COMP_INT", "ABBR", "KEYWORD", "REF", "REVIEW_INFO", "OTHER",
)

#: Pseudo-section name under which the abstract can be requested; passages of the abstract use section index 0.
ABSTRACT = "ABSTRACT"


class Section(Model):
    """One section of a paper's body, in document order."""

    type: str = Field(description="Section type, one of SECTION_TYPES")
    title: str | None = None
    paragraphs: list[str] = Field(default_factory=list)


class Paper(Model):
    """A full-text paper. ``pmcid`` is the key: a PMCID, else ``PMID:<n>``, else ``DOI:<doi>`` when the source
    carries no PMCID (the indexer warns about each such paper)."""

    pmcid: str
    pmid: str | None = None
    doi: str | None = None
    year: int | None = None
    journal: str | None = None
    title: str = ""
    abstract: str = ""
    sections: list[Section] = Field(default_factory=list)
    #: the registry of its supplementary files (``search.core.supplements``), filled by the JATS reader; their
    #: text is in the paper's supplement passages, never in its sections
    supplements: list[SupplementFile] = Field(default_factory=list)

    def section_types(self) -> list[str]:
        """Distinct section types in document order."""
        return list(dict.fromkeys(s.type for s in self.sections))

    def body_text(self) -> str:
        """All body paragraphs joined by blank lines (what body search indexes)."""
        return "\n\n".join(p for s in self.sections for p in s.paragraphs)

    def word_count(self) -> int:
        return len(self.title.split()) + len(self.abstract.split()) + sum(
            len(p.split()) for s in self.sections for p in s.paragraphs
        )


class Passage(Model):
    """A paragraph (or a ~300-word piece of a long one).

    ``id`` is ``PMCID:section_index:paragraph_index`` with ``.k`` appended for the k-th piece (k ≥ 1) of a split
    paragraph. Section index 0 is the abstract; body sections are numbered from 1 in document order. ``start`` and
    ``end`` are character offsets of ``text`` inside that paragraph.
    """

    id: str
    pmcid: str
    section_index: int
    paragraph_index: int
    section_type: str
    start: int
    end: int
    text: str
    year: int | None = None
    #: passages of supplementary files (``search.core.supplements``): section ``SUPPL``, section index -1,
    #: paragraph index the chunk's, offsets into the chunk's own text; ``supplement`` says file, sheet and rows
    source: Source = "paper"
    supplement: SupplementChunk | None = None


class Snippet(Model):
    """A highlighted fragment: ``text`` is plain, ``highlights`` are [start, end) character ranges in it."""

    field: str
    text: str
    highlights: list[tuple[int, int]] = Field(default_factory=list)


class ConceptMention(Model):
    """Where a ``term:`` query's concept is mentioned: the term recognised (``term_id``, a descendant of or equal
    to the queried ``matched``), its passage and [start, end) in the passage's text, the words and what matched
    (``name``, ``synonym``, ``abbreviation``)."""

    term_id: str
    matched: str
    passage_id: str
    start: int
    end: int
    text: str
    via: str = "name"


class PaperHit(Model):
    pmcid: str
    title: str
    abstract: str = Field(description="First 500 characters of the abstract")
    year: int | None = None
    journal: str | None = None
    score: float
    gene_in_title: bool = False
    snippets: list[Snippet] = Field(default_factory=list)
    matched: list[str] = Field(default_factory=list,
                               description="Names of the query clauses (e.g. gene names) this hit matched")
    supplement: SupplementPlace | None = Field(None, description="Where in a supplementary file the best passage "
                                                                 "is, when it is a supplement's (with snippets)")
    pmid: str | None = None
    doi: str | None = None
    highlight: dict[str, list[str]] | None = Field(
        None, description="With a request's highlight: fragments with the matched words tagged, per field (title, "
                          "abstract, passage: the paper's best passage, named by best_passage)")
    best_passage: str | None = Field(None, description="Id of the passage highlight.passage comes from")
    mentions: list[ConceptMention] | None = Field(None, description="With term: in the query: the paper's first "
                                                  "mentions of the concept (or a descendant)")


class PassageHit(Model):
    passage_id: str
    pmcid: str
    section_type: str
    section_index: int
    paragraph_index: int
    start: int
    end: int
    text: str
    score: float
    year: int | None = None
    snippet: Snippet | None = None
    matched: list[str] = Field(default_factory=list)
    source: Source = Field("paper", description="paper: the article's text; supplement: a supplementary file")
    supplement: SupplementPlace | None = Field(None, description="A supplement passage's file, sheet, rows or pages")
    highlight: dict[str, list[str]] | None = Field(
        None, description="With a request's highlight: fragments of text with the matched words tagged")
    title: str | None = Field(None, description="The paper's title (exports and the CLI ask for it)")
    mentions: list[ConceptMention] | None = Field(None, description="With term: in the query: the passage's "
                                                  "mentions of the concept (or a descendant)")


class SearchResults(Model):
    """A page of hits. ``total`` counts all matching documents (not just this page)."""

    total: int
    offset: int
    limit: int
    hits: list[Any]
    took_ms: float = 0.0
    query: dict[str, Any] = Field(default_factory=dict, description="How the planner read the query")
    facets: dict[str, dict[str, int]] | None = Field(
        None, description="With a request's facets: how many of all matching documents have each year / section "
                          "(papers: a body section of that type; passages: their section)")


class PaperSearchResults(SearchResults):
    hits: list[PaperHit]


class PassageSearchResults(SearchResults):
    hits: list[PassageHit]


class PaperText(Model):
    """A paper (or one page of it) as served to readers; ``next_cursor`` is set when more text follows."""

    pmcid: str
    pmid: str | None = None
    doi: str | None = None
    year: int | None = None
    journal: str | None = None
    title: str
    abstract: str | None
    sections: list[Section]
    next_cursor: str | None = None
    total_chars: int = 0


class IndexStats(Model):
    engine: str
    papers: int
    passages: int
    index_bytes: int
    build: str | None = None
    terms: dict[str, int] = Field(default_factory=dict)
    bm25: dict[str, Any] | None = Field(None, description="BM25 parameters paper searches run under: k1, b and "
                                        "field_weights of the published index; next_build: the configured values "
                                        "that differ, applied by the collection's next build")


class CollectionInfo(Model):
    """A collection with a published build, as ``GET /v1/collections`` lists it."""

    name: str
    engine: str
    papers: int
    passages: int
    build: str | None = None
    index_bytes: int = 0
    ontologies: dict[str, int] = Field(default_factory=dict, description="Term indexes beside it: ontology → terms")
    concepts: dict[str, Any] | None = Field(None, description="Its concept index (flysift index concepts): "
                                            "ontologies, papers, mentions, terms, bytes; null without one")


class IndexSummary(Model):
    """What an indexing run did; printed by the CLI and returned by the API."""

    read: int = 0
    indexed: int = 0
    rejected: int = 0
    duplicates: int = 0
    passages: int = 0
    seconds: float = 0.0
    build: str | None = None
    rejects_file: str | None = None
    resumed_from: int = 0


class Reject(Model):
    """One input record that was not indexed, and why (a line of the rejects report)."""

    source: str
    record: int | None = Field(None, description="1-based line or record number within the source")
    pmcid: str | None = None
    field: str | None = None
    reason: str


ViewName = Literal["word", "symbol"]


class Synonym(Model):
    text: str
    scope: Literal["EXACT", "NARROW", "BROAD", "RELATED"] = "RELATED"


class Term(Model):
    """An ontology term, normalised from OBO. ``parents`` maps a relation (``is_a``, ``part_of``, ``regulates``…)
    to parent ids; ``aspect`` is GO's P/F/C (None elsewhere)."""

    id: str
    ontology: str
    name: str = ""
    namespace: str | None = None
    aspect: Literal["P", "F", "C"] | None = None
    definition: str = ""
    synonyms: list[Synonym] = Field(default_factory=list)
    alt_ids: list[str] = Field(default_factory=list)
    obsolete: bool = False
    replaced_by: list[str] = Field(default_factory=list)
    consider: list[str] = Field(default_factory=list)
    parents: dict[str, list[str]] = Field(default_factory=dict)
    depth: int = 0


class TermHit(Model):
    id: str
    ontology: str
    name: str
    namespace: str | None = None
    aspect: str | None = None
    matched_synonym: str | None = Field(None, description="The synonym that matched, when the name did not")
    definition: str = Field("", description="Definition, cut to 300 characters")
    score: float
    obsolete: bool = False


class Gene(Model):
    """A gene of the lexicon: FlyBase id, current symbol and full name, and the historical names."""

    id: str
    symbol: str
    fullname: str | None = None
    symbol_synonyms: list[str] = Field(default_factory=list)
    fullname_synonyms: list[str] = Field(default_factory=list)
    summary: str | None = None
