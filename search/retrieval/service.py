"""The read side of the service, independent of HTTP: limits, planning, engines per collection, paper paging.

The REST API, the CLI's ``search`` and tests all go through ``SearchService`` so limits and error messages are the
same everywhere.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar

from search.core.config import Settings
from search.core.errors import InvalidRequest, LimitExceeded, PaperNotFound
from search.core.models import (
    ABSTRACT,
    SECTION_TYPES,
    Paper,
    PaperHit,
    PaperSearchResults,
    PaperText,
    PassageHit,
    PassageSearchResults,
    Section,
)
from search.core.names import DEFAULT_COLLECTION, PATTERNS, check_collection
from search.core.query import EngineQuery, Filters, HighlightSpec
from search.core.querylang import Syntax, parse
from search.core.supplements import SupplementList, SupplementRead
from search.engines import Engine, open_engine
from search.engines.dense import DenseIndex
from search.retrieval import supplements
from search.retrieval.boolean import Reading, Target, positive_text, read_query
from search.retrieval.browse import BrowseService
from search.retrieval.cursors import CursorSigner, load_secret
from search.retrieval.fusion import rrf
from search.retrieval.planner import describe, explain, gene_in_title, plan
from search.text.passages import split_passages

COLLECTION_NAME = PATTERNS["collection"]   # one home: search.core.names (use fullmatch)
VALID_SECTIONS = (ABSTRACT, *SECTION_TYPES)
Mode = Literal["bm25", "dense", "hybrid"]
#: how deep each list goes before fusion (or the page end, if deeper): RRF needs more than the page to agree on
FUSION_DEPTH = 100
H = TypeVar("H", PaperHit, PassageHit)
#: what a search may count its matches by (``facets``)
FACETS = ("year", "section")


def check_facets(names: Iterable[str]) -> list[str]:
    wanted = list(dict.fromkeys(names))
    bad = [n for n in wanted if n not in FACETS]
    if bad:
        raise InvalidRequest(f"Unknown facet(s) {[b[:40] for b in bad[:5]]}; valid facets are {list(FACETS)}.",
                             details={"field": "facets", "valid": list(FACETS)})
    return wanted


class SearchService(BrowseService):
    """Search, reading and browsing (``BrowseService``: exports, more-like-this, collections, a marked paper)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._engines: dict[str, Engine] = {}
        self._dense: dict[str, DenseIndex] = {}
        self._lock = threading.Lock()
        self._signer: CursorSigner | None = None

    def cursors(self) -> CursorSigner:
        """The cursor signer (its key is read, or made, on first use: searching never needs it)."""
        with self._lock:
            if self._signer is None:
                secret = self.settings.cursor_secret
                self._signer = CursorSigner(load_secret(secret.get_secret_value() if secret else None,
                                                        self.settings.data_dir))
            return self._signer

    def engine(self, collection: str = DEFAULT_COLLECTION) -> Engine:
        check_collection(collection)
        with self._lock:
            if collection not in self._engines:
                self._engines[collection] = open_engine(self.settings, collection=collection)
            return self._engines[collection]

    def dense(self, collection: str = DEFAULT_COLLECTION) -> DenseIndex:
        """The collection's dense index (loaded lazily; ``DenseUnavailable`` at once for an engine it cannot live
        beside, on search when it is not built)."""
        engine = self.engine(collection)  # validates the name
        with self._lock:
            if collection not in self._dense:
                self._dense[collection] = DenseIndex(engine, self.settings.data_dir)
            return self._dense[collection]

    # ---- limits -----------------------------------------------------------------------------------------------
    def check_page(self, limit: int, offset: int) -> None:
        s = self.settings
        if not 1 <= limit <= s.max_page_size:
            raise LimitExceeded(f"limit must be between 1 and {s.max_page_size} (got {limit}); page with offset.",
                                details={"field": "limit", "max": s.max_page_size})
        if not 0 <= offset <= s.max_offset:
            raise LimitExceeded(f"offset must be between 0 and {s.max_offset} (got {offset}).",
                                details={"field": "offset", "max": s.max_offset})

    def check_query(self, text: str) -> None:
        if not text or not text.strip():
            raise InvalidRequest("query is empty: give words, a gene symbol or a \"quoted phrase\".",
                                 details={"field": "query"})
        if len(text) > self.settings.max_query_chars:
            raise LimitExceeded(f"query is {len(text)} characters; the limit is {self.settings.max_query_chars}.",
                                details={"field": "query", "max": self.settings.max_query_chars})

    @staticmethod
    def check_sections(names: Iterable[str] | None) -> list[str] | None:
        if names is None:
            return None
        wanted = [n.strip().upper() for n in names if n.strip()]
        bad = [n for n in wanted if n not in VALID_SECTIONS]
        if bad:
            raise InvalidRequest(f"Unknown section name(s) {bad}; valid names are {list(VALID_SECTIONS)}.",
                                 details={"field": "sections", "valid": list(VALID_SECTIONS)})
        return wanted

    # ---- search -----------------------------------------------------------------------------------------------
    def build_query(self, text: str, filters: Filters | None, expansions: Iterable[str] = (),
                    known_symbols: frozenset[str] = frozenset(), foldable: frozenset[str] = frozenset(), *,
                    syntax: Syntax = "plain", target: Target = "papers",
                    compounds: frozenset[str] = frozenset()) -> EngineQuery:
        return self.read(text, filters, expansions, known_symbols, foldable, syntax=syntax, target=target,
                         compounds=compounds).query

    def read(self, text: str, filters: Filters | None, expansions: Iterable[str] = (),
             known_symbols: frozenset[str] = frozenset(), foldable: frozenset[str] = frozenset(), *,
             syntax: Syntax = "plain", target: Target = "papers", compounds: frozenset[str] = frozenset(),
             concepts: bool = True) -> Reading:
        """A query read for a search: plain text (``plan``: what agents get by default) or the query language
        (``search.core.querylang``; a syntax error is 422 ``query_syntax`` with its position)."""
        self.check_query(text)
        if filters and filters.section_types:
            filters.section_types = self.check_sections(filters.section_types)
        if syntax == "plain":
            return Reading(text, plan(text, filters=filters, expansions=expansions, known_symbols=known_symbols,
                                      foldable=foldable, compounds=compounds), None, text)
        parsed = parse(text)
        query, reader = read_query(text, parsed, target, filters=filters, expansions=expansions,
                                   known_symbols=known_symbols, foldable=foldable, compounds=compounds, plan=plan,
                                   concepts=concepts)
        return Reading(text, query, reader, positive_text(parsed))

    def _explained(self, reading: Reading, engine: Engine, kind: Literal["papers", "passages"],
                   known_symbols: frozenset[str], foldable: frozenset[str],
                   compounds: frozenset[str]) -> dict[str, Any]:
        trace, case = reading.reader.reading() if reading.reader is not None else (None, None)
        out = explain(reading.text, reading.query, known_symbols, engine.bm25_parameters(kind), foldable,
                      compounds, trace, case)
        if reading.reader is not None:
            out["syntax"] = "query"
        return out

    def search_papers(self, text: str, *, limit: int = 10, offset: int = 0, filters: Filters | None = None,
                      snippets: bool = False, collection: str = DEFAULT_COLLECTION, expansions: Iterable[str] = (),
                      known_symbols: frozenset[str] = frozenset(), mode: Mode = "bm25",
                      explain_plan: bool = False, foldable: frozenset[str] = frozenset(), syntax: Syntax = "plain",
                      highlight: HighlightSpec | None = None, facets: Iterable[str] = (),
                      compounds: frozenset[str] = frozenset(), concepts: bool = True) -> PaperSearchResults:
        """Papers by BM25, by their nearest passage (dense: cosine of the best passage) or by RRF of both (hybrid).
        Dense ignores gene expansions: they act through the BM25 half of hybrid, and embeds the words a query
        searches for (not those it excludes). ``facets`` count all matching papers (BM25's match)."""
        self.check_page(limit, offset)
        wanted = check_facets(facets)
        reading = self.read(text, filters, expansions, known_symbols, foldable, syntax=syntax, target="papers",
                            compounds=compounds, concepts=concepts)
        query = reading.query
        engine = self.engine(collection)
        if mode == "bm25":
            res = engine.search_papers(query, limit=limit, offset=offset, snippets=snippets, highlight=highlight)
        else:
            t0 = time.perf_counter()
            depth = max(FUSION_DEPTH, offset + limit)
            dense = self.dense(collection).search_papers(reading.dense_text, depth, query.filters)
            hits, total = _fused_page(
                mode, dense, lambda: engine.search_papers(query, limit=depth, offset=0, snippets=snippets,
                                                          highlight=highlight).hits,
                key=lambda h: h.pmcid, fetch=lambda ids: _papers_by_id(engine, ids), offset=offset, limit=limit)
            res = PaperSearchResults(total=total, offset=offset, limit=limit, hits=hits,
                                     took_ms=(time.perf_counter() - t0) * 1000)
        for hit in res.hits:
            hit.gene_in_title = gene_in_title(text, hit.title)
        res.query = describe(query) | {"mode": mode}
        if wanted:
            res.facets = engine.facets("papers", query, wanted)
        if explain_plan:
            res.query["explain"] = self._explained(reading, engine, "papers", known_symbols, foldable, compounds)
        return res

    def search_passages(self, text: str, *, limit: int = 10, offset: int = 0, filters: Filters | None = None,
                        snippets: bool = True, collection: str = DEFAULT_COLLECTION, expansions: Iterable[str] = (),
                        known_symbols: frozenset[str] = frozenset(), mode: Mode = "bm25",
                        explain_plan: bool = False, foldable: frozenset[str] = frozenset(), syntax: Syntax = "plain",
                        highlight: HighlightSpec | None = None, facets: Iterable[str] = (),
                        compounds: frozenset[str] = frozenset(), titles: bool = False,
                        concepts: bool = True) -> PassageSearchResults:
        """Passages by BM25, by embedding cosine (dense) or by RRF of both (hybrid); dense-only hits carry no
        snippet and match no named clause. ``titles``: each hit carries its paper's title."""
        self.check_page(limit, offset)
        wanted = check_facets(facets)
        reading = self.read(text, filters, expansions, known_symbols, foldable, syntax=syntax, target="passages",
                            compounds=compounds, concepts=concepts)
        query = reading.query
        engine = self.engine(collection)
        if mode == "bm25":
            res = engine.search_passages(query, limit=limit, offset=offset, snippets=snippets, highlight=highlight)
        else:
            t0 = time.perf_counter()
            depth = max(FUSION_DEPTH, offset + limit)
            dense = self.dense(collection).search(reading.dense_text, depth, query.filters)
            pmcid_of = {pid: pmcid for pid, pmcid, _ in dense}
            hits, total = _fused_page(
                mode, [(pid, score) for pid, _, score in dense],
                lambda: engine.search_passages(query, limit=depth, offset=0, snippets=snippets,
                                               highlight=highlight).hits,
                key=lambda h: h.passage_id, fetch=lambda ids: _passages_by_id(engine, {pmcid_of[i] for i in ids}),
                offset=offset, limit=limit)
            res = PassageSearchResults(total=total, offset=offset, limit=limit, hits=hits,
                                       took_ms=(time.perf_counter() - t0) * 1000)
        if titles:
            heads = engine.paper_heads(h.pmcid for h in res.hits)
            for h in res.hits:
                h.title = heads[h.pmcid].title if h.pmcid in heads else None
        res.query = describe(query) | {"mode": mode}
        if wanted:
            res.facets = engine.facets("passages", query, wanted)
        if explain_plan:
            res.query["explain"] = self._explained(reading, engine, "passages", known_symbols, foldable, compounds)
        return res

    # ---- supplementary files ------------------------------------------------------------------------------------
    def supplements(self, pmcid: str, collection: str = DEFAULT_COLLECTION) -> SupplementList:
        """The registry of a paper's supplementary files (``search.retrieval.supplements``)."""
        paper = self.get_paper(pmcid, collection)
        return SupplementList(pmcid=paper.pmcid, files=paper.supplements)

    def read_supplement(self, pmcid: str, file: str, *, part: str | None = None, start: int | None = None,
                        limit: int | None = None, max_chars: int | None = None,
                        collection: str = DEFAULT_COLLECTION) -> SupplementRead:
        """A page of one part (sheet, table, text, pages) of a paper's supplementary file."""
        paper = self.get_paper(pmcid, collection)
        entry = supplements.find_file(paper, file)
        return supplements.read_part(self.engine(collection), paper, entry, supplements.find_part(entry, part),
                                     start=start, limit=limit, max_chars=max_chars)

    # ---- reading ----------------------------------------------------------------------------------------------
    def get_paper(self, pmcid: str, collection: str = DEFAULT_COLLECTION) -> Paper:
        paper = self.engine(collection).get_paper(pmcid)
        if paper is None:
            raise PaperNotFound(f"Paper {pmcid} not found in corpus.", details={"pmcid": pmcid})
        return paper

    def paper_text(self, pmcid: str, *, sections: list[str] | None = None, max_chars: int | None = None,
                   cursor: str | None = None, collection: str = DEFAULT_COLLECTION, reader: str = "") -> PaperText:
        """A page of a paper's text: at most ``max_chars`` characters of paragraphs, then a cursor to continue.

        Paragraphs are never reordered; one longer than the page is cut and continued on the next page. Cursors are
        signed for ``reader`` (the session id, or "" outside sessions), the collection, the paper and the sections.
        """
        wanted = self.check_sections(sections)
        max_chars = max_chars or self.settings.default_paper_max_chars
        if max_chars < 200:
            raise LimitExceeded("max_chars must be at least 200.", details={"field": "max_chars", "min": 200})
        paper = self.get_paper(pmcid, collection)
        # units: (section index in output order, section, paragraph index, paragraph)
        parts: list[tuple[int, Section | None, str]] = []
        want_abstract = wanted is None or ABSTRACT in wanted
        if want_abstract and paper.abstract:
            parts += [(0, None, paper.abstract)]
        for si, sec in enumerate(paper.sections, start=1):
            if wanted is None or sec.type in wanted:
                parts += [(si, sec, p) for p in sec.paragraphs]
        total = sum(len(t) for _, _, t in parts)
        signer = self.cursors()
        start_part, start_char = (0, 0) if cursor is None else signer.decode(
            cursor, len(parts), reader=reader, collection=collection, pmcid=paper.pmcid, sections=wanted)
        out_sections: list[Section] = []
        abstract: str | None = None if not want_abstract else ""
        used, i, ch = 0, start_part, start_char
        last_si = None
        while i < len(parts) and used < max_chars:
            si, part_section, text = parts[i]
            piece = text[ch:ch + (max_chars - used)]
            if part_section is None:  # the abstract (part 0)
                abstract = (abstract or "") + piece
            else:
                if si != last_si:
                    out_sections.append(Section(type=part_section.type, title=part_section.title, paragraphs=[]))
                    last_si = si
                out_sections[-1].paragraphs.append(piece)
            used += len(piece)
            if ch + len(piece) < len(text):
                ch += len(piece)
            else:
                i, ch = i + 1, 0
        next_cursor = signer.encode(i, ch, reader=reader, collection=collection, pmcid=paper.pmcid,
                                    sections=wanted) if i < len(parts) else None
        return PaperText(pmcid=paper.pmcid, pmid=paper.pmid, doi=paper.doi, year=paper.year, journal=paper.journal,
                         title=paper.title, abstract=abstract if want_abstract else None, sections=out_sections,
                         next_cursor=next_cursor, total_chars=total)


