"""Supplementary files: extraction of real files (tests/fixtures/supplements/MANIFEST.md says where each comes from
and what a hand count found in it), header and merged-cell handling, the package reader, and hostile files, each
refused or bounded with one line."""

from __future__ import annotations

import io
import os
import tarfile
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from indexer.sources.dispatch import iter_records
from indexer.supplements.chunks import Budget
from indexer.supplements.extract import read, sniff
from indexer.supplements.files import extract_file
from indexer.supplements.limits import DEFAULT, Limits
from search.core.supplements import SupplementFile, SupplementRead, SupplementRow
from search.retrieval.supplements import as_csv, neutralise

from helpers import SHEET_ONLY_ALLELE, SUPPLEMENT_FIXTURES, needs_supplement_readers, supplement_package

REAL = SUPPLEMENT_FIXTURES / "real"


@pytest.fixture(autouse=True)
def _readers() -> None:
    needs_supplement_readers()


def extract(path: Path, limits: Limits = DEFAULT):
    entry = SupplementFile(index=1, name=path.name, status="missing", size=path.stat().st_size)
    out: list = []
    extract_file("PMC1", 2020, entry, path, limits, Budget(limits.max_file_chars, limits.max_paper_chars), out)
    return entry, out


def cells(passages) -> list[list[str]]:
    return [row for p in passages for row in p.supplement.items]


# ---- real files: what a hand count found ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["calamine-base.xlsx", "calamine-base.xls", "calamine-base.ods"])
def test_spreadsheet_formats_read_the_same_first_sheet(name: str):
    entry, passages = extract(REAL / name)
    assert entry.status == "ok"
    sheet1 = entry.parts[0]
    assert (sheet1.name, sheet1.unit, sheet1.count, sheet1.columns) == ("Sheet1", "row", 1, 10)
    row = passages[0].supplement.items[0]
    assert row[:5] == ["String", "1", "1.1", "TRUE", "FALSE"] and row[5] == "2010-10-10"
    assert passages[0].supplement.rows == (2, 2)   # as the spreadsheet numbers it


def test_tables_keep_headers_per_sheet_and_passages_say_where():
    entry, passages = extract(REAL / "calamine-table-multiple.xlsx")
    headers = [(p.name, p.header, p.count) for p in entry.parts]
    assert headers == [("Sheet1", ["Item", "Type", "Quantity"], 4), ("Sheet2", ["Item", "Price"], 4),
                       ("Sheet3", ["Item", "Units"], 9)]
    assert sum(len(r) for r in cells(passages)) + sum(len(h) for _, h, _ in headers) == 45   # the hand count
    first = passages[0]
    assert first.id == "PMC1:S1.0:0" and first.source == "supplement" and first.section_index == -1
    assert first.text.splitlines()[0] == "Item | Type | Quantity"   # every table passage repeats its header


def test_merged_header_cells_are_filled_and_two_header_rows_join():
    entry, passages = extract(SUPPLEMENT_FIXTURES / "generated" / "alleles-merged-header.xlsx")
    part = entry.parts[0]
    assert part.title == "Table S1. Alleles used" and part.merged == 1 and part.header_row == 3
    assert part.header == ["Allele", "Phenotype / wing", "Phenotype / eye"]
    assert passages[0].supplement.numbers == [4, 5] and SHEET_ONLY_ALLELE in passages[0].text


def test_pdf_text_per_page_and_docx_paragraphs_and_tables():
    entry, passages = extract(REAL / "pdfplumber-issue-33-lorem-ipsum.pdf")
    assert entry.status == "ok" and (entry.parts[0].unit, entry.parts[0].count) == ("page", 2)
    assert {p.supplement.pages for p in passages} >= {(1, 1), (2, 2)} and "Quaerat" in passages[0].text
    entry, passages = extract(REAL / "python-docx-blk-paras-and-tables.docx")
    assert [(p.kind, p.count) for p in entry.parts][:2] == [("text", 2), ("table", 0)]
    entry, passages = extract(SUPPLEMENT_FIXTURES / "generated" / "methods-and-stocks.docx")
    table = next(p for p in passages if p.supplement.sheet == "Table 1")
    assert entry.parts[1].header == ["Stock", "Genotype"] and "Su(H)[SF8]" in table.text


@pytest.mark.parametrize("name", ["calamine-password.xlsx", "calamine-password.xls", "pdfplumber-password-example.pdf"])
def test_password_protected_files_are_encrypted_not_corrupt(name: str):
    entry, passages = extract(REAL / name)
    assert entry.status == "encrypted" and entry.reason and not passages


