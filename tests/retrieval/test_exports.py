"""Issue #26 item 5: exports in CSV, TSV, RIS, BibTeX, JSON Lines and TREC run format, written hit by hit (a stream:
nothing is read before it is written) and safe to open (no spreadsheet formulas, escaped BibTeX)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

import pytest

from search.core.errors import InvalidRequest
from search.core.models import PaperHit, PassageHit
from search.retrieval import exports

HITS = [PaperHit(pmcid="PMC1", pmid="11", doi="10.1/x", year=2005, journal="Dev Biol", title="Dl, N & {Su(H)} 100%",
                 abstract="Line one\nline two", score=3.5),
        PaperHit(pmcid="PMC2", title="=HYPERLINK(\"http://x\")", abstract="", score=1.25)]
PASSAGES = [PassageHit(passage_id="PMC1:2:0", pmcid="PMC1", section_type="RESULTS", section_index=2,
                       paragraph_index=0, start=0, end=20, text="Dl\tbinds N\nstrongly", score=2.0, title="T")]


def test_csv_is_a_spreadsheet_safe_table_with_a_header():
    rows = list(csv.reader(io.StringIO("".join(exports.papers(HITS, "csv")))))
    assert rows[0] == list(exports.PAPER_COLUMNS)
    assert rows[1] == ["1", "PMC1", "11", "10.1/x", "2005", "Dev Biol", "Dl, N & {Su(H)} 100%", "3.5"]
    assert rows[2][6] == "'=HYPERLINK(\"http://x\")"   # a formula is text
    assert "".join(exports.papers([], "csv")) == ",".join(exports.PAPER_COLUMNS) + "\r\n"


def test_tsv_cells_have_no_tabs_or_line_breaks():
    lines = "".join(exports.passages(PASSAGES, "tsv")).splitlines()
    assert len(lines) == 2 and lines[1].split("\t")[-1] == "Dl binds N strongly"


def test_ris_and_bibtex_records():
    ris = "".join(exports.papers(HITS[:1], "ris"))
    assert ris.splitlines()[:3] == ["TY  - JOUR", "TI  - Dl, N & {Su(H)} 100%", "JO  - Dev Biol"]
    assert "AB  - Line one line two" in ris and "DO  - 10.1/x" in ris and "ER  - " in ris
    assert "UR  - https://www.ncbi.nlm.nih.gov/pmc/articles/PMC1/" in ris
    bib = "".join(exports.papers(HITS[:1], "bibtex"))
    assert bib.startswith("@article{PMC1,") and r"title = {Dl, N \& \{Su(H)\} 100\%}" in bib
    assert bib.count("{") - bib.count(r"\{") == bib.count("}") - bib.count(r"\}")
    assert "N1  - passage PMC1:2:0 (RESULTS): Dl binds N strongly" in "".join(exports.passages(PASSAGES, "ris"))


def test_jsonl_and_trec():
    lines = "".join(exports.papers(HITS, "jsonl")).splitlines()
    assert [json.loads(x)["rank"] for x in lines] == [1, 2] and json.loads(lines[0])["pmcid"] == "PMC1"
    assert "".join(exports.papers(HITS, "trec", qid="q7", tag="run1")).splitlines() == [
        "q7 Q0 PMC1 1 3.500000 run1", "q7 Q0 PMC2 2 1.250000 run1"]
    with pytest.raises(InvalidRequest):
        exports.check_trec_name("two words", "qid")


def test_an_export_writes_each_hit_before_reading_the_next():
    read: list[int] = []

    def hits() -> Iterator[PaperHit]:
        for i in range(3):
            read.append(i)
            yield HITS[0].model_copy(update={"pmcid": f"PMC{i}"})

    pieces = exports.papers(hits(), "trec")
    first = next(pieces)
    assert first.startswith("1 Q0 PMC0 1") and read == [0]


def test_accept_headers_name_formats():
    assert exports.format_from_accept("text/csv") == "csv"
    assert exports.format_from_accept("application/json, application/x-bibtex;q=0.5") == "bibtex"
    assert exports.format_from_accept("application/json") is None and exports.format_from_accept(None) is None
