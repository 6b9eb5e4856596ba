"""The indexing run: sources → validated papers → passages → an engine build, with nothing lost.

Every input record ends up either in the index or as a line of the rejects report (JSONL of
``search.core.models.Reject``). The run is an adapter of the build service (``search.builds.service``): it opens a
``BuildWriter``, adds what the workers prepared (``search.builds.service.prepare``), records the engine's refusals
and publishes through it, as the REST build routes do.
The run commits every ``commit_every`` records together with its resume state (records consumed, counters, the
pmcids seen and the rejects file length), so a killed run continues where it committed; adds are upserts, so records
after the last commit are simply added again. The new index becomes visible only when the whole run publishes.

Work per record (parsing, validation, passage splitting, the engine's ``preparer``) runs in a pool of worker
processes when ``workers`` > 1: the main process only reads raw units (``indexer.sources.Unit``) and hands them out in
chunks, and takes the results back in input order, a bounded number of chunks in flight, to the one writer. So resume
points, "the last one wins" and the rejects report are the same whatever the number of workers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO

from indexer.sources import IdMap, Unit, iter_units, parse_unit
from search.builds.service import prepare
from search.core.errors import InputError, Unavailable
from search.core.models import IndexSummary, Paper, Passage, Reject
from search.core.names import DEFAULT_COLLECTION
from search.core.stops import StopSignal
from search.engines import BuildRefused, storage_error
from search.services import Services

log = logging.getLogger("flysift.indexer")

COMMIT_EVERY = 2000
#: the default number of workers is the usable CPUs, at most this many (one writer takes what they prepare)
MAX_DEFAULT_WORKERS = 8
#: inputs smaller than this are indexed in process unless workers are asked for: starting a pool costs more
POOL_MIN_BYTES = 4 << 20
#: a chunk of units sent to a worker closes at this many units or this many input bytes
CHUNK_UNITS = 32
CHUNK_BYTES = 2 << 20
#: chunks in flight per worker (sent and not yet taken back): bounds memory, keeps every worker busy
IN_FLIGHT_PER_WORKER = 2
#: how often a wait for a chunk looks whether a worker died (seconds)
WATCH_S = 1.0


def default_workers() -> int:
    """The CPUs this process may use, capped at ``MAX_DEFAULT_WORKERS``."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_DEFAULT_WORKERS))


@dataclass(slots=True)
class Ready:
    """One record after the per-record work: a reject, or a paper's pmcid and the engine's prepared form of it."""

    source: str
    record: int
    end: int
    pmcid: str | None = None
    reject: Reject | None = None
    warnings: list[str] = field(default_factory=list)
    passages: int = 0
    prepared: Any = None


def prepare_unit(unit: Unit, preparer: Callable[[Paper, list[Passage]], Any]) -> Ready:
    """Parse and validate one unit, split its paper into passages and prepare it for the engine's writer."""
    item = parse_unit(unit)
    if item.paper is None:
        return Ready(item.source, item.record, unit.end, reject=item.reject, warnings=item.warnings)
    passages, prepared = prepare(item.paper, preparer, item.supplement_passages)
    return Ready(item.source, item.record, unit.end, item.paper.pmcid, None, item.warnings, passages, prepared)


def prepare_chunk(units: list[Unit], preparer: Callable[[Paper, list[Passage]], Any]) -> list[Ready]:
    """``prepare_unit`` over a chunk, in a worker process (one pickling round trip per chunk)."""
    return [prepare_unit(u, preparer) for u in units]


def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the main process, which stops them after their chunk and keeps the build."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _chunks(units: Iterable[Unit]) -> Iterator[list[Unit]]:
    chunk: list[Unit] = []
    start = None
    for unit in units:
        if start is None:
            start = unit.end
        chunk.append(unit)
        if len(chunk) >= CHUNK_UNITS or unit.end - start >= CHUNK_BYTES:
            yield chunk
            chunk, start = [], None
    if chunk:
        yield chunk