def test_csv_encoding_and_dialect_are_detected(tmp_path: Path):
    latin = tmp_path / "t.tsv"
    rows = ["gène\tallèle\tremarque"] + [f"Dl\tDl[{i}]\tdéveloppement de l'aile, génétique élémentaire"
                                          for i in range(40)]
    latin.write_bytes("\n".join(rows).encode("latin-1"))
    entry, passages = extract(latin)
    assert entry.parts[0].header == ["gène", "allèle", "remarque"]
    assert cells(passages)[0] == ["Dl", "Dl[0]", "développement de l'aile, génétique élémentaire"]


def test_a_100000_row_sheet_streams_in_bounded_memory(tmp_path: Path):
    """Reading is a stream: the first rows come before the rest is read, and reading all of them holds a few rows."""
    big = tmp_path / "big.csv"
    with open(big, "w") as fh:
        fh.write("allele,gene,phenotype\n")
        for i in range(100_000):
            fh.write(f"Dl[{i}],Dl,wing notching phenotype number {i}\n")
    part = next(read(big, sniff(big), DEFAULT))
    tracemalloc.start()
    n = sum(1 for _ in part.items)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert n == 100_001 and peak < 2_000_000, peak   # the file is 5 MB


def test_a_file_over_the_text_limit_is_partial_and_keeps_what_was_read(tmp_path: Path):
    big = tmp_path / "t.csv"
    big.write_text("a,b\n" + "".join(f"x{i},y{i}\n" for i in range(5000)))
    entry, passages = extract(big, Limits(max_file_chars=10_000))
    assert entry.status == "partial" and "text limit" in (entry.reason or "") and passages


# ---- the package ----------------------------------------------------------------------------------------------

def test_a_package_directory_indexes_its_files_and_reports_the_rest(tmp_path: Path):
    items = list(iter_records([supplement_package(tmp_path / "pkg")]))
    assert len(items) == 1 and items[0].reject is None   # supplement files are not inputs of their own
    paper = items[0].paper
    status = {f.name: (f.status, f.origin) for f in paper.supplements}
    assert status == {"S1.xlsx": ("ok", "xml"), "S2.csv": ("ok", "xml"), "S4.pdf": ("ok", "xml"),
                      "../../etc/passwd": ("missing", "xml"), "Movie_S1.mov": ("missing", "xml"),
                      "S3.docx": ("ok", "package")}
    assert [f.index for f in paper.supplements] == [1, 2, 3, 4, 5, 6]
    assert {p.pmcid for p in items[0].supplement_passages} == {"PMC990001"}


def test_a_symbolic_link_beside_the_article_is_refused(tmp_path: Path):
    pkg = supplement_package(tmp_path / "pkg")
    (tmp_path / "secret.csv").write_text("a,b\nsecret,1\n")
    os.symlink(tmp_path / "secret.csv", pkg / "S9.csv")
    paper = next(iter_records([pkg])).paper
    link = next(f for f in paper.supplements if f.name == "S9.csv")
    assert link.status == "refused" and "link" in (link.reason or "")


