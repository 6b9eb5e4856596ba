"""Supplement passages in every engine: a PMC-style package indexed with its files, found by what is only in a
sheet (papers and passages, with file, sheet and rows), filtered by ``source``, read back by row range, the same in
the embedded engine and on the cluster."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from indexer.pipeline import index_corpus
from search.core.config import Settings
from search.core.query import Filters
from search.retrieval.service import SearchService
from search.services import Services

from helpers import SHEET_ONLY_ALLELE, cluster_flavours, find_cluster_node, needs_supplement_readers, supplement_package


@pytest.fixture(params=["embedded", *(pytest.param(f"cluster:{f}", marks=pytest.mark.cluster)
                                     for f in cluster_flavours())])
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SearchService]:
    needs_supplement_readers()
    node = None
    if request.param.startswith("cluster:"):
        node = find_cluster_node(request.param.partition(":")[2])
        prefix = f"fst-{uuid.uuid4().hex[:10]}"
        settings = Settings(data_dir=tmp_path / "data", cluster_url=node.url, cluster_flavour=node.flavour,
                            cluster_index_prefix=prefix)
    else:
        settings = Settings(data_dir=tmp_path / "data", engine="embedded")
    summary = index_corpus([supplement_package(tmp_path / "pkg")], Services.open(settings), workers=1)
    assert summary.indexed == 1 and summary.rejected == 0
    svc = SearchService(settings)
    yield svc
    svc.engine().close()
    if node is not None:
        node.cleanup(prefix)


def test_an_allele_only_in_a_sheet_finds_the_paper_and_the_row(service: SearchService):
    papers = service.search_papers(SHEET_ONLY_ALLELE, snippets=True)
    assert [h.pmcid for h in papers.hits] == ["PMC990001"]
    where = papers.hits[0].supplement
    assert where is not None and (where.file, where.sheet, where.rows) == ("S1.xlsx", "Alleles", (4, 5))
    passages = service.search_passages(SHEET_ONLY_ALLELE)
    hit = passages.hits[0]
    assert hit.source == "supplement" and hit.passage_id == "PMC990001:S1.0:0"
    assert hit.supplement is not None and hit.supplement.rows == (4, 5) and SHEET_ONLY_ALLELE in hit.text
    assert hit.snippet is not None and hit.snippet.highlights


def test_source_filters_split_articles_from_supplements(service: SearchService):
    assert service.search_papers(SHEET_ONLY_ALLELE, filters=Filters(source="paper")).total == 0
    assert service.search_papers(SHEET_ONLY_ALLELE, filters=Filters(source="supplement")).total == 1
    article = service.search_passages("dorsoventral boundary", filters=Filters(source="paper"))
    assert article.total == 1 and article.hits[0].source == "paper" and article.hits[0].supplement is None
    assert service.search_passages("dorsoventral boundary", filters=Filters(source="supplement")).total == 0
    go = service.search_passages("GO:0007219", filters=Filters(source="supplement"))
    assert go.total == 1 and go.hits[0].supplement.file == "S2.csv"   # an id found only in a supplement


def test_the_registry_and_row_reads_come_back_from_the_engine(service: SearchService):
    files = service.supplements("PMC990001").files
    assert [(f.index, f.name, f.status) for f in files] == [
        (1, "S1.xlsx", "ok"), (2, "S2.csv", "ok"), (3, "S4.pdf", "ok"), (4, "../../etc/passwd", "missing"),
        (5, "Movie_S1.mov", "missing"), (6, "S3.docx", "ok")]
    page = service.read_supplement("PMC990001", "1", part="Alleles")
    assert page.part.header == ["Allele", "Phenotype / wing", "Phenotype / eye"]
    assert [(r.n, r.cells[0]) for r in page.rows] == [(4, SHEET_ONLY_ALLELE), (5, "Ser[Bd-G]")]
    assert page.next_start is None
    one = service.read_supplement("PMC990001", "S1.xlsx", start=5, limit=1)
    assert [r.n for r in one.rows] == [5] and one.next_start is None
    first = service.read_supplement("PMC990001", "1", limit=1)
    assert [r.n for r in first.rows] == [4] and first.next_start == 5
    pages = service.read_supplement("PMC990001", "3")
    assert [r.n for r in pages.rows] == [1, 2] and pages.part.unit == "page"


def test_paper_text_and_dense_scan_stay_the_articles(service: SearchService):
    text = service.paper_text("PMC990001")
    assert SHEET_ONLY_ALLELE not in str(text.model_dump())
    assert all(p.source == "paper" for p, _ in service.engine().scan_passages())


@pytest.mark.cluster
def test_both_engines_score_a_supplement_hit_alike(tmp_path: Path):
    """Parity: the embedded engine and the cluster rank and score the same (when a node is configured)."""
    needs_supplement_readers()
    node = find_cluster_node(cluster_flavours()[0])
    prefix = f"fst-{uuid.uuid4().hex[:10]}"
    pkg = supplement_package(tmp_path / "pkg")
    embedded = Settings(data_dir=tmp_path / "e", engine="embedded")
    cluster = Settings(data_dir=tmp_path / "c", cluster_url=node.url, cluster_flavour=node.flavour,
                       cluster_index_prefix=prefix)
    try:
        scores = []
        for settings in (embedded, cluster):
            index_corpus([pkg], Services.open(settings), workers=1)
            svc = SearchService(settings)
            scores.append([round(h.score, 4) for h in svc.search_passages(f"{SHEET_ONLY_ALLELE} Notch").hits])
            scores.append([round(h.score, 4) for h in svc.search_papers(SHEET_ONLY_ALLELE).hits])
        assert scores[0] == scores[2] and scores[1] == scores[3]
    finally:
        node.cleanup(prefix)
