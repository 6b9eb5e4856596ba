"""The embedded engine: tantivy indices in a data directory, no server.

Layout of ``<data_dir>/collections/<collection>/`` (``LAYOUT`` 7; the schemas are ``layout``, writing ``build``)::

    CURRENT                    {"build": "<id>"}: the published build; replaced atomically (write + rename)
    builds/<id>/papers/        paper-level tantivy index: one field per view (``text_w``/``text_s``) holding title,
                               abstract and body as separate values, each repeated by its field weight
                               (``Bm25Params.repeats``, kept in ``build.json``); the supplement passages' text
                               (``supp_w``/``supp_s``, one value each); title and abstract once each
                               (``title_*``, ``abstract_*``: scored only when a query names them, ``title:``)
    builds/<id>/passages/      passage-level tantivy index; stored docs hold a passage's place (ids, offsets);
                               supplement passages are marked in ``source``
    builds/<id>/papers.db      the paper store (``search.engines.embedded.paper_store``): full papers for fetch, body
                               paragraphs in compressed blocks of a few KB that passage texts are sliced from, and
                               the supplementary files' chunks (``supplement_store``)
    builds/<id>/build.json     fingerprint, layout, status (building|published), resume state
    write.lock                 held by the one process writing a build (tantivy allows one writer)

A build is written beside the published one and only becomes visible when ``publish`` swaps ``CURRENT``, so a
failed or killed indexing run leaves the previous index serving. ``publish`` refuses an empty or much smaller build
(``search.engines.publish_refusal``). A failed build is removed; a killed one is resumed by the next run of the same
input or removed by the next run of any other, so neither holds the disk for long. Readers stat ``CURRENT`` on each
request and reopen when it changed: the service picks up new builds without a restart. Ontology terms live in
``<data_dir>/terms`` (see ``search.engines.embedded.terms``).

Each text is analysed once: ``_prepare`` (run by the indexer in worker processes) turns every passage into its word-
and symbol-view tokens (``search.text.tokens``), indexed with the whitespace tokenizer (``PRE_ANALYZED``); a paper's
fields are its passages' token strings joined, so positions, lengths and BM25 scores are those of analysing the
paper's text itself. The symbol view has no positions (a symbol-view clause is one token). Queries are analysed by
``search.text.analysis``.

Builds of layouts 5 and 6 are current (a new index of the sources adds supplement fields and the title and abstract
fields; ``title:``/``abstract:`` queries on them answer 409 ``rebuild_needed``). Builds of the older layouts 1-4
(CHANGELOG.md) are still served, per field with query-time boosts (``Bm25Params.per_field``), and deprecated:
``flysift upgrade`` rewrites them in the current layout. Facets, exports, heads and document frequencies are
``browse.Browse``; query compilation ``compile``; concept counts ``concepts``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import tantivy

from search.core.errors import FlysiftError
from search.core.models import (
    IndexStats,
    Paper,
    PaperHit,
    PaperSearchResults,
    Passage,
    PassageHit,
    PassageSearchResults,
    Term,
    TermHit,
)
from search.core.names import DEFAULT_COLLECTION, check_collection, index_missing
from search.core.query import (
    FIELD_BOOSTS,
    PAPER_TEXT,
    PASSAGE_WEIGHTS,
    Bm25Params,
    EngineQuery,
    HighlightSpec,
    recorded_weights,
)
from search.core.supplements import SupplementChunk, SupplementPlace, paper_fields
from search.engines.embedded import CAPABILITIES
from search.engines.embedded.browse import Browse
from search.engines.embedded.build import EmbeddedBuild
from search.engines.embedded.compile import Compiler, matched
from search.engines.embedded.concepts import CONCEPTS, ConceptStore
from search.engines.embedded.layout import (
    DEPRECATED_BELOW,
    FIELDED_LAYOUT,
    LAYOUT,
    ONE_FIELD_LAYOUT,
    SUPPLEMENT_LAYOUT,
    _current_build,
    _dir_bytes,
    _open_index,
    _read_meta,
    _stored_docs,
)
from search.engines.embedded.paper_store import PaperStore
from search.engines.embedded.prepare import PaperHead, Prepared, _prepare
from search.engines.embedded.supplement_store import SupplementStore
from search.engines.embedded.terms import TermIndex
from search.engines.guards import MIN_PUBLISH_SHARE
from search.engines.protocol import PublishedBuild
from search.text.analysis import stem
from search.text.highlight import Highlighters, paper_highlight, passage_highlight
from search.text.snippets import Highlighter, paper_snippets

log = logging.getLogger("flysift.engine")

def _total(res: tantivy.SearchResult) -> int:
    """The hit count of a search made with ``count=True`` (tantivy's type stub lacks ``SearchResult.count``)."""
    return res.count  # type: ignore[attr-defined]


class _Reader:
    """The two indices of one published build, opened read-only."""

    def __init__(self, build_dir: Path, build_id: str):
        self.build = build_id
        self.path = build_dir
        meta = _read_meta(build_dir / "build.json") or {}
        one_field = isinstance(meta.get("layout"), int) and meta["layout"] >= ONE_FIELD_LAYOUT
        #: the fields paper queries run on (None: the build is per field, searched with ``Bm25Params.per_field``) and
        #: the field weights the build was written with
        self.paper_fields: dict[str, float] | None = PAPER_TEXT if one_field else None
        self.weights: dict[str, float] | None = recorded_weights(meta.get("field_weights")) if one_field else None
        #: whether the build has supplement passages' fields (``source``, ``supp``) and chunks
        self.supplements = isinstance(meta.get("layout"), int) and meta["layout"] >= SUPPLEMENT_LAYOUT
        #: whether papers have the title and abstract fields a query may name (layout 7, and per-field layouts)
        self.fielded = not one_field or meta["layout"] >= FIELDED_LAYOUT
        self.papers = _open_index(build_dir / "papers", "papers")
        self.passages = _open_index(build_dir / "passages", "passages")
        self.paper_schema = self.papers.schema
        self.passage_schema = self.passages.schema
        self.paper_searcher = self.papers.searcher()
        self.passage_searcher = self.passages.searcher()
        self.store = PaperStore(build_dir / "papers.db")
        self.supp = SupplementStore(build_dir / "papers.db")
        layout = meta.get("layout")
        #: the build's on-disk layout (1: written before ``build.json`` recorded it)
        self.layout = layout if isinstance(layout, int) else 1
        #: the concept index (``flysift index concepts``), opened when it appears beside the build
        self.concepts: ConceptStore | None = None

    def concept_store(self) -> ConceptStore | None:
        if self.concepts is None and (self.path / CONCEPTS).exists():
            self.concepts = ConceptStore(self.path / CONCEPTS)
        return self.concepts

    def paper(self, pmcid: str) -> Paper | None:
        return self.store.paper(pmcid)

    def passage_data(self, stored: bytes) -> dict[str, Any]:
        """A passage's fields from its stored doc: layout 2+ keeps its place only, and the text is its paragraph's
        slice. Unvalidated: whoever builds a model from it validates."""
        data = json.loads(stored.decode())
        if not isinstance(data, dict):
            raise FlysiftError(f"Build {self.build}: a stored passage is not an object; rebuild the index.",
                               code="index_corrupt", status=500)
        if "text" not in data and data.get("source") == "supplement":
            place = data.get("supplement") or {}
            try:
                data["text"] = self.supp.text(data["pmcid"], place["file_index"], place["part"], place["chunk"])
            except (KeyError, TypeError):
                raise FlysiftError(f"Build {self.build}: stored supplement passage {str(data.get('id'))[:200]!r} has "
                                   "no place; rebuild the index.", code="index_corrupt", status=500) from None
        elif "text" not in data:
            try:
                paragraph = self.store.paragraph(data["pmcid"], data["section_index"], data["paragraph_index"])
                data["text"] = paragraph[data["start"]:data["end"]]
            except (KeyError, TypeError):
                raise FlysiftError(f"Build {self.build}: stored passage {str(data.get('id'))[:200]!r} has no place; "
                                   "rebuild the index.", code="index_corrupt", status=500) from None
        return data

    def passage(self, stored: bytes) -> Passage:
        return Passage.model_validate(self.passage_data(stored))


class EmbeddedEngine(Browse):
    """The ``Engine`` protocol over tantivy; see the module docstring for the on-disk layout (facets, exports, heads
    and document frequencies: ``Browse``)."""

    name = "embedded"
    capabilities = CAPABILITIES

    def __init__(self, data_dir: Path | str, collection: str = DEFAULT_COLLECTION, *,
                 min_publish_share: float = MIN_PUBLISH_SHARE, index_threads: int | None = None,
                 field_weights: dict[str, float] | None = None):
        self.data_dir = Path(data_dir)
        #: the collection's paper field weights (written by its next build; query-time boosts for builds before the
        #: one-field layout); k1 and b are tantivy's, which nothing changes
        self.bm25 = Bm25Params(field_weights={f: (field_weights or {}).get(f, w) for f, w in FIELD_BOOSTS.items()})
        self.collection = collection
        self.min_publish_share = min_publish_share
        self.index_threads = index_threads
        self.dir = self.data_dir / "collections" / check_collection(collection)   # a name, never a path
        self._reader: _Reader | None = None
        self._current_stat: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self._terms: TermIndex | None = None

    # ---- write side -------------------------------------------------------------------------------------------
    def preparer(self) -> Callable[[Paper, list[Passage]], Prepared]:
        return _prepare

    def open_build(self, fingerprint: str, resume: bool = True) -> EmbeddedBuild:
        return EmbeddedBuild(self.dir, fingerprint, resume, self.min_publish_share, self.index_threads,
                             self.bm25.repeats())

    # ---- read side --------------------------------------------------------------------------------------------
    def _read(self) -> _Reader:
        """The reader of the published build, reopened when ``CURRENT`` changed since the last request."""
        current = self.dir / "CURRENT"
        try:
            st = current.stat()
        except FileNotFoundError:
            raise index_missing(self.collection, f"Collection {self.collection!r} has no index yet in "
                                f"{self.data_dir}: run `flysift index corpus …` (or `flysift demo`) first.") from None
        key = (st.st_mtime_ns, st.st_ino)
        if self._reader is None or key != self._current_stat:
            with self._lock:
                for attempt in range(3):
                    if self._reader is not None and key == self._current_stat:
                        break
                    try:
                        build = json.loads(current.read_text())["build"]
                        self._reader = _Reader(self.dir / "builds" / build, build)
                        self._current_stat = key
                        if self._reader.layout < DEPRECATED_BELOW:   # once per build opened: the log says what to do
                            log.warning("%s", self.outdated())
                    except (OSError, ValueError, KeyError):
                        # publishes in quick succession may drop the build CURRENT named a moment ago: read it again
                        if attempt == 2:
                            raise
                        st = current.stat()
                        key = (st.st_mtime_ns, st.st_ino)
        assert self._reader is not None  # opened above, or the last attempt raised
        return self._reader

    def has_index(self) -> bool:
        return (self.dir / "CURRENT").exists()

    def published_files(self) -> PublishedBuild:
        build = _current_build(self.dir)
        if not isinstance(build, str):
            raise index_missing(self.collection, f"Collection {self.collection!r} has no index yet in "
                                f"{self.data_dir}: run `flysift index corpus …` (or `flysift demo`) first.")
        return PublishedBuild(build, self.dir / "builds" / build)

    def _compiler(self, r: _Reader, kind: Literal["papers", "passages"], source: str | None = None) -> Compiler:
        def concepts(ids: list[str]) -> dict[str, int]:
            return self._concepts(r).counts(kind, ids)

        if kind == "papers":
            fields = paper_fields(r.paper_fields or self.bm25.per_field(), r.supplements, source)
            return Compiler(r.paper_schema, fields, "section_types", paper_fields=r.fielded,
                            supplements=r.supplements, concepts=concepts)
        return Compiler(r.passage_schema, PASSAGE_WEIGHTS, "section_type", kind="passages",
                        supplements=r.supplements, concepts=concepts)

    def search_papers(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                      snippets: bool = False, highlight: HighlightSpec | None = None) -> PaperSearchResults:
        t0 = time.perf_counter()
        r = self._read()
        compiler = self._compiler(r, "papers", query.filters.source)
        res = r.paper_searcher.search(compiler.query(query), limit, count=True, offset=offset)
        docs = [(score, r.paper_searcher.doc(addr)) for score, addr in res.hits]
        papers = [(score, d["pmcid"][0], PaperHead.model_validate_json(d["head"][0])) for score, d in docs]
        hits_matched = matched(r.paper_searcher, r.paper_schema, query, compiler.fields, "pmcid",
                               [pmcid for _, pmcid, _ in papers], [addr for _, addr in res.hits])
        hl = Highlighter(query.clauses, stem) if snippets else None
        hls = Highlighters(query.clauses) if highlight else None
        wanted = snippets or highlight is not None
        best = self._best_passages(r, query, [pmcid for _, pmcid, _ in papers]) if wanted else {}
        hits = []
        for score, pmcid, p in papers:
            snips = paper_snippets(hl, p.title, p.abstract[:500], best.get(pmcid)) if hl else []
            where = best[pmcid].supplement if pmcid in best else None
            hit = PaperHit(pmcid=pmcid, title=p.title, abstract=p.abstract[:500], year=p.year, journal=p.journal,
                           score=score, snippets=snips, matched=hits_matched[pmcid], pmid=p.pmid, doi=p.doi,
                           supplement=SupplementPlace.model_validate(where.model_dump()) if where else None)
            if hls is not None and highlight is not None:
                hit.highlight, hit.best_passage = paper_highlight(hls, highlight, p.title, p.abstract,
                                                                  best.get(pmcid))
            hits.append(hit)
        self._with_mentions(r, "papers", hits, query)
        return PaperSearchResults(total=_total(res), offset=offset, limit=limit, hits=hits,
                                  took_ms=(time.perf_counter() - t0) * 1000)

    def _best_passages(self, r: _Reader, query: EngineQuery, pmcids: list[str]) -> dict[str, Passage]:
        """The best-scoring passage of each paper: body snippets come from it, not from a scan of the whole paper."""
        best: dict[str, Passage] = {}
        for pmcid in pmcids:
            # the positive clauses OR-ed (a tree's AND need not hold within one passage)
            scoped = query.model_copy(update={"tree": None,
                                              "filters": query.filters.model_copy(update={"pmcids": [pmcid]})})
            hits = r.passage_searcher.search(self._compiler(r, "passages").query(scoped), 1, count=False).hits
            if hits:
                best[pmcid] = r.passage(r.passage_searcher.doc(hits[0][1])["doc"][0])
        return best

    def search_passages(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                        snippets: bool = True, highlight: HighlightSpec | None = None) -> PassageSearchResults:
        t0 = time.perf_counter()
        r = self._read()
        compiler = self._compiler(r, "passages")
        res = r.passage_searcher.search(compiler.query(query), limit, count=True, offset=offset)
        # each stored passage validated once, as a hit (a Passage first would validate the same fields twice)
        hits = [PassageHit.model_validate({**p, "passage_id": p.get("id"), "score": score})
                for score, p in ((score, r.passage_data(r.passage_searcher.doc(addr)["doc"][0]))
                                 for score, addr in res.hits)]
        hits_matched = matched(r.passage_searcher, r.passage_schema, query, PASSAGE_WEIGHTS, "id",
                               [h.passage_id for h in hits], [addr for _, addr in res.hits])
        hl = Highlighter(query.clauses, stem) if snippets else None
        hls = Highlighters(query.clauses) if highlight else None
        for h in hits:
            h.matched = hits_matched[h.passage_id]
            h.snippet = hl.snippet("text", h.text) if hl else None
            if hls is not None and highlight is not None:
                h.highlight = passage_highlight(hls, highlight, h.text, h.section_type)
        self._with_mentions(r, "passages", hits, query)
        return PassageSearchResults(total=_total(res), offset=offset, limit=limit, hits=hits,
                                    took_ms=(time.perf_counter() - t0) * 1000)

    def get_paper(self, pmcid: str) -> Paper | None:
        return self._read().paper(pmcid)

    def supplement_chunks(self, pmcid: str, file_index: int, part: int, start: int,
                          limit: int) -> list[SupplementChunk]:
        return self._read().supp.chunks(pmcid, file_index, part, start, limit)

    def scan_passages(self) -> Iterator[tuple[Passage, str]]:
        """Every passage of the published build with its paper's title, in index order (segment, then doc)."""
        r = self._read()
        titles = {d["pmcid"][0]: PaperHead.model_validate_json(d["head"][0]).title
                  for d in _stored_docs(r.paper_searcher)}
        for d in _stored_docs(r.passage_searcher):
            p = r.passage(d["doc"][0])
            if p.source == "paper":   # the dense index embeds the articles' prose, not supplement tables
                yield p, titles.get(p.pmcid, "")

    def scan_papers(self) -> Iterator[Paper]:
        """Every paper of the published build, in index order (``flysift upgrade`` rewrites them)."""
        r = self._read()
        for d in _stored_docs(r.paper_searcher):
            paper = r.paper(d["pmcid"][0])
            if paper is not None:
                yield paper

    def outdated(self) -> str | None:
        if not self.has_index() or (layout := self._read().layout) >= DEPRECATED_BELOW:
            return None
        return (f"collection {self.collection!r} is in on-disk layout {layout}, which this flysift still reads but "
                f"will stop reading (new builds are layout {LAYOUT}): run `flysift upgrade --data-dir "
                f"{self.data_dir}` to rewrite it")

    def bm25_parameters(self, kind: Literal["papers", "passages"] = "papers") -> dict[str, Any]:
        """The parameters in force: the published build's field weights (what it was written with; the configured
        ones apply from the next build), the configured ones before the first build, a per-field build's boosts."""
        if not self.has_index():
            return self.bm25.report(kind)
        r = self._read()
        weights = r.weights if r.paper_fields else self.bm25.per_field()
        return self.bm25.model_copy(update={"field_weights": weights or self.bm25.field_weights}).report(kind)

    def stats(self) -> IndexStats:
        terms = self._term_index().counts() if (self.data_dir / "terms").exists() else {}
        bm25 = self.bm25.with_next_build(self.bm25_parameters())
        if not self.has_index():
            return IndexStats(engine=self.name, papers=0, passages=0, index_bytes=0, terms=terms, bm25=bm25)
        r = self._read()
        return IndexStats(engine=self.name, papers=r.paper_searcher.num_docs, passages=r.passage_searcher.num_docs,
                          index_bytes=_dir_bytes(r.path), build=r.build, terms=terms, bm25=bm25)

    # ---- ontology terms (delegated to the term index) ---------------------------------------------------------
    def _term_index(self) -> TermIndex:
        if self._terms is None:
            self._terms = TermIndex(self.data_dir)
        return self._terms

    def write_terms(self, ontology: str, terms: Iterable[Term]) -> int:
        return self._term_index().write(ontology, terms)

    def search_terms(self, ontology: str, query: str, *, aspect: str | None = None, limit: int = 10,
                     exclude_ids: set[str] | frozenset[str] = frozenset(),
                     include_obsolete: bool = False) -> list[TermHit]:
        return self._term_index().search(ontology, query, aspect=aspect, limit=limit, exclude_ids=exclude_ids,
                                         include_obsolete=include_obsolete)

    def term_candidates(self, ontology: str, queries: Sequence[tuple[str, int]], *, aspect: str | None = None,
                        exclude_ids: set[str] | frozenset[str] = frozenset(),
                        include_obsolete: bool = False) -> list[list[tuple[str, float]]]:
        return self._term_index().candidates(ontology, queries, aspect=aspect, exclude_ids=exclude_ids,
                                             include_obsolete=include_obsolete)

    def term_hits(self, ontology: str, ids: Sequence[str], tokens: Iterable[str] = ()) -> list[TermHit]:
        return self._term_index().hits(ontology, ids, tokens)

    def close(self) -> None:
        self._reader = None
