"""Checks made before any library opens a file: a hostile container is refused with one line, not handed on.

* **Zip containers** (XLSX, DOCX, ODS): member count, names (absolute or ``..``: path traversal), and the bytes the
  members really unpack to, measured by inflating them here with a running count (a zip bomb's headers may lie about
  its sizes), against ``Limits.max_unzipped_bytes`` and ``Limits.max_zip_ratio``. XML members that declare a DTD or
  entities are refused: Office XML never has them, and entity expansion (billion laughs) is how XML bombs work.
* **OLE2 files** (legacy ``.xls``/``.doc``, and password-protected OOXML, which is an OLE2 file holding an
  ``EncryptedPackage`` stream): encryption is told apart from damage.
* **Member names of packages** (``safe_member_name``): what a ``.tar.gz`` package may hold.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path, PurePosixPath

from indexer.supplements.limits import Limits

#: Office XML never declares these; an XML bomb needs them
_DTD_MARKS = (b"<!DOCTYPE", b"<!ENTITY")
_HEAD_BYTES = 4096
_READ = 1 << 16


class Refused(Exception):
    """A file that must not be read further: ``status`` (``refused``, ``too_large``, ``corrupt``, ``encrypted``)
    and a one-line reason."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def safe_member_name(name: str) -> str | None:
    """Why an archive member name is unsafe (absolute, ``..``, backslashes, control characters), or None."""
    if not name or len(name) > 1024:
        return "an empty or over-long name"
    if any(ord(c) < 32 for c in name) or "\\" in name:
        return "control characters or backslashes in its name"
    p = PurePosixPath(name)
    if p.is_absolute() or name.startswith("/"):
        return "an absolute name"
    if ".." in p.parts:
        return "a name that climbs out of the package (..)"
    return None


def check_zip(path: Path, limits: Limits) -> None:
    """Raise ``Refused`` for a zip container that is unsafe to hand to a reader; return when it is fine."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise Refused("corrupt", f"not a readable zip container ({str(exc)[:120]})") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > limits.max_zip_members:
            raise Refused("refused", f"zip container with {len(infos):,} members (limit {limits.max_zip_members:,})")
        compressed = sum(i.compress_size for i in infos)
        total = 0
        for info in infos:
            if why := safe_member_name(info.filename):
                raise Refused("refused", f"zip member {info.filename[:80]!r} has {why}")
            if info.flag_bits & 0x1:
                raise Refused("encrypted", "the zip container's members are encrypted")
            total += _inflated(zf, info, limits, total, compressed)


def _inflated(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limits: Limits, before: int, compressed: int) -> int:
    """Bytes one member really unpacks to, counted while inflating (stops at the first bound it passes)."""
    size = 0
    head = b""
    try:
        with zf.open(info) as fh:
            while chunk := fh.read(_READ):
                size += len(chunk)
                if len(head) < _HEAD_BYTES:
                    head += chunk[:_HEAD_BYTES - len(head)]
                total = before + size
                if total > limits.max_unzipped_bytes:
                    raise Refused("refused", f"zip bomb: members unpack to more than {limits.max_unzipped_bytes:,} "
                                             f"bytes")
                if total > 10 << 20 and total > limits.max_zip_ratio * max(compressed, 1):
                    raise Refused("refused", f"zip bomb: members unpack to over {limits.max_zip_ratio} times their "
                                             f"compressed size ({compressed:,} bytes)")
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError) as exc:
        raise Refused("corrupt", f"zip member {info.filename[:80]!r} does not unpack ({str(exc)[:100]})") from None
    if info.filename.lower().endswith((".xml", ".rels", ".vml")) and any(m in head for m in _DTD_MARKS):
        raise Refused("refused", f"XML member {info.filename[:80]!r} declares a DTD or entities (entity expansion, "
                                 "e.g. billion laughs, is refused)")
    return size


OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def ole_streams(path: Path) -> set[str]:
    """Names of the top-level streams of an OLE2 file (``Workbook``, ``WordDocument``, ``EncryptedPackage``…)."""
    import olefile

    try:
        with olefile.OleFileIO(str(path)) as ole:
            return {"/".join(entry) for entry in ole.listdir(streams=True, storages=False)}
    except (OSError, ValueError, IndexError, TypeError, RecursionError) as exc:
        raise Refused("corrupt", f"not a readable OLE2 file ({str(exc)[:120]})") from None