class Preparing:
    """Runs ``prepare_unit`` over the units, in process (``workers == 1``) or in a pool of worker processes, and
    yields the results in input order. ``close`` (or leaving the ``with`` block) stops the pool: chunks not started
    are cancelled, running ones finish. A worker that dies breaks the run with ``Unavailable`` (the build is kept)."""

    def __init__(self, workers: int, preparer: Callable[[Paper, list[Passage]], Any]):
        self.workers = workers
        self.preparer = preparer
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> Preparing:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def run(self, units: Iterable[Unit]) -> Iterator[Ready]:
        if self.workers <= 1:
            for unit in units:
                yield prepare_unit(unit, self.preparer)
            return
        pending: deque[Future[list[Ready]]] = deque()
        try:
            for chunk in _chunks(units):
                pending.append(self._start().submit(prepare_chunk, chunk, self.preparer))
                if len(pending) >= IN_FLIGHT_PER_WORKER * self.workers:
                    yield from self._result(pending.popleft())
            while pending:
                yield from self._result(pending.popleft())
        except BrokenProcessPool as exc:
            raise Unavailable("an indexing worker process stopped unexpectedly (killed, out of memory, or it could "
                              "not start); the build is kept: run the same command again to resume it (--workers 1 "
                              "indexes without worker processes)") from exc

    def _result(self, future: Future[list[Ready]]) -> list[Ready]:
        """A chunk's results. The wait looks at the workers itself every ``WATCH_S``: CPython's pool notices a dead
        worker by itself, except when it died half-way through sending a result (a big chunk, an OOM kill): the
        pool's manager thread then waits for the rest of that message for ever, and so would this run and its
        Ctrl-C (tests/indexer/test_pipeline_pool.py)."""
        while True:
            try:
                return future.result(timeout=WATCH_S)
            except FutureTimeout:
                if self._lost_worker():
                    self._abandon()
                    raise BrokenProcessPool("a worker process died while the pool waited for it") from None

    def _lost_worker(self) -> bool:
        processes = getattr(self._pool, "_processes", None) or {}
        return any(p.exitcode is not None for p in list(processes.values()))

    def _abandon(self) -> None:
        """Stop a pool that lost a worker without waiting for it: kill the other workers, and close this process's
        end of the result pipe, so that the manager thread's read ends (end of file) and the pool shuts down."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        for p in list((getattr(pool, "_processes", None) or {}).values()):
            p.kill()
        writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)
        if writer is not None:
            writer.close()
        pool.shutdown(wait=False, cancel_futures=True)

    def _start(self) -> ProcessPoolExecutor:
        """The pool, started at the first chunk. Workers are spawned, not forked: this process may run the engine's
        writer threads, and spawned workers are its own children, so their CPU time counts as this run's."""
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_ignore_sigint)
        return self._pool


def fingerprint(paths: Iterable[Path], fmt: str, id_map: Path | None) -> str:
    """Identifies an input set (paths, sizes, mtimes, format, id map): a rerun on the same input resumes."""
    h = hashlib.sha256(fmt.encode())
    for p in sorted(Path(x).resolve() for x in paths):
        files = sorted(p.rglob("*")) if p.is_dir() else [p]
        for f in files:
            if f.is_file():
                st = f.stat()
                h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    if id_map:
        h.update(Path(id_map).read_bytes())
    return h.hexdigest()[:16]


