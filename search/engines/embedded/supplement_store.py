"""Supplement chunks in an embedded build's paper store (``papers.db``, table ``supp_chunks``): each supplement
passage's rows or paragraphs (``search.core.supplements.SupplementChunk``), keyed by paper, file, part and chunk, with
the first and last row/paragraph/page it covers, so that a read of rows 500-600 of a sheet is one indexed range
query. Passage search keeps a supplement passage's place in the passage index and slices its text from here, as
article passages take theirs from the paper store's blocks. A row is zlib-compressed JSON, checked on read like the
paper store's (``MAX_DECODED_BYTES``, shape); builds before layout 6 have no such table (no supplements).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import zlib
from pathlib import Path
from typing import Any, NamedTuple

from search.core.errors import FlysiftError
from search.core.supplements import SupplementChunk
from search.engines.embedded.paper_store import LEVEL, MAX_DECODED_BYTES

SCHEMA = """
CREATE TABLE IF NOT EXISTS supp_chunks (pmcid TEXT NOT NULL, file INTEGER NOT NULL, part INTEGER NOT NULL,
    chunk INTEGER NOT NULL, first INTEGER NOT NULL, last INTEGER NOT NULL, doc BLOB NOT NULL,
    PRIMARY KEY (pmcid, file, part, chunk));
"""


class StoredChunk(NamedTuple):
    file: int
    part: int
    chunk: int
    first: int
    last: int
    doc: bytes   # compressed SupplementChunk JSON, with the passage's text


def encode(chunk: SupplementChunk, text: str) -> StoredChunk:
    data = json.dumps({"text": text, **chunk.model_dump(exclude_none=True)}, ensure_ascii=False).encode()
    if len(data) > MAX_DECODED_BYTES:
        raise ValueError(f"a supplement chunk of {len(data):,} bytes is over the store's {MAX_DECODED_BYTES:,}")
    return StoredChunk(chunk.file_index, chunk.part, chunk.chunk, chunk.first, chunk.last, zlib.compress(data, LEVEL))


def create(db: sqlite3.Connection) -> None:
    db.executescript(SCHEMA)


def put(db: sqlite3.Connection, pmcid: str, chunks: tuple[StoredChunk, ...]) -> None:
    """Replace the paper's chunks (a resumed build re-adds a paper)."""
    db.execute("DELETE FROM supp_chunks WHERE pmcid = ?", (pmcid,))
    db.executemany("INSERT INTO supp_chunks VALUES (?, ?, ?, ?, ?, ?, ?)", [(pmcid, *c) for c in chunks])


class SupplementStore:
    """Read side: a published build's chunks (read-only connection of its own; any thread, one lock)."""

    def __init__(self, path: Path):
        self.path = path
        self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock:
            self.present = self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                            "name = 'supp_chunks'").fetchone() is not None

    def _decode(self, blob: Any, pmcid: str) -> dict[str, Any]:
        try:
            z = zlib.decompressobj()
            data = z.decompress(blob, MAX_DECODED_BYTES) if isinstance(blob, bytes) else b""
            if z.unconsumed_tail or not z.eof:
                raise ValueError("truncated or too large")
            doc = json.loads(data)
            if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
                raise ValueError("not a chunk")
            return doc
        except (zlib.error, ValueError, RecursionError) as exc:
            raise FlysiftError(f"Paper store {self.path}: table supp_chunks, paper {pmcid[:200]!r}: the row does not "
                               f"decode ({str(exc)[:100]}); rebuild the index.", code="index_corrupt",
                               status=500) from None

    def text(self, pmcid: str, file: int, part: int, chunk: int) -> str:
        """The text of one supplement passage."""
        with self._lock:
            row = self._db.execute("SELECT doc FROM supp_chunks WHERE pmcid = ? AND file = ? AND part = ? AND "
                                   "chunk = ?", (pmcid, file, part, chunk)).fetchone() if self.present else None
        if row is None:
            raise FlysiftError(f"Paper store {self.path}: the build has supplement passage {pmcid[:200]}:S{file}."
                               f"{part}:{chunk}, the store does not; rebuild the index.", code="index_corrupt",
                               status=500)
        return self._decode(row[0], pmcid)["text"]

    def chunks(self, pmcid: str, file: int, part: int, start: int, limit: int) -> list[SupplementChunk]:
        """The part's chunks covering numbers ``start`` on, in order, at most ``limit``."""
        if not self.present:
            return []
        with self._lock:
            rows = self._db.execute("SELECT doc FROM supp_chunks WHERE pmcid = ? AND file = ? AND part = ? AND "
                                    "last >= ? ORDER BY chunk LIMIT ?", (pmcid, file, part, start, limit)).fetchall()
        out = []
        for (blob,) in rows:
            doc = self._decode(blob, pmcid)
            doc.pop("text")
            try:
                out.append(SupplementChunk.model_validate(doc))
            except ValueError:
                raise FlysiftError(f"Paper store {self.path}: table supp_chunks, paper {pmcid[:200]!r}: not a "
                                   "chunk; rebuild the index.", code="index_corrupt", status=500) from None
        return out

    def close(self) -> None:
        with self._lock:
            self._db.close()
