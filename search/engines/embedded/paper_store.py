"""The paper store of an embedded build (``builds/<id>/papers.db``, SQLite): whole papers for fetch, and the
paragraphs that passage texts are sliced from.

Two formats, told apart by their tables:

* ``papers`` (builds before store format 2): one row per paper, the whole paper's JSON zlib-compressed. A passage's
  text needs its paper decompressed and parsed (~60 KB for a FlyAOC paper), so a passage search paid up to one
  whole paper per hit that missed the cache.
* ``paper_docs`` + ``blocks`` (store format 2, what new builds write): ``paper_docs`` holds each paper's JSON with
  its body sections' paragraphs left out (metadata, title, abstract, section types and titles, and each section's
  paragraph count); ``blocks`` holds the body paragraphs in document order, consecutive paragraphs of at most
  ``BLOCK_CHARS`` characters together (a longer paragraph is a block of its own; a block may run across sections,
  so short sections do not make small blocks that compress badly). A block is a zlib-compressed JSON list with one
  list of paragraphs per section it touches, keyed by the paper and the place of its first paragraph (``place``).
  A passage hit decompresses one block; a paper fetch reads the paper's row and its blocks and returns exactly the
  paper that was stored. The text is stored once either way.

Everything read is checked: decompression stops at ``MAX_DECODED_BYTES``, shapes and counts are checked after
parsing, and a row that fails is one ``index_corrupt`` error naming the file, table and paper. No pickle.
"""

from __future__ import annotations

import bisect
import json
import sqlite3
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from search.core.errors import FlysiftError
from search.core.models import Paper
from search.text.passages import abstract_paragraphs

#: body paragraphs per block: up to this many characters together (~2-3 KB compressed)
BLOCK_CHARS = 8_000
#: the most bytes a row or block may decompress to, on write and on read (a paper's JSON is ~60 KB)
MAX_DECODED_BYTES = 256 << 20
#: decoded blocks a reader keeps (each ≤ BLOCK_CHARS characters unless one paragraph is longer), abstracts included
BLOCK_CACHE = 1024
#: decoded papers a reader of the older format keeps to slice passage texts from
PAPER_CACHE = 128
#: zlib level of new rows and blocks
LEVEL = 6

_SCHEMA = """
CREATE TABLE IF NOT EXISTS paper_docs (pmcid TEXT PRIMARY KEY, doc BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS blocks (pmcid TEXT NOT NULL, place INTEGER NOT NULL, doc BLOB NOT NULL,
    PRIMARY KEY (pmcid, place));
"""


def place(section_index: int, paragraph_index: int) -> int:
    """One integer ordering paragraphs by section, then paragraph: a block's key is its first paragraph's place."""
    return section_index << 32 | paragraph_index


def _unplace(key: int) -> tuple[int, int]:
    return key >> 32, key & 0xFFFFFFFF


class StoredPaper(NamedTuple):
    """A paper as store format 2 writes it (made in the indexer's worker processes: plain bytes)."""

    doc: bytes                              # compressed paper JSON without body paragraphs
    blocks: tuple[tuple[int, bytes], ...]   # (place of the first paragraph, compressed paragraphs per section)


def _compress(data: bytes, pmcid: str, what: str) -> bytes:
    if len(data) > MAX_DECODED_BYTES:
        raise ValueError(f"paper {pmcid[:200]!r}: its {what} is {len(data):,} bytes; the paper store holds at most "
                         f"{MAX_DECODED_BYTES:,} per row")
    return zlib.compress(data, LEVEL)


def encode(paper: Paper) -> StoredPaper:
    """The row and blocks of ``paper``: body paragraphs in document order, up to ``BLOCK_CHARS`` characters a block."""
    doc = paper.model_dump(exclude_none=True)
    blocks: list[tuple[int, bytes]] = []
    current: list[list[str]] = []    # the open block: paragraphs per section, the first from ``start``
    start, size = 0, 0
    for s, section in enumerate(doc["sections"], start=1):
        paragraphs = section.pop("paragraphs")
        section["n"] = len(paragraphs)
        if current:
            current.append([])
        for i, text in enumerate(paragraphs):
            if size and size + len(text) > BLOCK_CHARS:
                blocks.append((start, _block(current, paper.pmcid)))
                current, size = [], 0
            if not current:
                current, start = [[]], place(s, i)
            current[-1].append(text)
            size += len(text)
    if current:
        blocks.append((start, _block(current, paper.pmcid)))
    return StoredPaper(_compress(json.dumps(doc, ensure_ascii=False).encode(), paper.pmcid, "row"), tuple(blocks))


def _block(sections: list[list[str]], pmcid: str) -> bytes:
    return _compress(json.dumps(sections, ensure_ascii=False).encode(), pmcid, "block")


def create(db: sqlite3.Connection) -> None:
    """The tables of store format 2 (a writer's connection)."""
    db.executescript(_SCHEMA)