def _fused_page(mode: Mode, dense: list[tuple[str, float]], lexical: Callable[[], list[H]], *,
                key: Callable[[H], str], fetch: Callable[[list[str]], dict[str, H]], offset: int,
                limit: int) -> tuple[list[H], int]:
    """One page of a dense or hybrid search, and the length of the whole ranking: the dense list alone, or the RRF
    of the lexical list (``lexical()``, asked for only in hybrid mode) and the dense one. Each hit keeps its fused
    score; one the lexical list did not return is fetched by id (a key ``fetch`` cannot find is left out: the build
    changed under the dense index mid-request)."""
    lexical_hits: dict[str, H] = {}
    ranked = dense
    if mode == "hybrid":
        hits = lexical()
        lexical_hits = {key(h): h for h in hits}
        ranked = rrf([[key(h) for h in hits], [k for k, _ in dense]])
    page = ranked[offset:offset + limit]
    fetched = fetch([k for k, _ in page if k not in lexical_hits])
    out = []
    for k, score in page:
        hit = lexical_hits.get(k) or fetched.get(k)
        if hit is not None:
            out.append(hit.model_copy(update={"score": score}))
    return out, len(ranked)


def _papers_by_id(engine: Engine, pmcids: Iterable[str]) -> dict[str, PaperHit]:
    """Paper hits for dense-only results, from the stored papers."""
    return {pmcid: hit for pmcid in pmcids if (hit := _paper_hit(engine.get_paper(pmcid))) is not None}


def _paper_hit(paper: Paper | None) -> PaperHit | None:
    if paper is None:
        return None
    return PaperHit(pmcid=paper.pmcid, title=paper.title, abstract=paper.abstract[:500], year=paper.year,
                    journal=paper.journal, score=0.0)


def _passages_by_id(engine: Engine, pmcids: Iterable[str]) -> dict[str, PassageHit]:
    """Passage hits for dense-only results: the passages are re-derived from their papers (ids are stable)."""
    out: dict[str, PassageHit] = {}
    for pmcid in pmcids:
        paper = engine.get_paper(pmcid)
        for p in split_passages(paper) if paper else []:
            out[p.id] = PassageHit(passage_id=p.id, pmcid=p.pmcid, section_type=p.section_type,
                                   section_index=p.section_index, paragraph_index=p.paragraph_index, start=p.start,
                                   end=p.end, text=p.text, score=0.0, year=p.year)
    return out
