"""The bounds every supplementary file is read within: one place, so that a hostile or merely huge file costs at
most this much time, memory and index, and says which bound it met (status ``too_large``, ``partial`` or
``refused`` with a one-line reason)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    #: a file larger than this on disk is not read (``too_large``)
    max_file_bytes: int = 200 << 20
    #: a zip container (XLSX, DOCX, ODS) whose members would unpack to more than this is refused (a zip bomb) …
    max_unzipped_bytes: int = 1 << 30
    #: … as is one whose members unpack to more than this many times their compressed size (and over 10 MB)
    max_zip_ratio: int = 200
    max_zip_members: int = 10_000
    #: a ``.tar.gz`` package: the most bytes its members may declare together, and the most members
    max_package_bytes: int = 2 << 30
    max_package_members: int = 2_000
    #: PDF pages read (the rest: ``partial``); a PDF declaring more than ``max_pdf_pages_declared`` is refused
    max_pdf_pages: int = 2_000
    max_pdf_pages_declared: int = 1_000_000
    #: characters of text kept per file (the rest: ``partial``) and per paper (files after it: ``partial``/skipped)
    max_file_chars: int = 20_000_000
    max_paper_chars: int = 60_000_000
    #: rows per sheet, columns per row and characters per cell (beyond: ``partial``; cells are cut)
    max_rows: int = 1_000_000
    max_columns: int = 1_000
    max_cell_chars: int = 2_000
    #: merged ranges filled per sheet (more: the rest are left as written)
    max_merged: int = 100_000
    #: files per paper, and sheets or tables per file
    max_files: int = 500
    max_parts: int = 200
    #: seconds and bytes of memory for an external converter (legacy ``.doc`` through antiword)
    converter_seconds: int = 60
    converter_memory: int = 1 << 30
    #: words per passage (as article passages: ``search.text.passages``) and rows per table passage
    chunk_words: int = 300
    chunk_rows: int = 50


DEFAULT = Limits()
