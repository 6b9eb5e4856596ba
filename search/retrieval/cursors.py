"""Signed paper-text cursors: a cursor says where the next page of a paper starts, and only this service can make one.

Continuing a paper with its cursor is free under the ``flyaoc`` budget, so a cursor is a capability: it carries an
HMAC-SHA256 tag over its position and what it was issued for (the reader: a session id or none, the collection, the
paper and the section selection). A forged, altered or foreign cursor is refused with 422 ``invalid_cursor``.

The key is ``FLYSIFT_CURSOR_SECRET`` when set (required when API processes on several machines serve one session
store), else 32 random bytes generated once into ``<data_dir>/cursor_secret`` (mode 0600), so every process on one
data directory agrees. Changing the key invalidates cursors in flight, nothing else.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path

from search.core.errors import FlysiftError, InvalidRequest

SECRET_FILE = "cursor_secret"
MIN_SECRET_CHARS = 16
TAG_BYTES = 16
MAX_CURSOR_CHARS = 200


class CursorSecretError(FlysiftError):
    """The cursor key cannot be read or made: a configuration problem the operator fixes (one line)."""

    status = 503
    code = "cursor_secret_unavailable"


def load_secret(configured: str | None, data_dir: Path) -> bytes:
    """The configured secret, else the data directory's (created once, atomically, readable by the owner only)."""
    if configured is not None:
        if len(configured) < MIN_SECRET_CHARS:
            raise CursorSecretError(f"FLYSIFT_CURSOR_SECRET is {len(configured)} characters; use at least "
                                    f"{MIN_SECRET_CHARS} random ones (e.g. `python -c 'import secrets; "
                                    "print(secrets.token_hex(32))'`).")
        return configured.encode()
    path = Path(data_dir) / SECRET_FILE
    try:
        if not path.exists():
            _create(path)
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise CursorSecretError(f"{path} is readable by other users (mode {stat.filemode(mode)}); run "
                                    f"`chmod 600 {path}` or set FLYSIFT_CURSOR_SECRET.")
        key = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise CursorSecretError(f"Cannot read or create the cursor secret {path}: {e.__class__.__name__}: "
                                f"{getattr(e, 'strerror', None) or e}; make the data directory writable or set "
                                "FLYSIFT_CURSOR_SECRET.") from None
    if len(key) < MIN_SECRET_CHARS:
        raise CursorSecretError(f"{path} holds no usable secret ({len(key)} characters); delete it to have a new "
                                "one made, or set FLYSIFT_CURSOR_SECRET.")
    return key.encode()


def _create(path: Path) -> None:
    """Write a new secret beside ``path`` and link it into place: of several processes racing, exactly one wins and
    nobody ever reads a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{SECRET_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(secrets.token_hex(32) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class CursorSigner:
    """Makes and checks cursors for one key."""

    def __init__(self, key: bytes):
        self._key = key

    def _tag(self, pos: str, reader: str, collection: str, pmcid: str, sections: Sequence[str] | None) -> bytes:
        scope = "*" if sections is None else ",".join(sorted(set(sections)))
        msg = "\x00".join(("v1", reader, collection, pmcid, scope, pos)).encode()
        return hmac.new(self._key, msg, hashlib.sha256).digest()[:TAG_BYTES]

    def encode(self, part: int, char: int, *, reader: str, collection: str, pmcid: str,
               sections: Sequence[str] | None) -> str:
        pos = f"{part}:{char}"
        tag = self._tag(pos, reader, collection, pmcid, sections)
        return f"{_b64(pos.encode())}.{_b64(tag)}"

    def decode(self, cursor: str, n_parts: int, *, reader: str, collection: str, pmcid: str,
               sections: Sequence[str] | None) -> tuple[int, int]:
        """The position a cursor names, if this service issued it for exactly this reader, paper and sections."""
        try:
            if len(cursor) > MAX_CURSOR_CHARS:
                raise ValueError
            pos_b64, tag_b64 = cursor.split(".")
            pos = _unb64(pos_b64).decode("ascii")
            if not hmac.compare_digest(_unb64(tag_b64), self._tag(pos, reader, collection, pmcid, sections)):
                raise ValueError
            part, char = (int(x) for x in pos.split(":"))
            if not (0 <= part < n_parts and char >= 0):
                raise ValueError
            return part, char
        except ValueError:  # UnicodeDecodeError and binascii.Error are ValueErrors too
            raise InvalidRequest(f"Invalid cursor {cursor[:100]!r}: pass the next_cursor of the previous page "
                                 "unchanged, for the same paper, sections, collection and session.",
                                 code="invalid_cursor", details={"field": "cursor"}) from None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    """Strict: only the one canonical spelling decodes (no stray characters, no unused bits set)."""
    raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    if _b64(raw) != text:
        raise ValueError
    return raw
