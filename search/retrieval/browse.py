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
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from search.core.base import Model
from search.core.errors import FlysiftError, LimitExceeded, PaperNotFound
from search.core.models import CollectionInfo, PaperHit, PaperSearchResults, PassageHit
from search.core.names import DEFAULT_COLLECTION
from search.core.query import BoolNode, Clause, EngineQuery, FilterNode, Filters, HighlightSpec
from search.core.querylang import Syntax
from search.core.supplements import SupplementFile
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


Span = tuple[int, int]


class TermMark(Model):
    """An ontology term named in a text: [start, end), the term's id and, where known, its name."""

    start: int
    end: int
    term_id: str
    name: str = ""


#: ``recognise(texts)``: for each text, the ontology terms it names (the term recogniser's work, passed in by the
#: caller: the retrieval layer does not hold the ontologies)
Recognise = Callable[[list[str]], list[list[TermMark]]]


class TextMarks(Model):
    """Where a query matches one text: ``highlights`` every match, ``names`` those of them that are the gene's names
    (a gene-name expansion, or a query word that is one of them), ``terms`` the ontology terms named in it."""

    highlights: list[Span] = []
    names: list[Span] = []
    terms: list[TermMark] = []


class MarkedParagraph(TextMarks):
    """One passage of a paper as a reader shows it: its id, text and offsets in its paragraph, the marks."""

    passage_id: str
    text: str
    start: int = 0
    end: int = 0


class MarkedSection(Model):
    index: int = 0
    type: str
    title: str | None = None
    passages: list[MarkedParagraph] = []


class PaperView(Model):
    """A paper for a person to read: its sections with headings, passages with ids, the query's matches, the gene's
    names and (on request) ontology terms marked."""

    pmcid: str
    pmid: str | None = None
    doi: str | None = None
    year: int | None = None
    journal: str | None = None
    authors: list[str] = []
    title: str
    title_highlights: list[Span] = []
    title_names: list[Span] = []
    title_terms: list[TermMark] = []
    sections: list[MarkedSection] = []
    supplements: list[SupplementFile] = []
    matches: int = 0
    #: where the marked terms come from: ``concepts`` (the collection's concept index), ``recogniser`` (the term
    #: recogniser, run now), or None (not asked)
    terms_from: Literal["concepts", "recogniser"] | None = None


