"""The one fused-search path of ``SearchService`` (dense and hybrid, papers and passages) with a stand-in dense
index, so it runs without the optional dense extra: RRF of both lists, pages, fetched dense-only hits, stale ids."""

from __future__ import annotations

import pytest

from search.core.query import Filters
from search.retrieval.fusion import rrf
from search.retrieval.service import SearchService
from search.text.passages import split_passages

from helpers import PAPERS


class FakeDense:
    """Fixed dense rankings; ``PMC999999`` stands for a paper the current build no longer holds."""

    def __init__(self) -> None:
        self.papers = [("PMC100004", 0.9), ("PMC999999", 0.8), ("PMC100001", 0.7), ("PMC100002", 0.6)]
        self.passages = [(p.id, p.pmcid, 0.5) for p in split_passages(PAPERS[3])][:3]

    def search_papers(self, text: str, k: int, filters: Filters | None = None) -> list[tuple[str, float]]:
        return self.papers[:k]

    def search(self, text: str, k: int, filters: Filters | None = None) -> list[tuple[str, str, float]]:
        return self.passages[:k]


@pytest.fixture
def svc(settings) -> SearchService:
    service = SearchService(settings)
    service._dense["default"] = FakeDense()  # type: ignore[assignment]
    return service


def test_dense_papers_keep_the_dense_order_and_drop_stale_ids(svc):
    res = svc.search_papers("wing", mode="dense", limit=10)
    assert [(h.pmcid, h.score) for h in res.hits] == [("PMC100004", 0.9), ("PMC100001", 0.7), ("PMC100002", 0.6)]
    assert res.total == 4 and all(h.title for h in res.hits) and res.query["mode"] == "dense"


def test_hybrid_papers_are_the_rrf_of_both_lists_page_by_page(svc):
    lexical = [h.pmcid for h in svc.search_papers("wing", limit=100).hits]
    fused = [(k, s) for k, s in rrf([lexical, [p for p, _ in FakeDense().papers]]) if k != "PMC999999"]
    res = svc.search_papers("wing", mode="hybrid", limit=100)
    assert [(h.pmcid, h.score) for h in res.hits] == [(k, pytest.approx(s)) for k, s in fused]
    assert res.total == len(set(lexical) | {p for p, _ in FakeDense().papers})
    page = svc.search_papers("wing", mode="hybrid", limit=2, offset=1)
    everything = rrf([lexical, [p for p, _ in FakeDense().papers]])[1:3]
    assert [h.pmcid for h in page.hits] == [k for k, _ in everything if k != "PMC999999"]


def test_dense_and_hybrid_passages(svc):
    dense = svc.search_passages("wing", mode="dense", limit=10)
    assert [h.passage_id for h in dense.hits] == [pid for pid, _, _ in FakeDense().passages]
    assert all(h.text and h.score == 0.5 and h.snippet is None for h in dense.hits)
    lexical = svc.search_passages("wing", limit=100).hits
    hybrid = svc.search_passages("wing", mode="hybrid", limit=100)
    expected = rrf([[h.passage_id for h in lexical], [pid for pid, _, _ in FakeDense().passages]])
    assert [(h.passage_id, h.score) for h in hybrid.hits] == [(k, pytest.approx(s)) for k, s in expected]
    by_id = {h.passage_id: h for h in lexical}
    assert all(h.snippet == by_id[h.passage_id].snippet for h in hybrid.hits if h.passage_id in by_id)
