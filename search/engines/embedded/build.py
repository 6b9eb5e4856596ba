"""The write side of the embedded engine: ``EmbeddedBuild`` (a build being written beside the published one, resumed,
published behind the publish guard, or aborted), the per-paper work prepared apart from the writer (``_prepare``,
run in the indexer's worker processes), and how many writer threads and how much heap a build takes
(``writer_plan``)."""


from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import tantivy

from search.core.errors import FlysiftError
from search.core.models import (
    Paper,
    Passage,
    Reject,
)
from search.core.query import (
    Bm25Params,
)
from search.engines.embedded import paper_store, supplement_store
from search.engines.embedded.layout import (
    KEEP_BUILDS,
    LAYOUT,
    _current_build,
    _open_index,
    _open_paper_db,
    _read_meta,
    _write_json_atomic,
)
from search.engines.embedded.prepare import Prepared, _prepare
from search.engines.guards import MIN_PUBLISH_SHARE, BuildRefused, publish_refusal, storage_error

T = TypeVar("T")
#: tantivy's indexing heap of one writer thread: a thread writes a segment each time it fills, so a larger heap means
#: fewer segments to merge; bounded so that both writers' threads stay within a share of the machine's memory.
#: 128 MB: a full FlyAOC-size build (16,898 papers, 2 cores) allocated 571 MiB at its peak instead of 1.36 GiB with
#: 256 MB, for 3 % more CPU (398 vs 387 s) and 1 % more index (bench/bench_indexing.py --full, CHANGELOG.md)
MAX_THREAD_HEAP = 128_000_000
MIN_THREAD_HEAP = 16_000_000          # tantivy refuses less than 15 MB per thread
MAX_WRITER_THREADS = 8                # tantivy's own default cap
MEMORY_SHARE = 8                      # both writers' heaps together take at most 1/8 of the available memory



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


def _guarded(method: Callable[..., T]) -> Callable[..., T]:
    """One caller at a time (the build may be used from several threads), never after publish or abort, and a
    failed write (disk full, read-only dir) becomes one ``StorageError`` line naming the path and the fix."""

    @functools.wraps(method)
    def wrapper(self: EmbeddedBuild, *args: Any, **kwargs: Any) -> T:
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
            self._lock = open(collection_dir / "write.lock", "w")  # noqa: SIM115 - held until publish or abort
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
            if field != "body" and word:   # title:, abstract: (layout 7)
                doc.add_text(field + "_w", word)
                doc.add_text(field + "_s", symbol)
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
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
        self.is_open = False
        fcntl.flock(self._lock, fcntl.LOCK_UN)
        self._lock.close()
