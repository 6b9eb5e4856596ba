"""The browsing side of the search service, beside paging through hits: exports of whole result lists, papers like
a paper (more-like-this), the collections there are, and a paper's text with a query's matches marked. The REST
routes, the CLI and the curator's pages all call these (``SearchService`` inherits them).

More-like-this weighs a paper's words as Elasticsearch's ``more_like_this`` does, on our analysis, in every engine:
the word-view tokens of its title, abstract and body that occur at least ``MIN_TERM_FREQ`` times (not stop words,
not numbers, not shorter than 3 letters), weighted by term frequency × BM25 idf over the collection's papers, keeping
those in at least ``MIN_DOC_FREQ`` papers and at most ``MAX_DOC_SHARE`` of them; the best ``MAX_QUERY_TERMS`` are
OR-ed into a paper search that leaves the paper itself out.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from search.core.base import Model
from search.core.errors import LimitExceeded, PaperNotFound
from search.core.models import CollectionInfo, PaperSearchResults, PassageHit
from search.core.names import DEFAULT_COLLECTION
from search.core.query import BoolNode, Clause, EngineQuery, FilterNode, Filters, HighlightSpec
from search.core.querylang import Syntax
from search.engines import collection_names
from search.retrieval import exports
from search.retrieval.boolean import Reading
from search.text.analysis import is_stop_word, stem, word_spans
from search.text.highlight import Highlighters
from search.text.passages import split_passages

if TYPE_CHECKING:
    from search.core.config import Settings
    from search.engines import Engine

MAX_QUERY_TERMS = 25
MIN_TERM_FREQ = 2
MIN_DOC_FREQ = 2
MAX_DOC_SHARE = 0.5
MIN_WORD_CHARS = 3
#: most frequent words whose document frequency is looked up
CANDIDATES = 300
H = TypeVar("H")
#: passages whose titles one export request reads at once, and the most titles an export keeps
TITLE_BATCH = 200
TITLE_CACHE = 20_000


class MarkedParagraph(Model):
    """One passage of a paper as a reader shows it: its id and text, the matches as [start, end) ranges."""

    passage_id: str
    text: str
    highlights: list[tuple[int, int]] = []


class MarkedSection(Model):
    type: str
    title: str | None = None
    passages: list[MarkedParagraph] = []


class PaperView(Model):
    """A paper for a person to read: its sections with headings, passages with ids, the query's matches marked."""

    pmcid: str
    pmid: str | None = None
    doi: str | None = None
    year: int | None = None
    journal: str | None = None
    title: str
    title_highlights: list[tuple[int, int]] = []
    sections: list[MarkedSection] = []
    matches: int = 0