def _tar(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path


def test_a_tar_gz_package_with_traversal_and_links_reads_only_its_safe_members(tmp_path: Path):
    article = (SUPPLEMENT_FIXTURES.parents[1] / "helpers.py").read_text().split('SUPPLEMENT_ARTICLE = """')[1]
    article = article.split('"""')[0]
    pkg = _tar(tmp_path / "PMC990001.tar.gz", {"PMC990001/article.nxml": article.encode(),
                                                "PMC990001/S2.csv": b"gene,go_id\nDl,GO:0007219\n",
                                                "../../outside.csv": b"a,b\n1,2\n", "/etc/abs.csv": b"a\n"},
               links={"PMC990001/S1.xlsx": "/etc/passwd"})
    items = list(iter_records([pkg]))
    files = {f.name: f for f in items[0].paper.supplements}
    assert files["S2.csv"].status == "ok"
    assert files["S1.xlsx"].status == "refused"             # a link in the archive
    assert files["outside.csv"].status == "refused" and ".." in (files["outside.csv"].reason or "")
    assert files["abs.csv"].status == "refused" and "absolute" in (files["abs.csv"].reason or "")
    assert not (tmp_path.parent / "outside.csv").exists()
    assert any("refused" in w for w in items[0].warnings)   # one line each in the indexing run


# ---- hostile files --------------------------------------------------------------------------------------------

def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def test_a_zip_bomb_xlsx_is_refused_before_any_reader_opens_it(tmp_path: Path):
    bomb = _zip(tmp_path / "bomb.xlsx", {"[Content_Types].xml": b"<Types/>", "xl/workbook.xml": b"<workbook/>",
                                          "xl/worksheets/sheet1.xml": b"\0" * (60 << 20)})
    entry, passages = extract(bomb)
    assert entry.status == "refused" and entry.reason.startswith("zip bomb") and not passages


def test_a_zip_bomb_is_measured_not_trusted(tmp_path: Path):
    """Headers that claim a small size do not get a member past the limit: the bytes are counted as they unpack."""
    bomb = _zip(tmp_path / "bomb.docx", {"word/document.xml": b"<w:document/>" + b" " * (3 << 20)})
    entry, _ = extract(bomb, Limits(max_unzipped_bytes=1 << 20))
    assert entry.status == "refused" and "zip bomb" in (entry.reason or "")


def test_billion_laughs_in_a_docx_is_refused(tmp_path: Path):
    laughs = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]>'
              b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p>'
              b'<w:r><w:t>&lol2;</w:t></w:r></w:p></w:body></w:document>')
    doc = _zip(tmp_path / "laughs.docx", {"[Content_Types].xml": b"<Types/>", "word/document.xml": laughs})
    entry, passages = extract(doc)
    assert entry.status == "refused" and "DTD or entities" in (entry.reason or "") and not passages


def test_path_traversal_inside_an_office_zip_is_refused(tmp_path: Path):
    evil = _zip(tmp_path / "evil.xlsx", {"xl/workbook.xml": b"<workbook/>", "../../evil.xml": b"<x/>"})
    entry, _ = extract(evil)
    assert entry.status == "refused" and ".." in (entry.reason or "")


def test_pdf_page_counts_are_bounded():
    pdf = REAL / "pdfplumber-issue-33-lorem-ipsum.pdf"
    entry, passages = extract(pdf, Limits(max_pdf_pages=1))
    assert entry.status == "partial" and "first 1 were read" in (entry.reason or "")
    assert {p.supplement.pages for p in passages} == {(1, 1)}
    entry, passages = extract(pdf, Limits(max_pdf_pages_declared=1))
    assert entry.status == "refused" and "declares 2 pages" in (entry.reason or "") and not passages


def test_damaged_and_mislabelled_files_are_one_line_each(tmp_path: Path):
    (tmp_path / "a.pdf").write_bytes(b"<html>not a pdf</html>")
    (tmp_path / "b.xlsx").write_bytes(b"PK\x03\x04" + b"\0" * 100)
    (tmp_path / "c.png").write_bytes(b"\x89PNG\r\n")
    out = {p.name: extract(p)[0] for p in sorted(tmp_path.iterdir())}
    assert [(e.status, "\n" not in (e.reason or "")) for e in out.values()] == [
        ("corrupt", True), ("corrupt", True), ("unsupported", True)]


def test_legacy_doc_without_antiword_is_unsupported_with_the_way_to_get_it(tmp_path: Path, monkeypatch):
    import indexer.supplements.extract as ex

    monkeypatch.setattr(ex, "antiword", lambda: None)
    doc = tmp_path / "S1.doc"
    doc.write_text("plain text saved as .doc\n")   # text named .doc: read as text, no converter needed
    assert extract(doc)[0].status == "ok"
    ole = tmp_path / "S2.doc"
    ole.write_bytes((REAL / "calamine-base.xls").read_bytes())   # an OLE2 workbook named .doc is still a workbook
    assert extract(ole)[0].status == "ok"


def test_csv_export_neutralises_formulas_but_not_numbers():
    assert [neutralise(c) for c in ["=1+2", "+SUM(A1)", "-2+3", "@cmd", "\tx", "-2", "+1.5e3", "Dl"]] == [
        "'=1+2", "'+SUM(A1)", "'-2+3", "'@cmd", "'\tx", "-2", "+1.5e3", "Dl"]
    from search.core.supplements import SupplementPart

    page = SupplementRead(pmcid="PMC1", file=SupplementFile(index=1, name="t.csv", status="ok"),
                          part=SupplementPart(index=0, name="t", kind="table", unit="row", header=["=h", "b"]),
                          start=2, rows=[SupplementRow(n=2, cells=['=HYPERLINK("http://x")', "-2"])])
    assert as_csv(page) == "'=h,b\n\"'=HYPERLINK(\"\"http://x\"\")\",-2\n"
