"""The ``Engine`` protocol and the factory that picks an implementation from the settings.

Write side: ``open_build`` returns a ``Build`` that papers (with their passages) are added to; ``publish`` makes it
the live index atomically (a killed build leaves the previous one serving). Read side: paper and passage search
from an ``EngineQuery``, paper fetch, term search and stats. Ontology terms live in their own per-ontology index,
replaced as a whole by ``write_terms``.

The publish guard lives here, for every engine and every caller (indexer, API): a build that holds no paper, or
less than ``min_publish_share`` of the live build's papers (unless ``allow_shrink``), is refused and the live build
keeps serving. So does the translation of a failed write (disk full, read-only data dir) into one line that names
the path and the fix.
"""

from __future__ import annotations

import errno
import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from search.core.errors import FlysiftError
from search.core.models import IndexStats, Paper, PaperSearchResults, Passage, PassageSearchResults, Term, TermHit
from search.core.query import EngineQuery

if TYPE_CHECKING:
    from search.core.config import Settings

#: refuse to publish a build holding less than this share of the live build's papers (``--allow-shrink`` overrides)
MIN_PUBLISH_SHARE = 0.5


class BuildRefused(FlysiftError):
    """A build that must not replace the live one (empty, or much smaller); the live build keeps serving."""

    status = 409
    code = "build_refused"


class StorageError(FlysiftError):
    """Writing a build failed for a reason outside flysift (disk full, read-only data dir): the operator must act."""

    status = 507
    code = "storage_error"


def publish_refusal(indexed: int, live: int, *, min_share: float = MIN_PUBLISH_SHARE,
                    allow_shrink: bool = False) -> str | None:
    """Why a build of ``indexed`` papers must not replace a live build of ``live`` papers, or None when it may.

    An empty build is never published (``allow_shrink`` does not cover it): it would take every paper away.
    """
    if indexed <= 0:
        return (f"the build holds no papers; the live build ({live} papers) keeps serving" if live
                else "the build holds no papers")
    if not allow_shrink and live and indexed < min_share * live:
        return (f"the build holds {indexed} papers, less than {min_share:.0%} of the {live} the live build holds; "
                f"the live build keeps serving (--allow-shrink, or allow_shrink=true over the API, publishes it "
                f"anyway)")
    return None


_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_READ_ONLY = {errno.EACCES, errno.EPERM, errno.EROFS}
#: tantivy reports OS errors as ValueError("... (os error 28) ...")
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def storage_error(exc: BaseException, path: Path | str) -> StorageError | None:
    """``exc`` as one clear line naming ``path`` and the fix, when it is a failed write (OSError, SQLite, tantivy);
    None for any other exception (a bug must keep its traceback)."""
    if isinstance(exc, StorageError):
        return exc
    code: int | None = None
    if isinstance(exc, OSError):
        code, detail = exc.errno, exc.strerror or str(exc)
        path = exc.filename or path
    elif isinstance(exc, sqlite3.OperationalError):
        name = getattr(exc, "sqlite_errorname", "") or ""
        if name.startswith("SQLITE_FULL"):
            code = errno.ENOSPC
        elif name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN")):
            code = errno.EACCES
        elif not name.startswith("SQLITE_IOERR"):
            return None
        detail = str(exc)
    elif isinstance(exc, ValueError) and (m := _RUST_OS_ERROR.search(str(exc))):
        code, detail = int(m.group(1)), str(exc)[:200]
    else:
        return None
    where = f"Cannot write {path}: {detail}" + (f" ({errno.errorcode[code]})" if code in errno.errorcode else "")
    if code in _FULL:
        return StorageError(f"{where}. The disk is full: free space there (failed builds have been removed) or "
                            f"set --data-dir / FLYSIFT_DATA_DIR to a disk with room.", code="storage_full",
                            details={"path": str(path)})
    if code in _READ_ONLY:
        return StorageError(f"{where}. The data directory is not writable: make it writable for this user (or "
                            f"mount it read-write), or set --data-dir / FLYSIFT_DATA_DIR to a writable folder.",
                            code="storage_read_only", status=503, details={"path": str(path)})
    return StorageError(f"{where}. Check that disk (space, health) or set --data-dir / FLYSIFT_DATA_DIR to another "
                        f"folder.", details={"path": str(path)})


class Build(Protocol):
    """An index version being written. Adds are upserts by pmcid, so re-adding after a resume is harmless."""

    id: str
    #: opaque resume state saved with the last commit (e.g. how many input records were consumed)
    state: dict[str, Any]

    def add(self, paper: Paper, passages: list[Passage]) -> None: ...
    def commit(self, state: dict[str, Any]) -> None: ...
    def count(self) -> int: ...

    def publish(self, *, allow_shrink: bool = False) -> None:
        """Make this build live, unless ``publish_refusal`` objects (``BuildRefused``; the build stays open)."""

    def abort(self, *, discard: bool = False) -> None:
        """Stop writing; keep the partial build for a resume, or remove it (``discard``) so it holds no disk."""


class Engine(Protocol):
    name: str

    def open_build(self, fingerprint: str, resume: bool = True) -> Build: ...

    def search_papers(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                      snippets: bool = True) -> PaperSearchResults: ...
    def search_passages(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                        snippets: bool = True) -> PassageSearchResults: ...
    def get_paper(self, pmcid: str) -> Paper | None: ...
    def stats(self) -> IndexStats: ...

    def write_terms(self, ontology: str, terms: Iterable[Term]) -> int: ...
    def search_terms(self, ontology: str, query: str, *, aspect: str | None = None, limit: int = 10,
                     exclude_ids: set[str] | frozenset[str] = frozenset(),
                     include_obsolete: bool = False) -> list[TermHit]: ...
    def close(self) -> None: ...


def open_engine(settings: "Settings", *, collection: str = "default") -> Engine:
    """The engine the settings ask for: embedded unless a cluster URL (or ``engine = "cluster"``) is configured.

    A collection is an independent corpus (the FlyAOC papers are ``default``; IR test collections get their own).
    """
    if settings.engine_kind == "cluster":
        from search.engines.cluster.engine import ClusterEngine

        return ClusterEngine(settings, collection=collection)
    from search.engines.embedded.engine import EmbeddedEngine

    return EmbeddedEngine(settings.data_dir, collection=collection, min_publish_share=settings.min_publish_share)
