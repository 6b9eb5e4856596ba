"""The embedded engine: tantivy indices in a data directory, no server.

Layout of ``<data_dir>/collections/<collection>/``::

    CURRENT                    {"build": "<id>"}: the published build; replaced atomically (write + rename)
    builds/<id>/papers/        paper-level tantivy index
    builds/<id>/passages/      passage-level tantivy index; stored docs hold a passage's place (ids, offsets), not
                               its text (layout 2+; layout-1 builds stored the text too, and are still read)
    builds/<id>/papers.db      the paper store (``search.engines.embedded.paper_store``): full papers, served by
                               fetch and kept out of the paper index so that search loads only small stored fields;
                               passage texts are sliced from its paragraphs (``paragraph[start:end]``). Layout 3+
                               keeps body paragraphs in compressed blocks of a few KB, so a passage hit decompresses
                               one block, not its whole paper (builds before it hold one compressed JSON per paper)
    builds/<id>/build.json     fingerprint, layout, status (building|published), resume state
    write.lock                 held by the one process writing a build (tantivy allows one writer)

A build is written beside the published one and only becomes visible when ``publish`` swaps ``CURRENT``, so a
failed or killed indexing run leaves the previous index serving. ``publish`` refuses an empty or much smaller build
(``search.engines.publish_refusal``). A failed build is removed; a killed one is resumed by the next run of the same
input or removed by the next run of any other, so neither holds the disk for long. Readers stat ``CURRENT`` on each
request and reopen when it changed: the service picks up new builds without a restart. Ontology terms live in
``<data_dir>/terms`` (see ``search.engines.embedded.terms``).

Each text is analysed once (layout 2): ``_prepare`` (run by the indexer in worker processes) turns every passage
into its word- and symbol-view tokens (``search.text.tokens``), and every field is indexed from such space-joined
tokens with the whitespace tokenizer (``PRE_ANALYZED``). A paper's abstract and body fields are its passages' token
strings joined (passages cover every word of every paragraph, and no token spans whitespace), so positions, lengths
and BM25 scores are those of analysing the paper's text itself. Queries are analysed as before
(``search.text.analysis``), whichever layout a build has.

Layout 4 indexes the symbol view without positions (term frequencies and lengths only, so BM25 scores are the
same): a symbol-view clause is one token (``search.retrieval.planner``: symbols are single tokens, and every phrase
is read in the word view), so positions there were never read. A phrase asked of the symbol view of such a build is
matched as all of its tokens.

Layout 5 indexes a paper as one field per view, ``text_w``/``text_s``: its title, abstract and body as separate
values (no phrase spans two), each written as many times as the collection's field weight says (``Bm25Params.repeats``,
kept in ``build.json``). A word then has one document frequency and one saturation over the whole paper, where the
per-field fields before scored a word rare in titles as rare even when every body has it (docs/search.md, "Scoring").
Builds of layouts 1-4 are still served, per field, with query-time boosts (``Bm25Params.per_field``).
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import tantivy

from search.core.errors import FlysiftError, index_missing
from search.core.models import (
    IndexStats,
    Paper,
    PaperHit,
    PaperSearchResults,
    Passage,
    PassageHit,
    PassageSearchResults,
    Reject,
    Term,
    TermHit,
)
from search.core.names import check_collection
from search.core.query import (
    FIELD_BOOSTS,
    PAPER_TEXT,
    PASSAGE_WEIGHTS,
    Bm25Params,
    Clause,
    EngineQuery,
    recorded_weights,
)
from search.core.supplements import SupplementChunk, SupplementPlace, paper_fields
from search.engines.embedded import paper_store, supplement_store
from search.engines.embedded.match import any_of
from search.engines.embedded.paper_store import PaperStore
from search.engines.embedded.prepare import PaperHead, Prepared, _prepare
from search.engines.embedded.supplement_store import SupplementStore
from search.engines.embedded.terms import TermIndex
from search.engines.guards import MIN_PUBLISH_SHARE, BuildRefused, publish_refusal, storage_error
from search.text.analysis import ANALYZERS, analyze, stem
from search.text.snippets import Highlighter, paper_snippets
from search.text.tokens import PRE_ANALYZED

DEFAULT_COLLECTION = "default"
KEEP_BUILDS = 2
VIEW_SUFFIX = {"word": "_w", "symbol": "_s"}
#: the index layout new builds are written in (see the module docstring); a build of another layout is never resumed
LAYOUT = 6
#: the first layout with supplement passages (``source``), the papers' ``supp`` fields and ``supp_chunks``
SUPPLEMENT_LAYOUT = 6
#: the first layout whose papers are one field (``text``); older builds are searched per field
ONE_FIELD_LAYOUT = 5
#: tantivy's indexing heap of one writer thread: a thread writes a segment each time it fills, so a larger heap means
#: fewer segments to merge; bounded so that both writers' threads stay within a share of the machine's memory.
#: 128 MB: a full FlyAOC-size build (16,898 papers, 2 cores) allocated 571 MiB at its peak instead of 1.36 GiB with
#: 256 MB, for 3 % more CPU (398 vs 387 s) and 1 % more index (bench/bench_indexing.py --full, docs/benchmarks.md)
MAX_THREAD_HEAP = 128_000_000
MIN_THREAD_HEAP = 16_000_000          # tantivy refuses less than 15 MB per thread
MAX_WRITER_THREADS = 8                # tantivy's own default cap
MEMORY_SHARE = 8                      # both writers' heaps together take at most 1/8 of the available memory


def _add_views(sb: tantivy.SchemaBuilder, name: str) -> None:
    sb.add_text_field(name + "_w", stored=False, tokenizer_name=PRE_ANALYZED)
    # no positions: no symbol-view query is a phrase (layout 4: 20 % less index at 2,000 papers, 238 → 190 MiB)
    sb.add_text_field(name + "_s", stored=False, tokenizer_name=PRE_ANALYZED, index_option="freq")


def _paper_schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("pmcid", stored=True, tokenizer_name="raw")
    sb.add_integer_field("year", stored=False, indexed=True, fast=True)
    sb.add_text_field("section_types", stored=False, tokenizer_name="raw")
    _add_views(sb, "text")   # title, abstract and body, each repeated by its field weight (layout 5)
    _add_views(sb, "supp")   # the supplement passages' text, one value each (layout 6)
    sb.add_bytes_field("head", stored=True, indexed=False)  # PaperHead JSON
    return sb.build()


def _passage_schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True, tokenizer_name="raw")
    sb.add_text_field("pmcid", stored=False, tokenizer_name="raw")
    sb.add_integer_field("year", stored=False, indexed=True, fast=True)
    sb.add_text_field("section_type", stored=False, tokenizer_name="raw")
    sb.add_text_field("source", stored=False, tokenizer_name="raw")   # "supplement" on supplement passages only
    _add_views(sb, "text")
    sb.add_bytes_field("doc", stored=True, indexed=False)
    return sb.build()


SCHEMAS = {"papers": _paper_schema, "passages": _passage_schema}


def _open_index(path: Path, kind: str, create: bool = False) -> tantivy.Index:
    if create:
        path.mkdir(parents=True, exist_ok=True)
        index = tantivy.Index(SCHEMAS[kind](), path=str(path), reuse=True)
    else:
        index = tantivy.Index.open(str(path))
    for name, analyzer in ANALYZERS.items():   # the analyzers of layout-1 builds
        index.register_tokenizer(name, analyzer)
    index.register_tokenizer(PRE_ANALYZED, _PRE_ANALYZER)
    return index


_PRE_ANALYZER = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()


def _available_memory() -> int:
    """Bytes of memory available to new allocations (Linux's MemAvailable; free pages elsewhere; 2 GB if unknown)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return 2_000_000_000


def writer_plan(threads: int | None = None) -> tuple[int, int]:
    """``(threads, heap bytes)`` of each of a build's two tantivy writers. Threads: ``threads`` (the
    ``index_threads`` setting), else a third of the cores each, since the indexer's preparing workers and the two
    writers share them (one thread each on 2-4 cores: a second one cost more CPU and left more, smaller segments on
    2 cores). Each thread gets a bounded heap, both writers together at most 1/MEMORY_SHARE of available memory."""
    n = max(1, threads or min((os.cpu_count() or 1) // 3, MAX_WRITER_THREADS))
    per_thread = _available_memory() // (MEMORY_SHARE * 2 * n)
    return n, n * max(MIN_THREAD_HEAP, min(MAX_THREAD_HEAP, per_thread))


def _stored_docs(searcher: tantivy.Searcher) -> Iterator[tantivy.Document]:
    """Every live document of an index, in a stable order (segment, then doc)."""
    if searcher.num_docs == 0:
        return
    res = searcher.search(tantivy.Query.all_query(), searcher.num_docs, count=False)
    for addr in sorted((a for _, a in res.hits), key=lambda a: (a.segment_ord, a.doc)):
        yield searcher.doc(addr)


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _open_paper_db(path: Path) -> sqlite3.Connection:
    """A build's paper store for writing; any thread may use it (its build serialises every use)."""
    db = sqlite3.connect(path, check_same_thread=False)
    paper_store.create(db)
    supplement_store.create(db)
    return db


def _dir_bytes(path: Path) -> int:
    total = 0
    for f in path.rglob("*"):
        try:
            total += f.stat().st_size if f.is_file() else 0
        except FileNotFoundError:  # an old build being dropped by a publish
            pass
    return total


def _read_meta(meta_file: Path) -> dict[str, Any] | None:
    """A build's ``build.json``, or None when it is missing or unreadable (a build killed while being created)."""
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _total(res: tantivy.SearchResult) -> int:
    """The hit count of a search made with ``count=True`` (tantivy's type stub lacks ``SearchResult.count``)."""
    return res.count  # type: ignore[attr-defined]


def _current_build(collection_dir: Path) -> str | None:
    meta = _read_meta(collection_dir / "CURRENT")
    return meta.get("build") if meta else None


def _guarded(method):
    """One caller at a time (the build may be used from several threads), never after publish or abort, and a
    failed write (disk full, read-only dir) becomes one ``StorageError`` line naming the path and the fix."""

    @functools.wraps(method)
    def wrapper(self: EmbeddedBuild, *args, **kwargs):
        with self._mutex:
            if not self.is_open:
                raise FlysiftError(f"Build {self.id} of collection {self._dir.name!r} is closed (published or "
                                   f"aborted); open a new one.", code="build_closed", status=409)
            try:
                return method(self, *args, **kwargs)
            except (OSError, sqlite3.Error, ValueError) as exc:
                if (err := storage_error(exc, self.path)) is None:
                    raise
                raise err from exc

    return wrapper


class EmbeddedBuild:
    """A build being written; adds are upserts by pmcid (delete, then add), so resuming re-adds harmlessly.

    The process that opens it holds ``write.lock`` until ``publish`` or ``abort``. Every method takes the build's
    own lock, so the threads of an API server can take turns with it (SQLite and the tantivy writers included).
    """

    def __init__(self, collection_dir: Path, fingerprint: str, resume: bool,
                 min_publish_share: float = MIN_PUBLISH_SHARE, threads: int | None = None,
                 repeats: dict[str, int] | None = None):
        self._dir = collection_dir
        #: how many times title, abstract and body go into the ``text`` field (the collection's field weights)
        self.repeats = dict(repeats or Bm25Params().repeats())
        self._mutex = threading.RLock()
        self.is_open = False
        self.min_publish_share = min_publish_share
        self.failures: list[Reject] = []   # tantivy indexes every validated paper: nothing is ever refused here
        self.id, self.path = "", collection_dir
        self._meta: dict[str, Any] = {}
        self._pw = self._sw = self._db = None
        try:
            (collection_dir / "builds").mkdir(parents=True, exist_ok=True)
            self._lock = open(collection_dir / "write.lock", "w")
        except OSError as exc:
            raise storage_error(exc, collection_dir) from exc  # type: ignore[misc]
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise FlysiftError(f"Another process is writing collection {collection_dir.name!r} "
                               f"(lock {collection_dir / 'write.lock'}); wait for it to finish.", code="busy",
                               status=409) from None
        self.is_open = True
        fresh = True
        try:
            found, self.state = self._find_resumable(fingerprint) if resume else (None, {})
            fresh = found is None
            self.id = found or time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
            self.path = collection_dir / "builds" / self.id
            self._meta = {"fingerprint": fingerprint, "layout": LAYOUT, "status": "building", "state": self.state,
                          "field_weights": self.repeats, "created": time.time()}
            self._drop_abandoned()
            self._papers = _open_index(self.path / "papers", "papers", create=True)
            self._passages = _open_index(self.path / "passages", "passages", create=True)
            n, heap = writer_plan(threads)
            self._pw = self._papers.writer(heap_size=heap, num_threads=n)
            self._db = _open_paper_db(self.path / "papers.db")
            self._sw = self._passages.writer(heap_size=heap, num_threads=n)
            _write_json_atomic(self.path / "build.json", self._meta)
        except BaseException as exc:
            self.abort(discard=fresh)  # a resumed build keeps what its earlier run committed
            if isinstance(exc, (OSError, sqlite3.Error, ValueError)) and (err := storage_error(exc, self.path)):
                raise err from exc
            raise

    def _find_resumable(self, fingerprint: str) -> tuple[str | None, dict[str, Any]]:
        for meta_file in sorted((self._dir / "builds").glob("*/build.json"), reverse=True):
            meta = _read_meta(meta_file)
            # a build written with other field weights would mix two scorings: not resumed (and removed below)
            if meta and meta.get("status") == "building" and meta.get("fingerprint") == fingerprint \
                    and meta.get("layout") == LAYOUT and meta.get("field_weights") == self.repeats:
                return meta_file.parent.name, meta.get("state", {})
        return None, {}

    def _drop_abandoned(self) -> None:
        """Unfinished builds of other inputs can never be published, and a folder without a readable ``build.json``
        is a build killed while it was created: remove them all (we hold the write lock, so nobody writes them)."""
        live = _current_build(self._dir)
        for folder in (self._dir / "builds").iterdir():
            if folder.name in (self.id, live) or not folder.is_dir():
                continue
            meta = _read_meta(folder / "build.json")
            if meta is None or meta.get("status") != "published":
                shutil.rmtree(folder, ignore_errors=True)

    def _writers(self) -> tuple[tantivy.IndexWriter, tantivy.IndexWriter, sqlite3.Connection]:
        """The papers and passages writers and the paper store, open from ``__init__`` until ``_release``, so
        always there inside a ``_guarded`` method."""
        assert self._pw is not None and self._sw is not None and self._db is not None
        return self._pw, self._sw, self._db

    def add(self, paper: Paper, passages: list[Passage]) -> None:
        self.add_prepared(_prepare(paper, passages))

    @_guarded
    def add_prepared(self, prepared: Prepared) -> None:
        pw, sw, db = self._writers()
        pr = prepared
        pw.delete_documents_by_term("pmcid", pr.pmcid)
        sw.delete_documents_by_term("pmcid", pr.pmcid)
        paper_store.put(db, pr.pmcid, pr.stored)
        supplement_store.put(db, pr.pmcid, pr.chunks)
        abstract = pr.passages[:pr.abstract_passages]
        body = [p for p in pr.passages[pr.abstract_passages:] if p.source == "paper"]
        doc = tantivy.Document(pmcid=pr.pmcid, head=pr.head)
        fields = {"title": pr.title,
                  "abstract": (" ".join(p.word for p in abstract), " ".join(p.symbol for p in abstract)),
                  "body": (" ".join(p.word for p in body), " ".join(p.symbol for p in body))}
        for field, (word, symbol) in fields.items():
            for _ in range(self.repeats[field] if word else 0):   # separate values: no phrase spans two
                doc.add_text("text_w", word)
                doc.add_text("text_s", symbol)
        for p in pr.passages[pr.abstract_passages + len(body):]:   # supplements: their own field, one value each
            doc.add_text("supp_w", p.word)
            doc.add_text("supp_s", p.symbol)
        for st in pr.section_types:
            doc.add_text("section_types", st)
        if pr.year is not None:
            doc.add_integer("year", pr.year)
        pw.add_document(doc)
        for p in pr.passages:
            pd = tantivy.Document(id=p.id, pmcid=pr.pmcid, section_type=p.section_type, text_w=p.word,
                                  text_s=p.symbol, doc=p.doc)
            if p.source != "paper":
                pd.add_text("source", p.source)
            if p.year is not None:
                pd.add_integer("year", p.year)
            sw.add_document(pd)

    def flush(self) -> None:
        """Nothing to send: the embedded engine refuses no paper it was given (``failures`` stays empty)."""

    @_guarded
    def commit(self, state: dict[str, Any]) -> None:
        """Make everything added so far durable, together with the caller's resume state."""
        pw, sw, db = self._writers()
        db.commit()
        pw.commit()
        sw.commit()
        self.state = state
        self._meta["state"] = state
        _write_json_atomic(self.path / "build.json", self._meta)

    @_guarded
    def count(self) -> int:
        self._papers.reload()
        return self._papers.searcher().num_docs

    @_guarded
    def passage_count(self) -> int:
        self._passages.reload()
        return self._passages.searcher().num_docs

    def live_count(self) -> int:
        """Papers in the collection's published build (0 when there is none, or it cannot be read)."""
        live = _current_build(self._dir)
        if not live or live == self.id:
            return 0
        try:
            return _open_index(self._dir / "builds" / live / "papers", "papers").searcher().num_docs
        except (OSError, ValueError):
            return 0

    @_guarded
    def publish(self, *, allow_shrink: bool = False) -> None:
        """Swap ``CURRENT`` to this build, then drop builds older than the previous one. A build the publish guard
        refuses (``BuildRefused``) stays open: add more, publish with ``allow_shrink``, or abort it."""
        pw, sw, db = self._writers()
        db.commit()
        pw.commit()
        sw.commit()
        indexed, live = self.count(), self.live_count()
        if refusal := publish_refusal(indexed, live, min_share=self.min_publish_share, allow_shrink=allow_shrink):
            raise BuildRefused(f"Build {self.id} of collection {self._dir.name!r} was not published: {refusal}.",
                               details={"build": self.id, "indexed": indexed, "live": live,
                                        "min_share": self.min_publish_share})
        pw.wait_merging_threads()
        sw.wait_merging_threads()
        self._meta.update(status="published", published=time.time())
        _write_json_atomic(self.path / "build.json", self._meta)
        _write_json_atomic(self._dir / "CURRENT", {"build": self.id})
        metas = [(_read_meta(m), m.parent) for m in (self._dir / "builds").glob("*/build.json")]
        published = sorted((meta["published"], path) for meta, path in metas
                           if meta and meta.get("status") == "published" and "published" in meta)
        for _, old in published[:-KEEP_BUILDS]:  # oldest first, by publish time (ids of one second sort at random)
            if old.name != self.id:
                shutil.rmtree(old, ignore_errors=True)
        self._release()

    def abort(self, *, discard: bool = False) -> None:
        """Stop writing. The partial build stays on disk for a later resume (the next run resumes or removes it),
        or with ``discard`` is removed now, so that a failed build never holds the disk. Safe to call twice."""
        with self._mutex:
            if self.is_open:
                for w in (self._pw, self._sw):
                    try:
                        if w is not None:
                            w.rollback()
                    except (ValueError, OSError):
                        pass
                self._release()
            if discard and self.path != self._dir and self._meta.get("status") != "published":
                shutil.rmtree(self.path, ignore_errors=True)

    def _release(self) -> None:
        self._pw = self._sw = None
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
        self.is_open = False
        fcntl.flock(self._lock, fcntl.LOCK_UN)
        self._lock.close()


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
        self.papers = _open_index(build_dir / "papers", "papers")
        self.passages = _open_index(build_dir / "passages", "passages")
        self.paper_schema = self.papers.schema
        self.passage_schema = self.passages.schema
        self.paper_searcher = self.papers.searcher()
        self.passage_searcher = self.passages.searcher()
        self.store = PaperStore(build_dir / "papers.db")
        self.supp = SupplementStore(build_dir / "papers.db")

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


class EmbeddedEngine:
    """The ``Engine`` protocol over tantivy; see the module docstring for the on-disk layout."""

    name = "embedded"

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

    def _compile(self, query: EngineQuery, schema: tantivy.Schema, fields: dict[str, float],
                 section_field: str) -> tantivy.Query:
        shoulds: list[tantivy.Query] = []
        musts: list[tantivy.Query] = []
        for clause in query.clauses:
            q = self._clause(clause, schema, fields)
            if q is None:
                continue
            (musts if clause.required else shoulds).append(q)
        if shoulds:
            musts.append(tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in shoulds]))
        if not musts:
            return tantivy.Query.empty_query()
        f = query.filters
        filters = []
        if f.year_from is not None or f.year_to is not None:
            filters.append(tantivy.Query.range_query(schema, "year", tantivy.FieldType.Integer,
                                                     f.year_from if f.year_from is not None else -(2**62),
                                                     f.year_to if f.year_to is not None else 2**62))
        if f.section_types:
            filters.append(any_of(schema, section_field, f.section_types))
        if f.pmcids:
            filters.append(any_of(schema, "pmcid", f.pmcids))
        clauses = [(tantivy.Occur.Must, q) for q in musts]
        if f.source and section_field == "section_type":   # passages: supplement ones are marked in ``source``
            if not self._read().supplements:
                if f.source == "supplement":
                    return tantivy.Query.empty_query()
            else:
                marked = tantivy.Query.term_query(schema, "source", "supplement")
                clauses.append((tantivy.Occur.Must if f.source == "supplement" else tantivy.Occur.MustNot, marked))
        clauses += [(tantivy.Occur.Must, tantivy.Query.const_score_query(q, 0.0)) for q in filters]
        return clauses[0][1] if len(clauses) == 1 else tantivy.Query.boolean_query(clauses)

    @staticmethod
    def _clause(clause: Clause, schema: tantivy.Schema, fields: dict[str, float]) -> tantivy.Query | None:
        tokens = analyze(clause.view, clause.text)
        if not tokens:
            return None
        per_field = []
        for field, boost in fields.items():
            name = field + VIEW_SUFFIX[clause.view]
            if len(tokens) == 1:
                q = tantivy.Query.term_query(schema, name, tokens[0])
            elif clause.phrase and clause.view == "word":   # the symbol view has no positions (layout 4)
                q = tantivy.Query.phrase_query(schema, name, [*tokens])
            elif clause.phrase:
                q = tantivy.Query.boolean_query([(tantivy.Occur.Must, tantivy.Query.term_query(schema, name, t))
                                                 for t in tokens])
            else:
                q = tantivy.Query.boolean_query([(tantivy.Occur.Should, tantivy.Query.term_query(schema, name, t))
                                                 for t in tokens])
            per_field.append(tantivy.Query.boost_query(q, boost) if boost != 1.0 else q)
        q = per_field[0] if len(per_field) == 1 else tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, q) for q in per_field])
        return tantivy.Query.boost_query(q, clause.boost) if clause.boost != 1.0 else q

    def _matched(self, searcher: tantivy.Searcher, schema: tantivy.Schema, query: EngineQuery,
                 fields: dict[str, float], key: str, keys: list[str],
                 addrs: list[tantivy.DocAddress]) -> dict[str, list[str]]:
        """For each hit key, the names of the named clauses it matches (one filtered query per named clause).

        A match is mapped to its hit by document address (``addrs``, the hits' own): loading the stored document of
        every (hit, name) pair cost a gene-expanded search in a session (a dozen names) more than the search."""
        out: dict[str, list[str]] = {k: [] for k in keys}
        if not keys:
            return out
        at = {(a.segment_ord, a.doc): k for k, a in zip(keys, addrs, strict=True)}
        restrict = tantivy.Query.const_score_query(any_of(schema, key, keys), 0.0)
        for clause in query.named():
            q = self._clause(clause.model_copy(update={"boost": 1.0}), schema, fields)
            if q is None or clause.name is None:
                continue
            both = tantivy.Query.boolean_query([(tantivy.Occur.Must, q), (tantivy.Occur.Must, restrict)])
            res = searcher.search(both, len(keys), count=False)
            for _, addr in res.hits:
                k = at.get((addr.segment_ord, addr.doc))
                if k is None:   # another document with a hit's key (none in a published build): read its key
                    k = searcher.doc(addr)[key][0]
                if k in out:
                    out[k].append(clause.name)
        return out

    def search_papers(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                      snippets: bool = False) -> PaperSearchResults:
        t0 = time.perf_counter()
        r = self._read()
        fields = paper_fields(r.paper_fields or self.bm25.per_field(), r.supplements, query.filters.source)
        q = self._compile(query, r.paper_schema, fields, "section_types") if fields else tantivy.Query.empty_query()
        res = r.paper_searcher.search(q, limit, count=True, offset=offset)
        docs = [(score, r.paper_searcher.doc(addr)) for score, addr in res.hits]
        papers = [(score, d["pmcid"][0], PaperHead.model_validate_json(d["head"][0])) for score, d in docs]
        matched = self._matched(r.paper_searcher, r.paper_schema, query, fields, "pmcid",
                                [pmcid for _, pmcid, _ in papers], [addr for _, addr in res.hits])
        hl = Highlighter(query.clauses, stem) if snippets else None
        best = self._best_passages(r, query, [pmcid for _, pmcid, _ in papers]) if snippets else {}
        hits = []
        for score, pmcid, p in papers:
            snips = paper_snippets(hl, p.title, p.abstract, best.get(pmcid)) if hl else []
            where = best[pmcid].supplement if pmcid in best else None
            hits.append(PaperHit(pmcid=pmcid, title=p.title, abstract=p.abstract, year=p.year, journal=p.journal,
                                 score=score, snippets=snips, matched=matched[pmcid],
                                 supplement=SupplementPlace.model_validate(where.model_dump()) if where else None))
        return PaperSearchResults(total=_total(res), offset=offset, limit=limit, hits=hits,
                                  took_ms=(time.perf_counter() - t0) * 1000)

    def _best_passages(self, r: _Reader, query: EngineQuery, pmcids: list[str]) -> dict[str, Passage]:
        """The best-scoring passage of each paper: body snippets come from it, not from a scan of the whole paper."""
        best: dict[str, Passage] = {}
        for pmcid in pmcids:
            scoped = query.model_copy(update={"filters": query.filters.model_copy(update={"pmcids": [pmcid]})})
            hits = r.passage_searcher.search(self._compile(scoped, r.passage_schema, PASSAGE_WEIGHTS, "section_type"),
                                             1, count=False).hits
            if hits:
                best[pmcid] = r.passage(r.passage_searcher.doc(hits[0][1])["doc"][0])
        return best

    def search_passages(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                        snippets: bool = True) -> PassageSearchResults:
        t0 = time.perf_counter()
        r = self._read()
        fields = PASSAGE_WEIGHTS
        q = self._compile(query, r.passage_schema, fields, "section_type")
        res = r.passage_searcher.search(q, limit, count=True, offset=offset)
        # each stored passage validated once, as a hit (a Passage first would validate the same fields twice)
        hits = [PassageHit.model_validate({**p, "passage_id": p.get("id"), "score": score})
                for score, p in ((score, r.passage_data(r.passage_searcher.doc(addr)["doc"][0]))
                                 for score, addr in res.hits)]
        matched = self._matched(r.passage_searcher, r.passage_schema, query, fields, "id",
                                [h.passage_id for h in hits], [addr for _, addr in res.hits])
        hl = Highlighter(query.clauses, stem) if snippets else None
        for h in hits:
            h.matched = matched[h.passage_id]
            h.snippet = hl.snippet("text", h.text) if hl else None
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