def put(db: sqlite3.Connection, pmcid: str, stored: StoredPaper) -> None:
    """Store a paper, replacing what an earlier add of the same pmcid wrote (resumed builds re-add)."""
    db.execute("DELETE FROM blocks WHERE pmcid = ?", (pmcid,))
    db.execute("INSERT OR REPLACE INTO paper_docs VALUES (?, ?)", (pmcid, stored.doc))
    db.executemany("INSERT INTO blocks VALUES (?, ?, ?)", [(pmcid, p, b) for p, b in stored.blocks])


class PaperStore:
    """A published build's paper store, read-only; any thread may call it (one lock serialises SQLite and the
    caches)."""

    def __init__(self, path: Path):
        self.path = path
        # any thread may use the connection (API requests run on a pool); the lock serialises every use
        self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()
        tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        self.blocked = {"paper_docs", "blocks"} <= tables
        #: (pmcid, place of the first paragraph) → decoded block; section 0 (the abstract) is (pmcid, 0)
        self._blocks: OrderedDict[tuple[str, int], list[list[str]]] = OrderedDict()
        #: pmcid → the places where its blocks start
        self._block_starts: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        #: the older format: pmcid → its paragraphs by section index
        self._papers: OrderedDict[str, list[list[str]]] = OrderedDict()

    def _corrupt(self, table: str, pmcid: str, why: str) -> FlysiftError:
        return FlysiftError(f"Paper store {self.path}: table {table}, paper {pmcid[:200]!r}: {why}; rebuild the index.",
                            code="index_corrupt", status=500)

    def _decode(self, blob: Any, table: str, pmcid: str) -> Any:
        """A row's JSON, decompressed within ``MAX_DECODED_BYTES`` and parsed."""
        if not isinstance(blob, bytes):
            raise self._corrupt(table, pmcid, "the row is not a blob")
        try:
            z = zlib.decompressobj()
            data = z.decompress(blob, MAX_DECODED_BYTES)
            if z.unconsumed_tail or not z.eof:
                raise self._corrupt(table, pmcid, f"the row is truncated or over {MAX_DECODED_BYTES:,} bytes")
            return json.loads(data)
        except (zlib.error, ValueError, RecursionError) as exc:
            raise self._corrupt(table, pmcid, f"the row does not decode ({str(exc)[:200]})") from None

    def _row(self, sql: str, args: tuple[Any, ...]) -> Any:
        with self._lock:
            return self._db.execute(sql, args).fetchone()

    # ---- whole papers -----------------------------------------------------------------------------------------
    def paper(self, pmcid: str) -> Paper | None:
        if not self.blocked:
            row = self._row("SELECT doc FROM papers WHERE pmcid = ?", (pmcid,))
            return Paper.model_validate(self._decode(row[0], "papers", pmcid)) if row else None
        row = self._row("SELECT doc FROM paper_docs WHERE pmcid = ?", (pmcid,))
        if row is None:
            return None
        doc = self._doc(row[0], pmcid)
        with self._lock:
            rows = self._db.execute("SELECT place, doc FROM blocks WHERE pmcid = ? ORDER BY place", (pmcid,)).fetchall()
        found: dict[int, list[str]] = {}
        for key, blob in rows:
            first_section, first = _unplace(key)
            for k, part in enumerate(self._sections(blob, pmcid)):
                paragraphs = found.setdefault(first_section + k, [])
                if len(paragraphs) != (first if k == 0 else 0):
                    raise self._corrupt("blocks", pmcid, f"section {first_section + k} has a block at paragraph "
                                        f"{first if k == 0 else 0}, after {len(paragraphs)} paragraphs")
                paragraphs += part
        sections = doc.get("sections", [])
        if set(found) - set(range(1, len(sections) + 1)):
            raise self._corrupt("blocks", pmcid, "blocks of sections the paper does not have")
        for s, section in enumerate(sections, start=1):
            section["paragraphs"] = found.get(s, [])
            if len(section["paragraphs"]) != section.pop("n", None):
                raise self._corrupt("blocks", pmcid, f"section {s} has {len(section['paragraphs'])} paragraphs "
                                    "in its blocks, not the count of its row")
        try:
            return Paper.model_validate(doc)
        except ValueError as exc:
            raise self._corrupt("paper_docs", pmcid, f"not a paper ({str(exc)[:200]})") from None

    def _doc(self, blob: Any, pmcid: str) -> dict[str, Any]:
        doc = self._decode(blob, "paper_docs", pmcid)
        sections = doc.get("sections") if isinstance(doc, dict) else None   # model_dump always writes it
        if not isinstance(sections, list) or not all(isinstance(s, dict) and isinstance(s.get("n"), int)
                                                     for s in sections):
            raise self._corrupt("paper_docs", pmcid, "the row is not a paper without its paragraphs")
        return doc

    def _sections(self, blob: Any, pmcid: str) -> list[list[str]]:
        """A block: paragraphs per section, the first section's list not empty."""
        found = self._decode(blob, "blocks", pmcid)
        if not isinstance(found, list) or not found or not found[0] \
                or not all(isinstance(part, list) and all(isinstance(p, str) for p in part) for part in found):
            raise self._corrupt("blocks", pmcid, "a block is not a list of paragraphs per section")
        return found

    # ---- paragraphs (passage texts) ---------------------------------------------------------------------------
    def paragraph(self, pmcid: str, section_index: int, paragraph_index: int) -> str:
        """The paragraph a passage was cut from (section 0: the abstract's, as ``abstract_paragraphs`` splits it)."""
        if not self.blocked:
            sections = self._paper_sections(pmcid)
            if not 0 <= section_index < len(sections) or not 0 <= paragraph_index < len(sections[section_index]):
                raise self._corrupt("papers", pmcid, f"no paragraph {section_index}:{paragraph_index}")
            return sections[section_index][paragraph_index]
        if section_index == 0:
            key, sections = 0, self._cached((pmcid, 0), lambda: [self._abstract(pmcid)])
        else:
            starts = self._starts(pmcid)
            at = bisect.bisect_right(starts, place(section_index, paragraph_index)) - 1
            if at < 0:
                raise self._missing(pmcid, section_index, paragraph_index)
            key = starts[at]
            sections = self._cached((pmcid, key), lambda: self._block(pmcid, key))
        first_section, first = _unplace(key)
        k = section_index - first_section
        i = paragraph_index - (first if k == 0 else 0)
        if not 0 <= k < len(sections) or not 0 <= i < len(sections[k]):
            raise self._missing(pmcid, section_index, paragraph_index)
        return sections[k][i]

    def _starts(self, pmcid: str) -> tuple[int, ...]:
        """The places where a paper's blocks start, in order (read from the table's key, then cached)."""
        with self._lock:
            found = self._block_starts.get(pmcid)
            if found is not None:
                self._block_starts.move_to_end(pmcid)
                return found
            found = tuple(r[0] for r in self._db.execute("SELECT place FROM blocks WHERE pmcid = ? ORDER BY place",
                                                         (pmcid,)))
            self._block_starts[pmcid] = found
            while len(self._block_starts) > BLOCK_CACHE:
                self._block_starts.popitem(last=False)
        return found

    def _block(self, pmcid: str, key: int) -> list[list[str]]:
        row = self._row("SELECT doc FROM blocks WHERE pmcid = ? AND place = ?", (pmcid, key))
        if row is None:
            raise self._corrupt("blocks", pmcid, f"the block at {_unplace(key)} went missing")
        return self._sections(row[0], pmcid)

    def _missing(self, pmcid: str, section_index: int, paragraph_index: int) -> FlysiftError:
        return self._corrupt("blocks", pmcid, f"the build has a passage of paragraph {section_index}:"
                             f"{paragraph_index}, the store does not")

    def _abstract(self, pmcid: str) -> list[str]:
        row = self._row("SELECT doc FROM paper_docs WHERE pmcid = ?", (pmcid,))
        if row is None:
            raise self._corrupt("paper_docs", pmcid, "the build has passages of this paper, the store not the paper")
        abstract = self._doc(row[0], pmcid).get("abstract", "")
        if not isinstance(abstract, str):
            raise self._corrupt("paper_docs", pmcid, "the abstract is not a string")
        return abstract_paragraphs(abstract)

    def _cached(self, key: tuple[str, int], load: Callable[[], list[list[str]]]) -> list[list[str]]:
        with self._lock:
            found = self._blocks.get(key)
            if found is not None:
                self._blocks.move_to_end(key)
                return found
        found = load()
        with self._lock:
            self._blocks[key] = found
            while len(self._blocks) > BLOCK_CACHE:
                self._blocks.popitem(last=False)
        return found

    def _paper_sections(self, pmcid: str) -> list[list[str]]:
        """The older format: a paper's paragraphs by section index, from a bounded cache. Plain JSON, not a
        validated ``Paper``: the store holds only what the engine wrote."""
        with self._lock:
            found = self._papers.get(pmcid)
            if found is not None:
                self._papers.move_to_end(pmcid)
                return found
        row = self._row("SELECT doc FROM papers WHERE pmcid = ?", (pmcid,))
        if row is None:
            raise self._corrupt("papers", pmcid, "the build has passages of this paper, the store not the paper")
        doc = self._decode(row[0], "papers", pmcid)
        if not isinstance(doc, dict):
            raise self._corrupt("papers", pmcid, "the row is not a paper")
        found = [abstract_paragraphs(doc.get("abstract", ""))]
        found += [section.get("paragraphs", []) for section in doc.get("sections", [])]
        with self._lock:
            self._papers[pmcid] = found
            while len(self._papers) > PAPER_CACHE:
                self._papers.popitem(last=False)
        return found

    def close(self) -> None:
        with self._lock:
            self._db.close()
