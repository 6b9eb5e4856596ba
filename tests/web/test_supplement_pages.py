"""Supplementary files in the workbench: the paper page lists them, a page shows a part of one (rows with the header,
query words marked), search hits in a supplement link there, and file names are looked up, never paths."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from indexer.pipeline import index_corpus
from search.api.app import create_app
from search.core.config import Settings
from search.services import Services

from helpers import SHEET_ONLY_ALLELE, LiveServer, needs_supplement_readers, supplement_package


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    needs_supplement_readers()
    root: Path = tmp_path_factory.mktemp("wb-supp")
    settings = Settings(data_dir=root / "data")
    index_corpus([supplement_package(root / "pkg")], Services.open(settings), workers=1)
    with LiveServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        yield c


def test_the_paper_page_lists_its_supplementary_files(web):
    html = web.get("/papers/PMC990001").text
    assert 'href="#supplements"' in html and 'id="supplements"' in html
    assert '<a href="/papers/PMC990001/supplements/1">Table S1</a>' in html and "Alleles used." in html
    assert '<span class="badge warn">missing</span>' in html   # the escape attempt and the movie were not found


def test_a_sheet_page_shows_its_rows_under_the_header_with_marks(web):
    r = web.get("/papers/PMC990001/supplements/2", params={"q": "Ser"})
    assert r.status_code == 200
    html = r.text
    assert '<th scope="col">gene</th><th scope="col">go_id</th><th scope="col">note</th>' in html
    assert '<mark class="q">Ser</mark>' in html
    assert "<script" not in html.replace('<script src="/static/workbench.js" defer></script>', "")
    sheet = web.get("/papers/PMC990001/supplements/1", params={"part": "Alleles"}).text
    assert SHEET_ONLY_ALLELE.replace("[", "[") in sheet


def test_supplement_hits_link_to_the_supplement_page(web):
    html = web.get("/", params={"q": "Ser", "kind": "passages"}).text
    assert 'href="/papers/PMC990001/supplements/2?part=0' in html and "supplement S2.csv" in html


def test_unavailable_and_unknown_files_are_error_pages(web):
    missing = web.get("/papers/PMC990001/supplements/4")
    assert missing.status_code == 409 and "supplement_unavailable" in missing.text
    for name in ("..%2F..%2Fetc%2Fpasswd", "Table_S9.xls", "99"):
        assert web.get(f"/papers/PMC990001/supplements/{name}").status_code == 404, name


def test_marking_terms_without_an_ontology_says_so(web):
    r = web.get("/papers/PMC990001", params={"terms": "1"})
    assert r.status_code == 200 and "No ontology is indexed" in r.text
