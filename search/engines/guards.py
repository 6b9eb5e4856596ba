"""The guards every engine applies to its builds, for every caller (indexer, API).

The publish guard: a build that holds no paper, or less than ``min_publish_share`` of the live build's papers (unless
``allow_shrink``), is refused and the live build keeps serving. The storage guard: a failed write (disk full,
read-only data dir) becomes one line that names the path and the fix, instead of a traceback.
"""

from __future__ import annotations

import errno
import re
import sqlite3
from pathlib import Path

from search.core.errors import FlysiftError

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
                    allow_shrink: bool = False, items: str = "papers", what: str = "build",
                    override: str = "--allow-shrink, or allow_shrink=true over the API,") -> str | None:
    """Why a build of ``indexed`` papers must not replace a live build of ``live`` papers, or None when it may.

    An empty build is never published (``allow_shrink`` does not cover it): it would take every paper away. The same
    rule guards an ontology's re-index (``items="terms"``, ``what="index"``): a 1-term file indexed as ``go`` would
    otherwise serve one GO term at once.
    """
    if indexed <= 0:
        return (f"the {what} holds no {items}; the live {what} ({live} {items}) keeps serving" if live
                else f"the {what} holds no {items}")
    if not allow_shrink and live and indexed < min_share * live:
        return (f"the {what} holds {indexed} {items}, less than {min_share:.0%} of the {live} the live {what} "
                f"holds; the live {what} keeps serving ({override} publishes it anyway)")
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
    symbol = errno.errorcode.get(code) if code is not None else None
    where = f"Cannot write {path}: {detail}" + (f" ({symbol})" if symbol else "")
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