class Marker:
    """Marks a query's matches in texts with the search highlighter (``Dl`` never marks ``dl``), telling the gene's
    names from the other words: a name's match wins over a word's where they overlap."""

    def __init__(self, clauses: Sequence[Clause]):
        names = {c.text for c in clauses if c.name}
        self.words = Highlighters([c for c in clauses if not c.name and c.text not in names])
        self.names = Highlighters([c for c in clauses if c.name or c.text in names])
        self.empty = not clauses

    def marks(self, text: str, field: str | None = None) -> TextMarks:
        return self.marks_many([text], field)[0]

    def marks_many(self, texts: Sequence[str], field: str | None = None) -> list[TextMarks]:
        """The marks of each text, found in one pass over the texts joined by blank lines (no token spans
        whitespace, so each match lies within one text): a paper is two passes, not two per passage."""
        return [TextMarks.model_construct(highlights=h, names=n, terms=[]) for h, n in self._spans(texts, field)]

    def marks_fields(self, fields: Sequence[tuple[str | None, Sequence[str]]]) -> list[list[tuple[list[Span],
                                                                                                  list[Span]]]]:
        """Per field (title, abstract, body) and text, its matches and the gene's names among them. Fields the same
        clauses light up (a query that names no field) are marked in one pass over all their texts together."""
        groups: dict[tuple[int, int], list[int]] = {}
        for i, (field, _) in enumerate(fields):
            groups.setdefault((id(self.words.for_field(field)), id(self.names.for_field(field))), []).append(i)
        out: list[list[tuple[list[Span], list[Span]]]] = [[] for _ in fields]
        for members in groups.values():
            found = self._spans([t for i in members for t in fields[i][1]], fields[members[0]][0])
            at = 0
            for i in members:
                out[i], at = found[at:at + len(fields[i][1])], at + len(fields[i][1])
        return out

    def _spans(self, texts: Sequence[str], field: str | None) -> list[tuple[list[Span], list[Span]]]:
        """Per text: every match, and those of them that are the gene's names (see :meth:`marks_many`)."""
        if self.empty or not any(texts):
            return [([], []) for _ in texts]
        whole = "\n\n".join(texts)
        names = self.names.for_field(field).spans(whole)
        starts = [s for s, _ in names]

        def free(s: int, e: int) -> bool:   # overlaps no name (names do not overlap each other once merged)
            i = bisect_left(starts, e) - 1
            return i < 0 or names[i][1] <= s

        spans = sorted([(s, e, True) for s, e in names]
                       + [(s, e, False) for s, e in self.words.for_field(field).spans(whole) if free(s, e)])
        out: list[tuple[list[Span], list[Span]]] = []
        at, i = 0, 0
        for text in texts:
            end = at + len(text)
            mine: list[Span] = []
            own: list[Span] = []
            while i < len(spans) and spans[i][0] < end:
                s, e, is_name = spans[i]
                mine.append((s - at, e - at))
                if is_name:
                    own.append((s - at, e - at))
                i += 1
            out.append((mine, own))
            at = end + 2
        return out


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
        heads: dict[str, PaperHit | None] = {}
        if fmt in ("csv", "tsv", "ris", "bibtex", "jsonl"):
            hits = _with_titles(engine, hits, heads)
        return exports.passages(hits, fmt, qid=qid, tag=tag, papers=heads)

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
    def marker(self, query: str | None = None, expansions: Iterable[str] = (), *, syntax: Syntax = "query",
               foldable: frozenset[str] = frozenset(), compounds: frozenset[str] = frozenset()) -> Marker:
        """What marks ``query``'s matches and the gene's names ``expansions`` in a text (a paper's passages, a
        supplement's cells): the clauses a search of them would run. A query that does not read raises as the
        search would (422 ``query_syntax``)."""
        clauses: list[Clause] = []
        if query and query.strip():
            clauses = self.read(query, None, expansions, foldable=foldable, syntax=syntax, target="papers",
                                compounds=compounds).query.clauses
        elif expansions:
            from search.retrieval.planner import expansion_clause

            clauses = [expansion_clause(n) for n in dict.fromkeys(expansions)]
        return Marker(clauses)

    def paper_view(self, pmcid: str, *, collection: str = DEFAULT_COLLECTION, sections: list[str] | None = None,
                   query: str | None = None, expansions: Iterable[str] = (), syntax: Syntax = "query",
                   foldable: frozenset[str] = frozenset(), compounds: frozenset[str] = frozenset(),
                   terms: bool = False, recognise: Recognise | None = None) -> PaperView:
        """A paper by section and passage, with the matches of ``query`` and of the gene names ``expansions``
        marked (the same highlighter as search: ``Dl`` never marks ``dl``), the names told from the other words.
        ``terms``: also the ontology terms each passage names, from the collection's concept index when it has one
        (``flysift index concepts``), else from ``recognise`` (the term recogniser, which the caller holds)."""
        wanted = self.check_sections(sections)
        paper = self.get_paper(pmcid, collection)
        marker = self.marker(query, expansions, syntax=syntax, foldable=foldable, compounds=compounds)
        names = {0: ("ABSTRACT", "Abstract")} | {i: (s.type, s.title) for i, s in enumerate(paper.sections, start=1)}
        shown = [p for p in split_passages(paper)
                 if wanted is None or names.get(p.section_index, ("OTHER", None))[0] in wanted]
        abstract = [p for p in shown if p.section_index == 0]
        body = [p for p in shown if p.section_index != 0]
        (title,), in_abstract, in_body = marker.marks_fields([("title", [paper.title]),
                                                             ("abstract", [p.text for p in abstract]),
                                                             (None, [p.text for p in body])])
        view = PaperView(pmcid=paper.pmcid, pmid=paper.pmid, doi=paper.doi, year=paper.year, journal=paper.journal,
                         authors=paper.authors, title=paper.title, title_highlights=title[0], title_names=title[1],
                         supplements=paper.supplements)
        marks = dict(zip([p.id for p in abstract], in_abstract, strict=True))
        marks.update(zip([p.id for p in body], in_body, strict=True))
        current, at = MarkedSection(type=""), -1
        for p in shown:
            if p.section_index != at:
                kind, heading = names.get(p.section_index, ("OTHER", None))
                current, at = MarkedSection(index=p.section_index, type=kind, title=heading), p.section_index
                view.sections.append(current)
            found, own = marks[p.id]
            view.matches += len(found)
            current.passages.append(MarkedParagraph.model_construct(
                passage_id=p.id, text=p.text, start=p.start, end=p.end, highlights=found, names=own, terms=[]))
        view.matches += len(view.title_highlights)
        if terms:
            self.mark_terms(view, collection, recognise)
        return view

    def mark_terms(self, view: PaperView, collection: str, recognise: Recognise | None) -> None:
        """The ontology terms of a paper view's passages: the concept index's mentions where the collection has
        one, else the recogniser's over the title and the passages shown."""
        engine = self.engine(collection)
        passages = [p for s in view.sections for p in s.passages]
        if engine.concepts_info():
            by_passage: dict[str, list[TermMark]] = {}
            for m in engine.paper_concepts(view.pmcid):
                by_passage.setdefault(m.passage_id, []).append(TermMark(start=m.start, end=m.end, term_id=m.term_id,
                                                                        name=m.text))
            for p in passages:
                p.terms = by_passage.get(p.passage_id, [])
            view.terms_from = "concepts"
            return
        if recognise is None:
            raise FlysiftError("No concept index and no term recogniser: run `flysift index concepts`.",
                               code="concepts_missing", status=409)
        found = recognise([view.title, *(p.text for p in passages)])
        view.title_terms = found[0]
        for p, marks in zip(passages, found[1:], strict=True):
            p.terms = marks
        view.terms_from = "recogniser"


def _started(hits: Iterable[H]) -> Iterator[H]:
    """``hits`` with the first one already read: the engine's first request (a missing collection, a cluster
    down) fails here, before an answer starts, not half-way through a stream (a format writes its header first)."""
    it = iter(hits)
    first = next(it, None)
    return iter(()) if first is None else itertools.chain([first], it)


def _with_titles(engine: Engine, hits: Iterable[PassageHit], heads: dict[str, PaperHit | None]
                 ) -> Iterator[PassageHit]:
    """Passage hits with their papers' titles, read for a batch of hits at a time into ``heads`` (which the export
    formats read for authors, journal and ids); heads already read are kept (at most ``TITLE_CACHE`` of them: an
    export's passages come from far fewer papers)."""
    it = iter(hits)
    while batch := list(itertools.islice(it, TITLE_BATCH)):
        if len(heads) > TITLE_CACHE:
            heads.clear()
        missing = {h.pmcid for h in batch} - heads.keys()
        if missing:
            found = engine.paper_heads(missing)
            heads.update({p: found.get(p) for p in missing})
        for h in batch:
            head = heads[h.pmcid]
            h.title = head.title if head else None
            yield h

