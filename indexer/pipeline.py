"""The indexing run: sources → validated papers → passages → an engine build, with nothing lost.

Every input record ends up either in the index or as a line of the rejects report (JSONL of
``search.core.models.Reject``).
The run commits every ``commit_every`` records together with its resume state (records consumed, counters, the
pmcids seen and the rejects file length), so a killed run continues where it committed; adds are upserts, so records
after the last commit are simply added again. The new index becomes visible only when the whole run publishes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from indexer.sources import IdMap, count_records, iter_records
from search.core.config import Settings
from search.core.errors import InputError, Unavailable
from search.core.models import IndexSummary, Reject
from search.engines import BuildRefused, open_engine, storage_error
from search.text.passages import split_passages

log = logging.getLogger("flysift.indexer")

COMMIT_EVERY = 2000


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


def index_corpus(paths: list[Path], settings: Settings, *, fmt: str = "auto", id_map: Path | None = None,
                 strict: bool = False, resume: bool = True, collection: str = "default",
                 commit_every: int = COMMIT_EVERY, progress: Callable[[int, int | None], None] | None = None,
                 warn: Callable[[str], None] = log.warning, allow_shrink: bool = False) -> IndexSummary:
    """Index ``paths`` into a new build of ``collection`` and publish it. ``progress(done, total)`` is called often.

    Nothing is published when the inputs held no record, every record was rejected, or the build is much smaller
    than the live one (``BuildRefused``; ``allow_shrink`` lets a smaller one through). A run that fails removes its
    build, so it never holds the disk; an interrupted one (Ctrl-C, cluster unavailable) keeps it for the next run to
    resume. Failed writes (disk full, read-only data dir) raise ``StorageError``: one line with the path and the fix.
    """
    t0 = time.perf_counter()
    engine = open_engine(settings, collection=collection)
    idmap = IdMap.load(id_map) if id_map else None
    total = count_records(paths, fmt)  # also checks paths and format before a build is opened
    build = engine.open_build(fingerprint(paths, fmt, id_map), resume=resume)
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
        for failure in build.failures:  # papers the engine refused (a cluster's mapping conflicts)
            reject(failure)
        build.failures.clear()
        assert rejects is not None
        rejects.flush()
        build.commit({"consumed": n, **counts, "seen": sorted(seen), "rejects_bytes": rejects.tell()})

    rejects: BinaryIO | None = None
    n = 0
    try:
        rejects_path.parent.mkdir(parents=True, exist_ok=True)
        rejects = open(rejects_path, "a+b")
        rejects.truncate(state.get("rejects_bytes", 0))
        rejects.seek(0, 2)
        for n, item in enumerate(iter_records(paths, fmt=fmt, id_map=idmap), start=1):
            if n <= consumed:
                continue
            counts["read"] += 1
            for w in item.warnings:
                warn(f"{item.source}, record {item.record}: {w}")
            if item.reject is not None:
                reject(item.reject)
            elif (paper := item.paper) is not None:  # a source item is a paper or a reject
                if paper.pmcid in seen:
                    counts["duplicates"] += 1
                    warn(f"{item.source}, record {item.record}: duplicate pmcid {paper.pmcid}; the last one wins")
                seen.add(paper.pmcid)
                passages = split_passages(paper)
                counts["passages"] += len(passages)
                build.add(paper, passages)
            if n % commit_every == 0:
                commit(n)
            if progress:
                progress(n, total)
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
