"""Reading supplementary files, independent of HTTP: a paper's registry, a page of one part's rows (or paragraphs,
or pages) from the engine's chunks, and a table as CSV with formula injection neutralised.

A file is named by its number in the registry or by its name (looked up in the registry, never a path); a part by
its number or its name (a sheet's). A page holds at most ``limit`` rows and about ``max_chars`` characters (at least
one row; cells cut to fit are counted in ``truncated_cells``), and ``next_start`` continues it.
"""

from __future__ import annotations

import csv
import io
import re

from search.core.errors import FlysiftError, InvalidRequest, LimitExceeded, NotFound
from search.core.models import Paper
from search.core.supplements import SupplementFile, SupplementPart, SupplementRead, SupplementRow
from search.engines import Engine

DEFAULT_ROWS = 100
MAX_ROWS = 1000
DEFAULT_CHARS = 40_000
MAX_CHARS = 200_000
#: chunks asked of the engine per round trip while a page fills
CHUNKS_PER_CALL = 32
#: characters a cell keeps when the page's character budget runs short
MIN_CELL_CHARS = 200
#: a cell that is a plain number (``-5``, ``+1.5e3``) is never a formula
_PLAIN_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")
#: first characters that make a spreadsheet read a cell as a formula (OWASP's list, with tab and carriage return)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class SupplementUnavailable(FlysiftError):
    """The file is in the registry but has nothing to read (missing, unsupported, refused…)."""

    status = 409
    code = "supplement_unavailable"


def find_file(paper: Paper, file: str) -> SupplementFile:
    """A registry entry by number (``2``) or name (``Table_S1.xls``)."""
    files = paper.supplements
    found = next((f for f in files if (file.isdigit() and f.index == int(file)) or f.name == file), None)
    if found is None:
        raise NotFound(f"Paper {paper.pmcid} has no supplementary file {file[:100]!r}; it has "
                       f"{len(files)} (list them with GET /v1/papers/{paper.pmcid}/supplements).",
                       code="supplement_not_found",
                       details={"pmcid": paper.pmcid, "field": "file", "valid": [f.index for f in files][:100]})
    return found


def find_part(entry: SupplementFile, part: str | None) -> SupplementPart:
    if entry.status not in ("ok", "partial") or not entry.parts:
        raise SupplementUnavailable(f"File {entry.index} ({entry.name[:100]}) has nothing to read: status "
                                    f"{entry.status}" + (f" ({entry.reason})" if entry.reason else "") + ".",
                                    details={"file": entry.index, "status": entry.status, "reason": entry.reason})
    if part is None or part == "":
        return entry.parts[0]
    found = next((p for p in entry.parts if (part.isdigit() and p.index == int(part)) or p.name == part), None)
    if found is None:
        raise NotFound(f"File {entry.index} has no sheet or part {part[:100]!r}; its parts are "
                       f"{[p.name for p in entry.parts][:50]}.", code="supplement_not_found",
                       details={"field": "part", "valid": [p.name for p in entry.parts][:100]})
    return found


def read_part(engine: Engine, paper: Paper, entry: SupplementFile, part: SupplementPart, *, start: int | None,
              limit: int | None, max_chars: int | None) -> SupplementRead:
    """One page of a part, from ``start`` (default: its first row/paragraph/page)."""
    limit = DEFAULT_ROWS if limit is None else limit
    max_chars = DEFAULT_CHARS if max_chars is None else max_chars
    if not 1 <= limit <= MAX_ROWS:
        raise LimitExceeded(f"limit must be between 1 and {MAX_ROWS} (got {limit}).",
                            details={"field": "limit", "max": MAX_ROWS})
    if not 1000 <= max_chars <= MAX_CHARS:
        raise LimitExceeded(f"max_chars must be between 1000 and {MAX_CHARS} (got {max_chars}).",
                            details={"field": "max_chars", "max": MAX_CHARS})
    start = part.first if start is None else start
    if not 0 <= start <= 2**31:
        raise InvalidRequest("start must be a row, paragraph or page number (0 or more).",
                             details={"field": "start"})
    rows: list[SupplementRow] = []
    used, cut, at, more, seen = 0, 0, start, False, -1
    while not more:
        got = engine.supplement_chunks(paper.pmcid, entry.index, part.index, at, CHUNKS_PER_CALL)
        chunks = [c for c in got if c.chunk > seen]   # the next call starts at the last number read: a page's
        for chunk in chunks:                           # pieces may run on into the next chunk
            for n, cells in zip(chunk.numbers, chunk.items, strict=False):
                if n < start:
                    continue
                if rows and rows[-1].n == n and part.unit != "row":   # pieces of one paragraph or page
                    rows[-1].cells[0] += " " + cells[0]
                    used += len(cells[0])
                    continue
                if len(rows) >= limit or (rows and used >= max_chars):
                    more = True
                    break
                keep = max(MIN_CELL_CHARS, (max_chars - used) // max(len(cells), 1))
                cut += sum(len(c) > keep for c in cells)
                cells = [c[:keep] for c in cells]
                used += sum(len(c) for c in cells)
                rows.append(SupplementRow(n=n, cells=cells))
            if more:
                break
        if len(got) < CHUNKS_PER_CALL or more or not chunks:
            break
        at, seen = chunks[-1].last, chunks[-1].chunk
    next_start = rows[-1].n + 1 if rows and (more or rows[-1].n < part.last) else None
    return SupplementRead(pmcid=paper.pmcid, file=entry, part=part, start=start, rows=rows, next_start=next_start,
                          truncated_cells=cut)


def neutralise(cell: str) -> str:
    """A cell safe to open in a spreadsheet: one starting like a formula gets a leading apostrophe (plain numbers
    such as ``-5`` stay numbers)."""
    if cell.startswith(FORMULA_STARTS) and not _PLAIN_NUMBER.match(cell):
        return "'" + cell
    return cell


def as_csv(page: SupplementRead) -> str:
    """A page of a table as CSV: the header (when the part has one), then its rows, every cell neutralised."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    if page.part.header:
        writer.writerow([neutralise(c) for c in page.part.header])
    for row in page.rows:
        writer.writerow([neutralise(c) for c in row.cells])
    return out.getvalue()
