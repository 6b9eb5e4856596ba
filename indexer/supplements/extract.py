"""Reading one supplementary file into parts, each a stream of numbered items (a row's cells, or one text), with
the library made for its format:

* spreadsheets (XLSX/XLSM/XLSB, legacy XLS, ODS): python-calamine (Rust; one sheet at a time in native memory, rows
  handed out one by one), merged ranges filled (``search.core.supplements.SupplementPart.merged``);
* CSV/TSV: the ``csv`` module, dialect sniffed, encoding detected by charset-normalizer, read as a stream;
* PDF: pypdfium2 (PDFium), text per page;
* DOCX: python-docx, paragraphs and tables in document order (merged cells repeat their text);
* legacy Word ``.doc``: ``antiword`` when installed (a Debian package), run with a time and memory limit; without
  it the file is ``unsupported`` and says how to get it;
* plain text: paragraphs split at blank lines.

Which reader is chosen by the file's first bytes, then its name: an ``.xls`` that is really tab-separated text (a
common export) is read as text. Nothing here decides status: it raises ``Refused`` or the library's error, and
``indexer.supplements.files`` turns that into the registry's one line. The libraries come with the ``supplements``
extra (``pip install 'flysift[supplements]'``); one that is missing makes its files ``unsupported``, saying so.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
import re
import resource
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexer.supplements.guards import OLE_MAGIC, Refused, check_zip, ole_streams
from indexer.supplements.limits import Limits
from search.core.supplements import PartKind

Item = tuple[int, list[str]]

SPREADSHEET = frozenset({".xlsx", ".xlsm", ".xlsb", ".xls", ".ods"})
DELIMITED = frozenset({".csv", ".tsv", ".tab"})
TEXT = frozenset({".txt", ".text"})
#: formats recognised and not read, with what they are (the registry's reason)
UNREAD = {".jpg": "image", ".jpeg": "image", ".png": "image", ".gif": "image", ".tif": "image", ".tiff": "image",
          ".bmp": "image", ".eps": "image", ".svg": "image", ".mov": "video", ".avi": "video", ".mp4": "video",
          ".mpg": "video", ".mpeg": "video", ".wmv": "video", ".wav": "audio", ".mp3": "audio",
          ".zip": "zip archive", ".gz": "gzip archive", ".tar": "tar archive", ".rar": "rar archive",
          ".7z": "7z archive", ".ppt": "PowerPoint", ".pptx": "PowerPoint", ".rtf": "RTF document",
          ".html": "HTML page", ".htm": "HTML page", ".xml": "XML", ".pdb": "structure file", ".cif": "structure file"}
EXTRA_HINT = "install the supplements extra: pip install 'flysift[supplements]'"


class Unsupported(Exception):
    """A file flysift does not read (the reason names the format, or the missing reader)."""


@dataclass
class PartData:
    """One part as read: its kind and name, its items as a stream, and the merged ranges filled."""

    kind: PartKind
    name: str
    items: Iterator[Item]
    merged: list[int] = field(default_factory=lambda: [0])   # filled while the items are read
    #: numbers of the rows where a merged range spanning columns starts (a header's top row, typically)
    merged_rows: set[int] = field(default_factory=set)


def _need(module: str):
    try:
        return __import__(module)
    except ImportError:
        raise Unsupported(f"the reader for this format ({module}) is not installed: {EXTRA_HINT}") from None


def sniff(path: Path) -> str:
    """``spreadsheet``, ``delimited``, ``pdf``, ``docx``, ``doc`` or ``text``; raises ``Unsupported``."""
    suffix = path.suffix.lower()
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head.startswith(b"%PDF"):
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        if suffix in SPREADSHEET:
            return "spreadsheet"
        if suffix == ".docx":
            return "docx"
        if suffix in (".pptx", ".zip"):
            raise Unsupported(f"{UNREAD[suffix]}: not read")
        return _zip_kind(path)
    if head.startswith(OLE_MAGIC):
        streams = ole_streams(path)
        if "EncryptedPackage" in streams:
            raise Refused("encrypted", "password-protected Office file")
        if streams & {"Workbook", "Book"}:
            return "spreadsheet"
        if "WordDocument" in streams:
            return "doc"
        raise Unsupported("an OLE2 file holding neither a workbook nor a Word document")
    if suffix == ".pdf":
        raise Refused("corrupt", "named .pdf but not a PDF (no %PDF header)")
    if suffix in (".xlsx", ".xlsm", ".xlsb", ".docx", ".ods"):
        raise Refused("corrupt", f"named {suffix} but not a zip container")
    if suffix in UNREAD:
        raise Unsupported(f"{UNREAD[suffix]}: not read")
    if suffix in DELIMITED or suffix in (".xls", ".doc") and _looks_textual(path):
        return "delimited" if suffix != ".doc" else "text"
    if suffix in TEXT or _looks_textual(path):
        return "text"
    raise Unsupported(f"unknown format {suffix or '(no suffix)'!r}")


def _zip_kind(path: Path) -> str:
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist()[:10_000])
    except (zipfile.BadZipFile, OSError) as exc:
        raise Refused("corrupt", f"not a readable zip container ({str(exc)[:100]})") from None
    if "xl/workbook.xml" in names or "xl/workbook.bin" in names or "content.xml" in names:
        return "spreadsheet"
    if "word/document.xml" in names:
        return "docx"
    raise Unsupported("zip archive: not read")


def _looks_textual(path: Path) -> bool:
    with open(path, "rb") as fh:
        sample = fh.read(8192)
    return bool(sample) and b"\x00" not in sample


def read(path: Path, kind: str, limits: Limits) -> Iterator[PartData]:
    """The parts of a file of ``kind`` (from ``sniff``)."""
    if kind in ("spreadsheet", "docx"):
        with open(path, "rb") as fh:
            zipped = fh.read(4) == b"PK\x03\x04"
        if zipped:
            check_zip(path, limits)
    return {"spreadsheet": _spreadsheet, "delimited": _delimited, "pdf": _pdf, "docx": _docx, "doc": _doc,
            "text": _text}[kind](path, limits)


# ---- cells ---------------------------------------------------------------------------------------------------------

def cell_text(value: Any, limits: Limits) -> str:
    """A cell as text: integral floats without ``.0``, dates in ISO form, whitespace collapsed, cut to the limit."""
    if value is None or value == "":
        return ""
    if isinstance(value, bool):
        text = "TRUE" if value else "FALSE"
    elif isinstance(value, float):
        text = str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    elif isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ").removesuffix(" 00:00:00")
    elif isinstance(value, (dt.date, dt.time)):
        text = value.isoformat()
    else:
        text = str(value)
    text = " ".join(text.split())
    return text[:limits.max_cell_chars]


def _row(values: list[Any], limits: Limits) -> list[str]:
    cells = [cell_text(v, limits) for v in values[:limits.max_columns]]
    while cells and not cells[-1]:
        cells.pop()
    return cells


# ---- spreadsheets --------------------------------------------------------------------------------------------------

def _spreadsheet(path: Path, limits: Limits) -> Iterator[PartData]:
    calamine = _need("python_calamine")
    try:
        wb = calamine.CalamineWorkbook.from_path(str(path))
    except calamine.PasswordError:
        raise Refused("encrypted", "password-protected workbook") from None
    try:
        for name in wb.sheet_names:
            sheet = wb.get_sheet_by_name(name)
            part = PartData("sheet", str(name)[:200], iter(()))
            part.items = _sheet_rows(sheet, part, limits)
            yield part
    finally:
        wb.close()


def _sheet_rows(sheet: Any, part: PartData, limits: Limits) -> Iterator[Item]:
    """Rows numbered as the spreadsheet numbers them, merged ranges filled with their top-left value (within the
    sheet's rows and ``max_columns``)."""
    col0 = sheet.start[1] if sheet.start else 0
    merges: dict[int, list[tuple[int, int, int]]] = {}   # first row → (last row, first col, last col)
    for (r0, c0), (r1, c1) in (sheet.merged_cell_ranges or [])[:limits.max_merged]:
        if r1 > r0 or c1 > c0:
            merges.setdefault(r0, []).append((r1, c0 - col0, min(c1 - col0, limits.max_columns - 1)))
    active: list[tuple[int, int, int, str]] = []          # (last row, first col, last col, value) to fill
    for r, values in enumerate(sheet.iter_rows()):
        if r >= limits.max_rows:
            raise Refused("partial", f"sheet {part.name[:60]!r} has more than {limits.max_rows:,} rows: the first "
                                     f"{limits.max_rows:,} were read")
        cells = [cell_text(v, limits) for v in values[:limits.max_columns]]
        for _last, c0, c1, value in active:
            _fill(cells, c0, c1, value)
        for last, c0, c1 in merges.pop(r, ()):
            if 0 <= c0 < len(cells) and c0 <= c1:
                value = cells[c0]
                _fill(cells, c0, c1, value)
                part.merged[0] += 1
                if c1 > c0:
                    part.merged_rows.add(r + 1)
                if last > r:
                    active.append((last, c0, c1, value))
        active = [a for a in active if a[0] > r]
        while cells and not cells[-1]:
            cells.pop()
        if cells:
            yield r + 1, cells


def _fill(cells: list[str], c0: int, c1: int, value: str) -> None:
    if c0 < 0:
        return
    if len(cells) <= c1:
        cells.extend([""] * (c1 + 1 - len(cells)))
    for c in range(c0, c1 + 1):
        cells[c] = value


# ---- delimited text --------------------------------------------------------------------------------------------------

def decode_sample(path: Path, size: int = 1 << 16) -> str:
    """The file's encoding: UTF-8 (with or without BOM) when it decodes, else charset-normalizer's best guess of a
    sample, else latin-1 (which decodes anything)."""
    with open(path, "rb") as fh:
        sample = fh.read(size)
    if sample.startswith(b"\xef\xbb\xbf"):
        return "utf-8-sig"
    if sample.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    try:
        sample.decode("utf-8")
        return "utf-8"
    except UnicodeDecodeError as exc:
        if exc.start > len(sample) - 4:   # a character cut by the sample's end
            return "utf-8"
    try:
        from charset_normalizer import from_bytes
    except ImportError:
        return "latin-1"
    best = from_bytes(sample).best()
    return best.encoding if best is not None else "latin-1"


def _delimited(path: Path, limits: Limits) -> Iterator[PartData]:
    encoding = decode_sample(path)
    fh = open(path, encoding=encoding, errors="replace", newline="")  # noqa: SIM115 - closed by _csv_rows
    sample = fh.read(1 << 16)
    fh.seek(0)
    try:
        dialect: Any = csv.Sniffer().sniff(sample, delimiters=",\t;|")
    except csv.Error:
        dialect = "excel-tab" if "\t" in sample else "excel"
    yield PartData("table", "table", _csv_rows(fh, dialect, limits))


def _csv_rows(fh: io.TextIOBase, dialect: Any, limits: Limits) -> Iterator[Item]:
    """Rows numbered by record; a field over ``max_cell_chars`` × 64 is a damaged file (the csv module's bound)."""
    csv.field_size_limit(limits.max_cell_chars * 64)
    n = 0
    with fh:
        try:
            for values in csv.reader(fh, dialect):
                n += 1
                if n > limits.max_rows:
                    raise Refused("partial", f"more than {limits.max_rows:,} rows: the first {limits.max_rows:,} "
                                             "were read")
                cells = _row(values, limits)
                if cells:
                    yield n, cells
        except csv.Error as exc:
            raise Refused("partial", f"unreadable from record {n + 1}: {str(exc)[:100]}") from None


# ---- PDF -------------------------------------------------------------------------------------------------------------

def _pdf(path: Path, limits: Limits) -> Iterator[PartData]:
    pdfium = _need("pypdfium2")
    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise Refused("encrypted", "password-protected PDF") from None
        raise Refused("corrupt", f"not a readable PDF ({str(exc)[:100]})") from None
    pages = len(pdf)
    if pages > limits.max_pdf_pages_declared:
        pdf.close()
        raise Refused("refused", f"PDF declares {pages:,} pages (limit {limits.max_pdf_pages_declared:,})")
    yield PartData("pages", "pages", _pdf_pages(pdf, pages, limits))


def _pdf_pages(pdf: Any, pages: int, limits: Limits) -> Iterator[Item]:
    try:
        for i in range(min(pages, limits.max_pdf_pages)):
            page = pdf[i]
            try:
                textpage = page.get_textpage()
                text = textpage.get_text_bounded()
                textpage.close()
            finally:
                page.close()
            text = " ".join(text.split())
            if text:
                yield i + 1, [text[:limits.max_file_chars]]
        if pages > limits.max_pdf_pages:
            raise Refused("partial", f"PDF of {pages:,} pages: the first {limits.max_pdf_pages:,} were read")
    finally:
        pdf.close()


# ---- Word ------------------------------------------------------------------------------------------------------------

def _docx(path: Path, limits: Limits) -> Iterator[PartData]:
    _need("docx")
    import docx
    from docx.table import Table

    try:
        document = docx.Document(str(path))
    except Exception as exc:   # python-docx raises whatever its zip and XML layers raise
        raise Refused("corrupt", f"not a readable DOCX ({type(exc).__name__}: {str(exc)[:100]})") from None
    paragraphs: list[str] = []
    tables: list[list[list[str]]] = []
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            rows = []
            for row in block.rows[:limits.max_rows]:
                rows.append(_row([c.text for c in row.cells], limits))
            tables.append(rows)
        elif text := " ".join(block.text.split()):
            paragraphs.append(text)
    if paragraphs:
        yield PartData("text", "text", iter([(n, [p]) for n, p in enumerate(paragraphs, start=1)]))
    for i, rows in enumerate(tables, start=1):
        yield PartData("table", f"Table {i}", iter([(n, cells) for n, cells in enumerate(rows, start=1) if cells]))


def antiword() -> str | None:
    """The ``antiword`` executable, if installed (``apt-get install antiword``)."""
    return shutil.which("antiword")


def _limit_child(seconds: int, memory: int):
    def apply() -> None:   # runs in the child before exec
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    return apply


def _doc(path: Path, limits: Limits) -> Iterator[PartData]:
    exe = antiword()
    if exe is None:
        raise Unsupported("legacy Word .doc needs antiword, which is not installed (Debian: apt-get install "
                          "antiword)")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": "/nonexistent"}
    try:
        done = subprocess.run([exe, "-w", "0", "-m", "UTF-8.txt", str(path.resolve())], capture_output=True,
                              timeout=limits.converter_seconds, env=env,
                              preexec_fn=_limit_child(limits.converter_seconds, limits.converter_memory))
    except subprocess.TimeoutExpired:
        raise Refused("partial", f"antiword took over {limits.converter_seconds} s: stopped") from None
    err = done.stderr.decode("utf-8", "replace").strip()
    if done.returncode != 0:
        if "encrypt" in err.lower():
            raise Refused("encrypted", "password-protected Word document")
        why = err.splitlines()[0][:100] if err else f"exit status {done.returncode}"
        raise Refused("corrupt", f"antiword could not read it ({why})")
    text = done.stdout[:limits.max_file_chars * 4].decode("utf-8", "replace")
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    yield PartData("text", "text", iter([(n, [p]) for n, p in enumerate((p for p in paragraphs if p), start=1)]))


# ---- plain text ------------------------------------------------------------------------------------------------------

def _text(path: Path, limits: Limits) -> Iterator[PartData]:
    encoding = decode_sample(path)
    yield PartData("text", "text", _paragraphs(path, encoding, limits))


def _paragraphs(path: Path, encoding: str, limits: Limits) -> Iterator[Item]:
    """Paragraphs at blank lines, streamed; a paragraph is cut at ``max_file_chars``."""
    n, current, size = 0, [], 0
    with open(path, encoding=encoding, errors="replace") as fh:
        for line in fh:
            if line.strip():
                if size < limits.max_file_chars:
                    current.append(line.strip())
                    size += len(line)
                continue
            if current:
                n += 1
                yield n, [" ".join(" ".join(current).split())]
                current, size = [], 0
    if current:
        yield n + 1, [" ".join(" ".join(current).split())]
