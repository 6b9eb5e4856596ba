"""The embedded engine's per-paper work that needs no writer (``Engine.preparer``; run by the indexer in worker
processes): each text analysed once into its word- and symbol-view tokens, the paper store's row and blocks, the
stored passage docs, and (layout 6) the paper's supplement passages: their tokens for the paper's ``supp`` fields and
the passage index, their rows for the paper store's ``supp_chunks`` table (``supplement_store``).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from pydantic import BaseModel

from search.core.models import Paper, Passage
from search.engines.embedded import paper_store, supplement_store
from search.engines.embedded.paper_store import StoredPaper
from search.engines.embedded.supplement_store import StoredChunk
from search.text.passages import abstract_paragraphs
from search.text.tokens import symbol_text, word_text


class PreparedPassage(NamedTuple):
    id: str
    section_type: str
    year: int | None
    word: str        # word-view tokens, space-joined
    symbol: str      # symbol-view tokens, space-joined
    doc: bytes       # the stored doc: the passage's JSON without its text (which is sliced from the paper store)
    source: str = "paper"


class Prepared(NamedTuple):
    """One paper ready for the writers: plain strings and bytes, small to pickle from a worker process."""

    pmcid: str
    year: int | None
    section_types: tuple[str, ...]
    head: bytes                 # PaperHead JSON
    stored: StoredPaper         # the paper store's row and blocks
    title: tuple[str, str]      # word and symbol tokens of the title
    abstract_passages: int      # the first passages are the abstract's (section 0), the rest the body's
    passages: tuple[PreparedPassage, ...]   # the article's, then its supplements'
    chunks: tuple[StoredChunk, ...] = ()    # the supplement passages' rows for the paper store


class PaperHead(BaseModel):
    """What a paper hit shows, stored in the paper index: the whole abstract from layout 7 (hits show 500
    characters; highlighting reads all of it) with the pmid and doi (exports), its first 500 characters before."""

    title: str
    abstract: str
    year: int | None = None
    journal: str | None = None
    pmid: str | None = None
    doi: str | None = None


def _prepare(paper: Paper, passages: list[Passage]) -> Prepared:
    """All per-paper work that needs no writer. ``passages`` are ``split_passages(paper)``'s (any ``max_words``),
    then the paper's supplement passages (``source == "supplement"``), each with its ``supplement`` chunk."""
    sections = [abstract_paragraphs(paper.abstract)] + [s.paragraphs for s in paper.sections]
    out = []
    chunks: list[StoredChunk] = []
    place = (-1, -1, -1)
    for p in passages:
        if p.source == "supplement":
            if p.pmcid != paper.pmcid or p.supplement is None:
                raise ValueError(f"supplement passage {p.id[:200]!r} is not one of paper {paper.pmcid[:200]!r}'s")
            chunks.append(supplement_store.encode(p.supplement, p.text))
            place_only = p.supplement.model_dump(exclude={"numbers", "items"}, exclude_none=True)
            doc: dict[str, Any] = p.model_copy(update={"supplement": None}).model_dump(exclude={"text"},
                                                                                       exclude_none=True)
            doc["supplement"] = place_only
            out.append(PreparedPassage(p.id, p.section_type, p.year, word_text(p.text), symbol_text(p.text),
                                       json.dumps(doc, ensure_ascii=False).encode(), "supplement"))
            continue
        if p.pmcid != paper.pmcid or (p.section_index, p.paragraph_index, p.start) <= place \
                or not 0 <= p.section_index < len(sections) \
                or not 0 <= p.paragraph_index < len(sections[p.section_index]) \
                or sections[p.section_index][p.paragraph_index][p.start:p.end] != p.text:
            raise ValueError(f"passage {p.id[:200]!r} is not the next piece of paper {paper.pmcid[:200]!r}: "
                             "passages must be split_passages(paper)'s, in order")
        place = (p.section_index, p.paragraph_index, p.start)
        out.append(PreparedPassage(p.id, p.section_type, p.year, word_text(p.text), symbol_text(p.text),
                                   p.model_dump_json(exclude={"text", "source"}, exclude_none=True).encode()))
    head = PaperHead(title=paper.title, abstract=paper.abstract, year=paper.year, journal=paper.journal,
                     pmid=paper.pmid, doi=paper.doi)
    return Prepared(paper.pmcid, paper.year, tuple(paper.section_types()),
                    head.model_dump_json(exclude_none=True).encode(),
                    paper_store.encode(paper),
                    (word_text(paper.title), symbol_text(paper.title)),
                    sum(1 for p in passages if p.section_index == 0), tuple(out), tuple(chunks))