def index_corpus(paths: list[Path], services: Services, *, fmt: str = "auto", id_map: Path | None = None,
                 strict: bool = False, resume: bool = True, collection: str = DEFAULT_COLLECTION,
                 commit_every: int = COMMIT_EVERY, progress: Callable[[int, int | None], None] | None = None,
                 warn: Callable[[str], None] = log.warning, allow_shrink: bool = False,
                 workers: int | None = None) -> IndexSummary:
    """Index ``paths`` into a new build of ``collection`` and publish it.

    ``progress(done, total)`` is called often; ``total`` is estimated from the input bytes read so far (None until
    a record is read) and is exact at the last call. ``workers`` processes do the per-record work (1: all in this
    process); default ``settings.index_workers``, else the usable CPUs (``default_workers``), or 1 for inputs under
    ``POOL_MIN_BYTES``. Workers are spawned, so a script calling this with a pool needs the usual
    ``if __name__ == "__main__":`` guard.

    Nothing is published when the inputs held no record, every record was rejected, or the build is much smaller
    than the live one (``BuildRefused``; ``allow_shrink`` lets a smaller one through). A run that fails removes its
    build, so it never holds the disk; an interrupted one (Ctrl-C or SIGTERM, which stop it after the record in hand;
    cluster unavailable) keeps it for the next run to resume. Failed writes (disk full, read-only data dir) raise
    ``StorageError``: one line with the path and the fix.
    """
    t0 = time.perf_counter()
    settings = services.settings
    preparer = services.engine(collection).preparer()
    idmap = IdMap.load(id_map) if id_map else None
    units = iter_units(paths, fmt, idmap)  # checks paths and format before a build is opened
    workers = workers or settings.index_workers or (
        default_workers() if units.total_bytes >= POOL_MIN_BYTES else 1)
    build = services.builds.open(collection, fingerprint(paths, fmt, id_map), resume=resume)
    state = dict(build.state)
    consumed = state.get("consumed", 0)
    counts = {k: state.get(k, 0) for k in ("read", "rejected", "duplicates", "passages")}
    seen: set[str] = set(state.get("seen", []))
    rejects_path = Path(settings.data_dir) / "rejects" / f"{collection}-{build.id}.jsonl"
    first_reject: list[str] = []
    if consumed:
        log.info("resuming build %s after %d records", build.id, consumed)

    def reject(r: Reject) -> None:
        assert rejects is not None  # opened before the first record is read
        rejects.write((r.model_dump_json() + "\n").encode())
        counts["rejected"] += 1
        if not first_reject:
            first_reject.append(f"{r.source}, record {r.record}: {r.reason}"[:200])
        if strict:
            raise InputError(f"{r.source}, record {r.record}, field {r.field or '-'}: {r.reason}", source=r.source,
                             record=r.record, field=r.field, pmcid=r.pmcid)

    def commit(n: int) -> None:
        for failure in build.refused():  # papers the engine refused (a cluster's mapping conflicts), recorded before
            reject(failure)               # the resume state is saved
        assert rejects is not None
        rejects.flush()
        build.commit({"consumed": n, **counts, "seen": sorted(seen), "rejects_bytes": rejects.tell()})

    rejects: BinaryIO | None = None
    n = consumed
    preparing = Preparing(workers, preparer)
    stop = StopSignal()   # Ctrl-C or SIGTERM: stop after the record in hand, keep the build (a second one: at once)
    try:
        rejects_path.parent.mkdir(parents=True, exist_ok=True)
        rejects = open(rejects_path, "a+b")  # noqa: SIM115 - written all run long, closed in the finally
        rejects.truncate(state.get("rejects_bytes", 0))
        rejects.seek(0, 2)
        # records up to the last commit are read again but neither parsed nor added
        for n, item in enumerate(preparing.run(islice(units, consumed, None)), start=consumed + 1):
            stop.check()
            counts["read"] += 1
            for w in item.warnings:
                warn(f"{item.source}, record {item.record}: {w}")
            if item.reject is not None:
                reject(item.reject)
            elif item.pmcid is not None:  # a record is a paper or a reject
                if item.pmcid in seen:
                    counts["duplicates"] += 1
                    warn(f"{item.source}, record {item.record}: duplicate pmcid {item.pmcid}; the last one wins")
                seen.add(item.pmcid)
                counts["passages"] += item.passages
                build.add_prepared(item.prepared)
            if n % commit_every == 0:
                commit(n)
            if progress:
                progress(n, max(n, n * units.total_bytes // item.end) if item.end else None)
        preparing.close()  # every worker's part is done: free their memory before the writer's last commit
        if progress and n:
            progress(n, n)
        commit(n)
        indexed = build.count()
        if counts["read"] == 0 and not consumed:
            raise BuildRefused(f"Nothing was published: the inputs ({_names(paths)}) hold no records.",
                               details={"read": 0})
        if indexed == 0:
            raise BuildRefused(f"Nothing was published: all {counts['rejected']} records were rejected (first: "
                               f"{first_reject[0] if first_reject else '-'}); see {rejects_path}.",
                               details={"read": counts["read"], "rejected": counts["rejected"]})
        build.publish(allow_shrink=allow_shrink)
    except (KeyboardInterrupt, SystemExit, Unavailable):
        build.abort()  # resumable: the next run of the same input continues from the last commit
        raise
    except BaseException as exc:
        build.abort(discard=True)
        if isinstance(exc, OSError) and (err := storage_error(exc, rejects_path)):
            raise err from exc
        raise
    finally:
        stop.restore()
        preparing.close()  # chunks not started are dropped, running ones finish (workers ignore Ctrl-C)
        if rejects is not None:
            rejects.close()
    return IndexSummary(read=counts["read"], indexed=indexed, rejected=counts["rejected"],
                        duplicates=counts["duplicates"], passages=counts["passages"],
                        seconds=round(time.perf_counter() - t0, 3), build=build.id, rejects_file=str(rejects_path),
                        resumed_from=consumed)


def _names(paths: Iterable[Path]) -> str:
    """At most three input names for a message."""
    names = [str(p) for p in paths]
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def summary_line(summary: IndexSummary) -> str:
    return json.dumps({k: getattr(summary, k) for k in ("read", "indexed", "rejected", "duplicates", "seconds")})