class BrowseService:
    """Mixed into ``SearchService`` (which provides engines, limits and query reading)."""

    settings: Settings

    if TYPE_CHECKING:
        def engine(self, collection: str = DEFAULT_COLLECTION) -> Engine: ...
        def check_query(self, text: str) -> None: ...
        def check_page(self, limit: int, offset: int) -> None: ...
        def check_sections(self, names: Iterable[str] | None) -> list[str] | None: ...
        def get_paper(self, pmcid: str, collection: str = DEFAULT_COLLECTION) -> Any: ...
        def read(self, text: str, filters: Filters | None, expansions: Iterable[str] = (),
                 known_symbols: frozenset[str] = frozenset(), foldable: frozenset[str] = frozenset(), *,
                 syntax: Syntax = "plain", target: Literal["papers", "passages"] = "papers",
                 compounds: frozenset[str] = frozenset(), concepts: bool = True) -> Reading: ...

    # ---- exports ------------------------------------------------------------------------------------------------
    def check_export_limit(self, limit: int) -> int:
        top = self.settings.max_export_hits
        if not 1 <= limit <= top:
            raise LimitExceeded(f"an export holds 1 to {top:,} hits (got {limit}); narrow the query or raise "
                                "FLYSIFT_MAX_EXPORT_HITS.", details={"field": "limit", "max": top})
        return limit

    def export(self, kind: Literal["papers", "passages"], text: str, fmt: exports.Format, *, limit: int = 1000,
               filters: Filters | None = None, collection: str = DEFAULT_COLLECTION, expansions: Iterable[str] = (),
               syntax: Syntax = "plain", foldable: frozenset[str] = frozenset(),
               compounds: frozenset[str] = frozenset(), qid: str = "1", tag: str = "flysift",
               concepts: bool = True) -> Iterator[str]:
        """The first ``limit`` hits of a search as ``fmt``, as text pieces: read, checked and started before this
        returns (a bad query, a missing index or a cluster down raise here, not half-way through a stream), then
        produced as they are consumed, so memory stays bounded whatever ``limit`` is."""
        self.check_export_limit(limit)
        exports.check_trec_name(qid, "qid")
        exports.check_trec_name(tag, "run_tag")
        query = self.read(text, filters, expansions, foldable=foldable, syntax=syntax, target=kind,
                          compounds=compounds, concepts=concepts).query
        engine = self.engine(collection)
        if kind == "papers":
            return exports.papers(_started(engine.export_papers(query, limit)), fmt, qid=qid, tag=tag)
        hits = _started(engine.export_passages(query, limit))
        if fmt in ("csv", "tsv", "ris", "bibtex", "jsonl"):
            hits = _with_titles(engine, hits)
        return exports.passages(hits, fmt, qid=qid, tag=tag)

    # ---- more like this -----------------------------------------------------------------------------------------
    def significant_terms(self, pmcid: str, collection: str = DEFAULT_COLLECTION) -> list[dict[str, Any]]:
        """The words that characterise a paper against its collection (see the module docstring), best first."""
        engine = self.engine(collection)
        paper = engine.get_paper(pmcid)
        if paper is None:
            raise PaperNotFound(f"Paper {pmcid[:200]} not found in collection {collection!r}.",
                                details={"pmcid": pmcid[:200]})
        text = "\n".join([paper.title, paper.abstract, paper.body_text()])
        tf: Counter[str] = Counter()
        surface: dict[str, str] = {}
        for _, _, word in word_spans(text):
            if len(word) < MIN_WORD_CHARS or not any(c.isalpha() for c in word) or is_stop_word(word):
                continue
            token = stem(word)
            if token:
                tf[token] += 1
                surface.setdefault(token, word)
        candidates = [t for t, n in tf.most_common(CANDIDATES) if n >= MIN_TERM_FREQ]
        n_docs, df = engine.doc_freqs(candidates)
        scored: list[dict[str, Any]] = []
        for t in candidates:
            d = df.get(t, 0)
            if d < MIN_DOC_FREQ or d > MAX_DOC_SHARE * n_docs:
                continue
            idf = math.log(1 + (n_docs - d + 0.5) / (d + 0.5))
            scored.append({"term": surface[t], "token": t, "tf": tf[t], "df": d, "weight": round(tf[t] * idf, 4)})
        scored.sort(key=lambda x: (-float(x["weight"]), str(x["token"])))
        return scored[:MAX_QUERY_TERMS]

    def more_like_this(self, pmcid: str, *, collection: str = DEFAULT_COLLECTION, limit: int = 10, offset: int = 0,
                       filters: Filters | None = None, snippets: bool = False,
                       highlight: HighlightSpec | None = None) -> PaperSearchResults:
        """Papers like ``pmcid``: its significant terms OR-ed, the paper itself left out; ``query.terms`` says which
        terms and weights were used."""
        self.check_page(limit, offset)
        if filters and filters.section_types:
            filters.section_types = self.check_sections(filters.section_types)
        terms = self.significant_terms(pmcid, collection)
        clauses = [Clause(text=t["term"]) for t in terms]
        query = EngineQuery(clauses=clauses, filters=filters or Filters(),
                            tree=BoolNode(should=list(clauses), must_not=[FilterNode(field="pmcid", values=[pmcid])]))
        if not clauses:
            query = query.model_copy(update={"tree": BoolNode(must_not=[FilterNode(field="pmcid", values=[pmcid])],
                                                              should=[])})
        engine = self.engine(collection)
        if clauses:
            res = engine.search_papers(query, limit=limit, offset=offset, snippets=snippets, highlight=highlight)
        else:
            res = PaperSearchResults(total=0, offset=offset, limit=limit, hits=[])
        res.query = {"more_like_this": pmcid, "terms": terms}
        return res

    # ---- collections --------------------------------------------------------------------------------------------
    def collections(self) -> list[CollectionInfo]:
        """Every collection with a published build: counts, build, engine and the ontologies searchable beside it."""
        out = []
        for name in collection_names(self.settings):
            eng = self.engine(name)
            st = eng.stats()
            info = eng.concepts_info()
            out.append(CollectionInfo(name=name, engine=st.engine, papers=st.papers, passages=st.passages,
                                      build=st.build, index_bytes=st.index_bytes, ontologies=dict(st.terms),
                                      concepts={k: info[k] for k in ("ontologies", "papers", "mentions", "terms",
                                                                     "bytes") if k in info} if info else None))
        return out

    # ---- reading a paper ----------------------------------------------------------------------------------------
    def paper_view(self, pmcid: str, *, collection: str = DEFAULT_COLLECTION, sections: list[str] | None = None,
                   query: str | None = None, expansions: Iterable[str] = (), syntax: Syntax = "query",
                   foldable: frozenset[str] = frozenset(), compounds: frozenset[str] = frozenset()) -> PaperView:
        """A paper by section and passage, with the matches of ``query`` and of the gene names ``expansions``
        marked (the same highlighter as search: ``Dl`` never marks ``dl``)."""
        wanted = self.check_sections(sections)
        paper = self.get_paper(pmcid, collection)
        clauses: list[Clause] = []
        if query and query.strip():
            clauses = self.read(query, None, expansions, foldable=foldable, syntax=syntax, target="papers",
                                compounds=compounds).query.clauses
        elif expansions:
            from search.retrieval.planner import expansion_clause

            clauses = [expansion_clause(n) for n in dict.fromkeys(expansions)]
        hls = Highlighters(clauses)
        view = PaperView(pmcid=paper.pmcid, pmid=paper.pmid, doi=paper.doi, year=paper.year, journal=paper.journal,
                         title=paper.title, title_highlights=hls.for_field("title").spans(paper.title))
        names = {0: ("ABSTRACT", "Abstract")} | {i: (s.type, s.title) for i, s in enumerate(paper.sections, start=1)}
        current, at = MarkedSection(type=""), -1
        for p in split_passages(paper):
            kind, heading = names.get(p.section_index, ("OTHER", None))
            if wanted is not None and kind not in wanted:
                continue
            if p.section_index != at:
                current, at = MarkedSection(type=kind, title=heading), p.section_index
                view.sections.append(current)
            field = "abstract" if p.section_index == 0 else None
            spans = hls.for_field(field).spans(p.text)
            view.matches += len(spans)
            current.passages.append(MarkedParagraph(passage_id=p.id, text=p.text, highlights=spans))
        view.matches += len(view.title_highlights)
        return view


def _started(hits: Iterable[H]) -> Iterator[H]:
    """``hits`` with the first one already read: the engine's first request (a missing collection, a cluster
    down) fails here, before an answer starts, not half-way through a stream (a format writes its header first)."""
    it = iter(hits)
    first = next(it, None)
    return iter(()) if first is None else itertools.chain([first], it)


def _with_titles(engine: Engine, hits: Iterable[PassageHit]) -> Iterator[PassageHit]:
    """Passage hits with their papers' titles, read for a batch of hits at a time; titles already read are kept
    (at most ``TITLE_CACHE`` of them: an export's passages come from far fewer papers)."""
    it = iter(hits)
    titles: dict[str, str | None] = {}
    while batch := list(itertools.islice(it, TITLE_BATCH)):
        if len(titles) > TITLE_CACHE:
            titles.clear()
        missing = {h.pmcid for h in batch} - titles.keys()
        if missing:
            heads = engine.paper_heads(missing)
            titles.update({p: heads[p].title if p in heads else None for p in missing})
        for h in batch:
            h.title = titles[h.pmcid]
            yield h

