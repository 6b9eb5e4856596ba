"""Supplementary files: the registry of a paper's files, where a supplement passage comes from, and what a read of
one answers. One home for these shapes: the indexer (``indexer.supplements``) makes them, engines store them, the
service, client, MCP and CLI serve them.

A file is a row of its paper's registry (``SupplementFile``): numbered from 1 in the order the article names them
(files found beside the article and not named by it follow), with an extraction ``status`` that says what became of
it; a bad file is reported there, never fatal to its paper. A file holds *parts*: the sheets of a spreadsheet, the
tables and the running text of a document, the pages of a PDF. A part is cut into *chunks* of whole rows (tables),
paragraphs (text) or page pieces (PDF); each chunk is one passage, searchable like the article's passages, whose
``supplement`` says file, part (sheet), and the rows, paragraphs or pages it covers.

Numbers are 1-based as a person reads them: rows as the spreadsheet numbers them (the header row included), pages
as the PDF does, paragraphs in document order.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from search.core.base import Model

SupplementStatus = Literal["ok", "partial", "unsupported", "encrypted", "corrupt", "too_large", "missing", "refused"]
#: what each status means, for documentation and the CLI's legend
STATUS_MEANING: dict[str, str] = {
    "ok": "extracted whole",
    "partial": "extracted up to a limit or past a damaged part (reason says which)",
    "unsupported": "a format flysift does not read (images, video, archives, legacy formats without their reader)",
    "encrypted": "password-protected",
    "corrupt": "not a readable file of its type",
    "too_large": "over the size limit: not read",
    "missing": "named by the article but not in its package",
    "refused": "hostile or unsafe (a link, a name escaping the package, an archive or XML bomb)",
}
PartKind = Literal["sheet", "table", "text", "pages"]
#: what a part's numbers count
PartUnit = Literal["row", "paragraph", "page"]
UNIT_OF: dict[str, PartUnit] = {"sheet": "row", "table": "row", "text": "paragraph", "pages": "page"}
#: the section type and index supplement passages carry (they are no section of the article)
SUPPLEMENT_SECTION = "SUPPL"
SUPPLEMENT_SECTION_INDEX = -1
Source = Literal["paper", "supplement"]


class SupplementPart(Model):
    """A sheet, a table, the running text or the pages of a file."""

    index: int = Field(description="0-based position in the file")
    name: str = Field(description="Sheet name, 'Table 2', 'text' or 'pages'")
    kind: PartKind
    unit: PartUnit = Field(description="What the part's numbers count: row, paragraph or page")
    first: int = Field(0, description="Number of the first row/paragraph/page extracted")
    last: int = Field(0, description="Number of the last row/paragraph/page extracted (0: none)")
    count: int = Field(0, description="Rows, paragraphs or pages extracted")
    columns: int = 0
    header: list[str] | None = Field(None, description="Column names (tables), merged header cells filled")
    header_row: int | None = Field(None, description="Row number of the (last) header row")
    title: str | None = Field(None, description="Text above the header (e.g. the table's own title line)")
    merged: int = Field(0, description="Merged cell ranges whose value was filled into every cell they cover")


class SupplementFile(Model):
    """One row of a paper's registry."""

    index: int = Field(description="1-based number of the file in its paper's registry (what reads name)")
    name: str = Field(description="The file's name as the article (or the package) names it")
    label: str | None = None
    caption: str | None = None
    media_type: str | None = None
    size: int | None = Field(None, description="Bytes, when the file was found")
    origin: Literal["xml", "package"] = Field("xml", description="Named by the article's XML, or only found "
                                                                 "beside it in its package")
    status: SupplementStatus
    reason: str | None = Field(None, description="One line: why the status is not ok")
    parts: list[SupplementPart] = Field(default_factory=list)
    passages: int = 0
    chars: int = Field(0, description="Characters of text extracted")


class SupplementPlace(Model):
    """Where a supplement passage comes from (what a hit shows)."""

    file: str
    file_index: int
    part: int
    sheet: str = Field(description="The part's name: a sheet, 'Table 2', 'text' or 'pages'")
    unit: PartUnit
    first: int
    last: int
    chunk: int = Field(description="0-based position of the passage in its part")
    rows: tuple[int, int] | None = Field(None, description="First and last row (tables)")
    pages: tuple[int, int] | None = Field(None, description="First and last page (PDF)")
    paragraphs: tuple[int, int] | None = Field(None, description="First and last paragraph (text)")


class SupplementChunk(SupplementPlace):
    """A supplement passage's place and content as engines store it: ``numbers[i]`` is the row, paragraph or page
    of ``items[i]`` (a row's cells, or ``[text]``). Hits show the place only."""

    numbers: list[int] = Field(default_factory=list)
    items: list[list[str]] = Field(default_factory=list)


def place(file: SupplementFile, part: SupplementPart, chunk: int, first: int, last: int) -> dict[str, object]:
    """The fields of a ``SupplementPlace`` (the rows/pages/paragraphs range named by the part's unit)."""
    key = {"row": "rows", "page": "pages", "paragraph": "paragraphs"}[part.unit]
    return {"file": file.name, "file_index": file.index, "part": part.index, "sheet": part.name, "unit": part.unit,
            "first": first, "last": last, "chunk": chunk, key: (first, last)}


def passage_id(pmcid: str, file_index: int, part: int, chunk: int) -> str:
    """``PMCID:S<file>.<part>:<chunk>``: never one of the article's ``PMCID:<section>:<paragraph>`` ids."""
    return f"{pmcid}:S{file_index}.{part}:{chunk}"


class SupplementRow(Model):
    n: int = Field(description="Row, paragraph or page number")
    cells: list[str] = Field(description="A row's cells (tables), or [text]")


class SupplementRead(Model):
    """A page of one part of a file: its rows (tables: with the header, so tables can be joined) or its
    paragraphs/pages; ``next_start`` continues, None at the end."""

    pmcid: str
    file: SupplementFile
    part: SupplementPart
    start: int
    rows: list[SupplementRow]
    next_start: int | None = None
    truncated_cells: int = Field(0, description="Cells cut to the read's cell limit")


class SupplementList(Model):
    pmcid: str
    files: list[SupplementFile]


#: weight of a paper's ``supp`` field (its supplement passages' text) beside its ``text`` field in paper search: a
#: word in a supplement counts as much as one in the article, with its own length normalisation, so that a long
#: table neither dilutes the article's words nor is diluted by them
SUPPLEMENT_WEIGHT = 1.0


def paper_fields(fields: dict[str, float], has_supplements: bool, source: str | None) -> dict[str, float]:
    """The fields a paper query searches under a ``source`` filter: the article's (``fields``), the supplements'
    (``supp``), or both; empty when nothing can match (supplements asked of a build that has none)."""
    if source == "paper":
        return fields
    if not has_supplements:
        return {} if source == "supplement" else fields
    return {"supp": SUPPLEMENT_WEIGHT} if source == "supplement" else {**fields, "supp": SUPPLEMENT_WEIGHT}
