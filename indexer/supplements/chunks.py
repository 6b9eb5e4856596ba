"""A part's items → its registry entry (header detected, title kept) and its passages (chunks of whole rows,
paragraphs or page pieces of about ``Limits.chunk_words`` words, as article passages are).

**Header detection.** Supplementary tables often start with a title line ("Table S1. Alleles used in this study")
and may have a two-row header whose top row is merged across columns. Among the first ``HEAD_ROWS`` rows, the
header is the first row with at least two cells, at most one of them numeric, that is followed by a row. A
one-cell row above it is the table's title. When the header row has a cell merged across columns and the row under it
is text too, the two are one header: ``Phenotype / wing``. A table whose first rows are all numeric has no header.

**Text of a table passage.** The header line, then one line per row, cells joined by `` | ``: every passage of a
table repeats its header, so a row found by search shows what its columns are.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain, islice

from indexer.supplements.extract import Item, PartData
from indexer.supplements.guards import Refused
from indexer.supplements.limits import Limits
from search.core.models import Passage
from search.core.supplements import (
    SUPPLEMENT_SECTION,
    SUPPLEMENT_SECTION_INDEX,
    UNIT_OF,
    SupplementChunk,
    SupplementFile,
    SupplementPart,
    passage_id,
    place,
)
from search.text.passages import split_paragraph

HEAD_ROWS = 10
SEPARATOR = " | "
_NUMBER = re.compile(r"^[-+]?(\d+([.,]\d*)?|\.\d+)([eE][-+]?\d+)?%?$")


@dataclass
class Budget:
    """Characters a file (and its paper) may still add; passing it ends the file as ``partial``."""

    file_chars: int
    paper_chars: int

    def spend(self, n: int) -> None:
        self.file_chars -= n
        self.paper_chars -= n
        if self.paper_chars < 0:
            raise Refused("partial", "the paper's supplements reached the text limit: the rest was not read")
        if self.file_chars < 0:
            raise Refused("partial", "the file reached the text limit: the rest was not read")


def _numeric(cell: str) -> bool:
    return bool(_NUMBER.match(cell.replace(" ", "")))


def _is_header(row: list[str]) -> bool:
    filled = [c for c in row if c]
    return len(filled) >= 2 and sum(map(_numeric, filled)) <= 1


def detect_header(head: list[Item], merged_rows: set[int] | frozenset[int] = frozenset()
                  ) -> tuple[int | None, str | None, bool]:
    """(index in ``head`` of the last header row, title, whether two rows make the header) for a table's first
    rows (``merged_rows``: numbers of rows where a merged range spans columns); (None, None, False) when it has
    none."""
    for i, (_, row) in enumerate(head[:HEAD_ROWS]):
        if not _is_header(row) or i + 1 >= len(head):
            continue
        title = " ".join(c for _, r in head[:i] for c in r if c) or None
        below = head[i + 1][1]
        if head[i][0] in merged_rows and i + 2 < len(head) and _is_header(below) \
                and not any(map(_numeric, filter(None, below))):
            return i + 1, title, True
        return i, title, False
    return None, None, False


def _combine(top: list[str], below: list[str]) -> list[str]:
    width = max(len(top), len(below))
    top, below = top + [""] * (width - len(top)), below + [""] * (width - len(below))
    return [f"{a} / {b}" if a and b and a != b else a or b for a, b in zip(top, below, strict=True)]


def part_of(data: PartData, index: int, limits: Limits) -> tuple[SupplementPart, Iterator[Item]]:
    """The part's registry entry as far as its head tells (header, title) and its items after the header."""
    part = SupplementPart(index=index, name=data.name, kind=data.kind, unit=UNIT_OF[data.kind])
    if data.kind not in ("sheet", "table"):
        return part, data.items
    head = list(islice(data.items, HEAD_ROWS + 1))
    at, title, two = detect_header(head, data.merged_rows)
    if at is None:
        return part, chain(head, data.items)
    header = _combine(head[at - 1][1], head[at][1]) if two else head[at][1]
    part.header, part.header_row, part.title = header, head[at][0], title
    first_data = at + 1
    return part, chain(head[first_data:], data.items)


def _words(text: str) -> int:
    return len(text.split())


def chunk_part(pmcid: str, year: int | None, file: SupplementFile, data: PartData, index: int, limits: Limits,
               budget: Budget, out: list[Passage]) -> SupplementPart:
    """Append the part's passages to ``out`` and return its registry entry. ``Refused`` (a bound met inside the
    part) propagates after the passages read so far are appended and the entry is added to ``file.parts``."""
    part, items = part_of(data, index, limits)
    file.parts.append(part)
    table = part.kind in ("sheet", "table")
    header_line = SEPARATOR.join(part.header) if part.header else ""
    numbers: list[int] = []
    cells: list[list[str]] = []
    words = _words(header_line)

    def close() -> None:
        nonlocal numbers, cells, words
        if not numbers:
            return
        lines = [SEPARATOR.join(c) for c in cells] if table else [c[0] for c in cells]
        text = "\n".join(([header_line] if header_line else []) + lines) if table else "\n\n".join(lines)
        chunk = _chunks_in(out, file, index)
        where = place(file, part, chunk, numbers[0], numbers[-1])
        out.append(Passage(id=passage_id(pmcid, file.index, index, chunk), pmcid=pmcid,
                           section_index=SUPPLEMENT_SECTION_INDEX, paragraph_index=chunk,
                           section_type=SUPPLEMENT_SECTION, start=0, end=len(text), text=text, year=year,
                           source="supplement",
                           supplement=SupplementChunk(**where, numbers=numbers, items=cells)))  # type: ignore[arg-type]
        file.passages += 1
        file.chars += len(text)
        numbers, cells, words = [], [], _words(header_line)

    try:
        for n, item in items:
            pieces = [item] if table else [[item[0][a:b]] for a, b in split_paragraph(item[0], limits.chunk_words)]
            for piece in pieces:
                size = sum(len(c) for c in piece)
                budget.spend(size)
                w = sum(_words(c) for c in piece)
                if numbers and (words + w > limits.chunk_words or (table and len(numbers) >= limits.chunk_rows)):
                    close()
                numbers.append(n)
                cells.append(piece)
                words += w
                if n != part.last:
                    part.count += 1
                part.first = part.first or n
                part.last = n
                part.columns = max(part.columns, len(piece) if table else 0)
    finally:
        close()
        part.merged = data.merged[0]
        if part.header:
            part.columns = max(part.columns, len(part.header))
    return part


def _chunks_in(out: list[Passage], file: SupplementFile, index: int) -> int:
    """How many passages of this part ``out`` holds already (the next chunk's number)."""
    n = 0
    for p in reversed(out):
        s = p.supplement
        if s is None or s.file_index != file.index or s.part != index:
            break
        n += 1
    return n
