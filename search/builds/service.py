"""The build service: one way to write a collection's index, for the REST API and the indexer alike.

:class:`BuildWriter` is one open build: papers go in with their passages (:func:`prepare`, the per-paper work, which
the indexer runs in worker processes), :meth:`BuildWriter.refused` flushes and hands back the papers the engine
refused (to report, never to count as indexed), :meth:`~BuildWriter.commit` saves the resume state,
:meth:`~BuildWriter.publish` makes the build live unless the engine's publish guard objects (``BuildRefused``: the
live build keeps serving), :meth:`~BuildWriter.abort` keeps it for a resume or removes it.

:class:`BuildService` opens writers (:meth:`~BuildService.open`: the indexer's runs) and keeps the REST API's open
builds of this process by (collection, build id): one writer per collection (the engine's lock), one API call at a
time per build (the entry's ``turn``), whatever thread runs it. A call that fails (other than a publish the guard
refused) aborts the build, a build unused for ``idle_timeout_s`` is aborted by the next build call, and an abort on
request removes one: no failed or forgotten request keeps a collection locked.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from search.core import names
from search.core.errors import FlysiftError
from search.core.models import IndexSummary, Paper, Passage, Reject
from search.engines import Build, BuildRefused, Engine
from search.text.passages import split_passages


def prepare(paper: Paper, preparer: Callable[[Paper, list[Passage]], Any],
            supplement_passages: Iterable[Passage] = ()) -> tuple[int, Any]:
    """The per-paper work of a build that needs no writer: the paper's passages (then those of its supplementary
    files, which the indexer's sources extract), and the engine's prepared form of them (``Engine.preparer``;
    picklable, so it may run in another process). Returns the passage count with it."""
    passages = split_passages(paper) + list(supplement_passages)
    return len(passages), preparer(paper, passages)


class BuildWriter:
    """One open build of one collection, as both write paths use it."""

    def __init__(self, build: Build, collection: str):
        self.build, self.collection = build, collection

    @property
    def id(self) -> str:
        return self.build.id

    @property
    def state(self) -> dict[str, Any]:
        """The resume state saved with the last commit (empty for a fresh build)."""
        return self.build.state

    def add(self, paper: Paper) -> int:
        """Add (or replace, by pmcid) one paper with its passages, all in this process; returns its passage count."""
        passages = split_passages(paper)
        self.build.add(paper, passages)
        return len(passages)

    def add_prepared(self, prepared: Any) -> None:
        """Add a paper :func:`prepare` made (possibly in another process)."""
        self.build.add_prepared(prepared)

    def refused(self) -> list[Reject]:
        """Send what is buffered and hand back the papers the engine refused since the last call (a cluster's
        mapping conflict; one ``Reject`` naming the field each). Call it before :meth:`commit` saves the resume
        state, so every refusal up to there is recorded."""
        self.build.flush()
        out = list(self.build.failures)
        self.build.failures.clear()
        return out

    def commit(self, state: dict[str, Any]) -> None:
        self.build.commit(state)

    def count(self) -> int:
        return self.build.count()

    def publish(self, *, allow_shrink: bool = False) -> None:
        """Make the build live, unless the publish guard objects (``BuildRefused``: the build stays open)."""
        self.build.publish(allow_shrink=allow_shrink)

    def abort(self, *, discard: bool = False) -> None:
        """Stop writing: keep the partial build for a resume, or remove it (``discard``)."""
        self.build.abort(discard=discard)


@dataclass
class _OpenBuild:
    writer: BuildWriter
    used: float = field(default_factory=time.monotonic)  # when the last call on it ended
    users: int = 0  # calls holding or waiting for its turn: an entry in use never expires
    turn: threading.Lock = field(default_factory=threading.Lock)


class BuildService:
    """Opens builds through ``engine(collection)`` (the configured engine of a collection, which checks the name)
    and keeps the REST API's open builds."""

    def __init__(self, engine: Callable[[str], Engine], idle_timeout_s: float):
        self.engine = engine
        self.idle_timeout_s = idle_timeout_s
        self._open: dict[tuple[str, str], _OpenBuild] = {}
        #: guards ``_open`` (taking, adding, expiring entries); never held while a build works
        self._lock = threading.Lock()

    def open(self, collection: str, fingerprint: str, *, resume: bool = True) -> BuildWriter:
        """A new build of ``collection`` (or the interrupted one with this ``fingerprint``, when ``resume``)."""
        return BuildWriter(self.engine(collection).open_build(fingerprint, resume=resume), collection)

    # ---- the REST API's open builds ------------------------------------------------------------------------------
    def create(self, collection: str) -> str:
        """Open a new build of the collection for API calls (one at a time per collection); returns its id."""
        eng = self.engine(collection)
        self._expire_idle()
        with self._lock:
            held = [b for c, b in self._open if c == collection]
        if held:
            raise FlysiftError(f"Collection {collection!r} already has an open build {held[0]!r}: publish it, or abort "
                               f"it with DELETE /v1/collections/{collection}/builds/{held[0]}.", code="busy",
                               status=409, details={"build_id": held[0]})
        build = eng.open_build(fingerprint=hashlib.sha256(f"api:{collection}".encode()).hexdigest(), resume=False)
        with self._lock:
            self._open[(collection, build.id)] = _OpenBuild(BuildWriter(build, collection))
        return build.id

    def add_papers(self, collection: str, build_id: str, papers: Iterable[Paper]) -> dict[str, Any]:
        """Add (or replace, by pmcid) papers in an open build: ``{indexed, passages, rejected}``. A write that fails
        aborts the build; a paper the engine refuses is left out and listed in ``rejected``, naming the field."""
        with self._using(collection, build_id) as writer:
            added = passages = 0
            for paper in papers:
                passages += writer.add(paper)
                added += 1
            refused = [r.model_dump(exclude_none=True) for r in writer.refused()]
            writer.commit({})
        return {"indexed": added - len(refused), "passages": passages, "rejected": refused}

    def publish(self, collection: str, build_id: str, *, allow_shrink: bool = False) -> IndexSummary:
        """Make an open build the one searches see (``BuildRefused`` leaves it open)."""
        with self._using(collection, build_id, closes=True) as writer:
            n = writer.count()
            writer.publish(allow_shrink=allow_shrink)
        return IndexSummary(read=n, indexed=n, build=build_id)

    def abort(self, collection: str, build_id: str) -> None:
        """Abort an open build: its files are removed and the collection unlocks; the live build keeps serving."""
        with self._using(collection, build_id, closes=True):
            pass  # leaving the registry aborts and removes it

    def _expire_idle(self) -> None:
        """Abort and forget the builds unused for ``idle_timeout_s``, so their collections unlock."""
        with self._lock:
            now = time.monotonic()
            stale = [self._open.pop(key) for key, e in list(self._open.items())
                     if not e.users and now - e.used >= self.idle_timeout_s]
        for entry in stale:
            entry.writer.abort(discard=True)

    @contextmanager
    def _using(self, collection: str, build_id: str, *, closes: bool = False) -> Iterator[BuildWriter]:
        """The open build ``build_id`` of ``collection``, for this call alone; ``closes``: a success ends it."""
        self.engine(collection)  # checks the collection name
        self._expire_idle()
        key = (collection, build_id)
        with self._lock:
            names.lookup("build_id", build_id, [b for c, b in self._open if c == collection], field="build_id",
                         hint=f"collection {collection!r} has no open build with this id (published, aborted or idle "
                              f"too long); open one with POST /v1/collections/{collection}/builds")
            entry = self._open[key]
            entry.users += 1
        keep = False
        try:
            with entry.turn:
                yield entry.writer
            keep = not closes
        except BuildRefused:
            keep = True  # the build is intact and open: add papers, publish with allow_shrink, or abort it
            raise
        finally:
            with self._lock:
                entry.users -= 1
                entry.used = time.monotonic()
                if not keep and self._open.get(key) is entry:
                    del self._open[key]
            if not keep:
                entry.writer.abort(discard=True)  # after a publish, a no-op; after a failure, frees lock and disk
