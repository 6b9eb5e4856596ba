"""The Python client against a real server on loopback: typed results, paging, builds and typed errors."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest

from search.api.app import create_app
from search.client import (
    AsyncClient,
    BudgetExhausted,
    Client,
    ClientError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    RateLimited,
    Unavailable,
    error_from_response,
)
from search.core.config import Settings
from search.core.models import Gene, IndexStats, Paper, PaperSearchResults, PaperText, PassageSearchResults, Section
from search.engines.embedded.terms import TermIndex
from search.ontology.model import Ontology
from search.schema.sessions import Coverage, Session
from search.text.lexicon import Lexicon

from helpers import PAPERS, LiveServer, build_index, term_service


@pytest.fixture
def client(live_server):
    with Client(live_server.url, timeout=10) as c:
        yield c


def test_health_stats_and_search(client):
    assert client.health()["status"] == "ok"
    stats = client.stats()
    assert isinstance(stats, IndexStats) and stats.papers == len(PAPERS)
    res = client.search_papers("Su(H)", limit=5, snippets=True)
    assert isinstance(res, PaperSearchResults)
    assert {h.pmcid for h in res.hits} == {"PMC100001", "PMC100003"}
    res = client.search_passages("Dl", filters={"section_types": ["RESULTS"]})
    assert isinstance(res, PassageSearchResults)
    assert [h.passage_id for h in res.hits] == ["PMC100001:2:0"]


def test_get_paper_and_pages(client):
    page = client.get_paper("PMC100002", sections=["INTRO", "abstract"])
    assert isinstance(page, PaperText) and page.abstract.startswith("The dl gradient")
    assert [s.type for s in page.sections] == ["INTRO"]
    paper = PAPERS[3]
    pages = list(client.iter_paper_pages(paper.pmcid, max_chars=200))
    assert len(pages) > 1 and pages[-1].next_cursor is None
    text = "".join((p.abstract or "") + "".join("".join(s.paragraphs) for s in p.sections) for p in pages)
    assert text == paper.abstract + "".join("".join(s.paragraphs) for s in paper.sections)


def test_errors_are_typed_with_the_api_code(client):
    with pytest.raises(NotFoundError) as exc:
        client.get_paper("PMC999")
    assert exc.value.code == "not_found" and exc.value.status == 404 and "PMC999" in exc.value.message
    with pytest.raises(InvalidRequestError) as exc:
        client.search_papers("wing", limit=500)
    assert exc.value.code == "limit_exceeded" and exc.value.details["max"] == 100
    with pytest.raises(InvalidRequestError) as exc:
        client.get_paper("PMC100002", sections=["BOGUS"])
    assert "INTRO" in exc.value.details["valid"]


def test_unreachable_service_raises_unavailable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Client(f"http://127.0.0.1:{port}", timeout=2) as c, pytest.raises(Unavailable) as exc:
        c.health()
    assert exc.value.code == "unreachable" and f"127.0.0.1:{port}" in exc.value.message


def test_collection_build_through_the_api(client):
    build = client.create_build("extra")
    papers = [Paper(pmcid="PMC900001", title="Hedgehog in the eye", abstract="hh drives the furrow.",
                    sections=[Section(type="RESULTS", paragraphs=["hh mutant clones stop the furrow."])]),
              {"pmcid": "PMC900002", "title": "Wingless", "abstract": "wg in the wing."}]
    assert client.add_papers("extra", build["build_id"], papers)["indexed"] == 2
    summary = client.publish_build("extra", build["build_id"])
    assert summary.indexed == 2
    res = client.search_papers("furrow", collection="extra")
    assert [h.pmcid for h in res.hits] == ["PMC900001"]
    assert client.search_papers("furrow").total == 0  # the default collection is untouched
    with pytest.raises(NotFoundError):
        client.publish_build("extra", build["build_id"])
    empty = client.create_build("extra")["build_id"]
    with pytest.raises(ConflictError) as e:  # an empty build never replaces the live one
        client.publish_build("extra", empty, allow_shrink=True)
    assert e.value.code == "build_refused"
    assert client.abort_build("extra", empty)["aborted"] is True
    assert client.stats("extra").papers == 2


def test_async_client_has_the_same_methods(live_server):
    async def run():
        async with AsyncClient(live_server.url, timeout=10) as c:
            res = await c.search_papers("dorsal", limit=3)
            pages = [p async for p in c.iter_paper_pages("PMC100004", max_chars=300)]
            with pytest.raises(NotFoundError):
                await c.get_paper("PMC999")
            return res, pages

    res, pages = asyncio.run(run())
    assert res.hits[0].pmcid == "PMC100002" and res.hits[0].gene_in_title
    assert len(pages) > 1


def test_session_methods_need_a_session():
    with Client("http://127.0.0.1:9") as c, pytest.raises(ValueError, match="create_session"):
        c.get_trace()


@pytest.mark.parametrize("status, body, headers, cls, code, retry_after", [
    (402, {"error": {"code": "budget_exhausted", "message": "Paper limit reached (16/16). Submit your annotations.",
                     "details": {}}}, {}, BudgetExhausted, "budget_exhausted", None),
    (429, {"error": {"code": "rate_limited", "message": "slow down", "details": {}}}, {"Retry-After": "3"},
     RateLimited, "rate_limited", 3.0),
    (503, {"error": {"code": "index_missing", "message": "no index", "details": {}}}, {"Retry-After": "5"},
     Unavailable, "index_missing", 5.0),
    (502, "Bad Gateway", {}, ClientError, "http_502", None),
])
def test_error_mapping(status, body, headers, cls, code, retry_after):
    kw = {"json": body} if isinstance(body, dict) else {"text": body}
    err = error_from_response(httpx.Response(status, headers=headers, **kw))
    assert type(err) is cls and err.code == code and err.status == status
    assert getattr(err, "retry_after", None) == retry_after
    assert err.message == (body["error"]["message"] if isinstance(body, dict) else body)


@pytest.fixture(scope="module")
def full_api(tmp_path_factory):
    """A served flysift with a lexicon and the mini GO, for sessions and terms."""
    data = tmp_path_factory.mktemp("data")
    build_index(data)
    Lexicon([Gene(id="FBgn0000463", symbol="Dl", fullname="Delta")]).save(data / "lexicon.tsv")
    term_service(data).index_ontology(Ontology.load(Path(__file__).parents[1] / "fixtures" / "mini.obo", "go",
                                                   cache_dir=tmp_path_factory.mktemp("cache")), TermIndex(data).write)
    with LiveServer(create_app(Settings(data_dir=data))) as srv:
        yield srv


def test_session_lifecycle(full_api):
    with Client(full_api.url) as c:
        s = c.create_session("Dl", team="lab", max_papers=1, synonym_policy="registered",
                             hidden_terms={"ids": ["GO:0005667"]}, label="client test")
        assert isinstance(s, Session) and s.gene.id == "FBgn0000463" and s.max_papers == 1
        c.session_id = s.id
        assert c.register_names(["Dl-2", "Dl-2 "]) == ["Dl-2"]
        c.search_papers("Notch", gene="Dl")
        c.get_paper("PMC100001")
        with pytest.raises(BudgetExhausted) as exc:
            c.get_paper("PMC100002")
        assert exc.value.message == "Paper limit reached (1/1). Submit your annotations."
        report = c.submit({"gene_id": "FBgn0000463", "gene_symbol": "Dl", "task1_function": [],
                           "task2_expression": [], "task3_synonyms": {"fullname_synonyms": [], "symbol_synonyms": []}})
        assert report.valid and report.annotation_count.task1_go_terms == 0
        assert [x.valid for x in c.get_submissions()] == [True]
        assert c.get_session().papers_read == ["PMC100001"]
        assert [x.id for x in c.list_sessions(team="lab")] == [s.id]
        trace = c.get_trace()
        assert [e.tool for e in trace][:3] == ["register_names", "search_papers", "get_paper"]
        assert trace[3].error["code"] == "budget_exhausted"
        cov = c.get_coverage(["PMC100001", "PMC100003"])
        assert isinstance(cov, Coverage) and cov.read == ["PMC100001"] and cov.read_fraction == 0.5
        assert c.close_session().status == "closed"
        with pytest.raises(ConflictError) as exc:
            c.register_names(["x"])
        assert exc.value.code == "session_closed"
        with pytest.raises(NotFoundError):
            c.get_session("ses_missing")


def test_term_methods(full_api):
    with Client(full_api.url) as c:
        res = c.search_terms("nucleus", aspect="C", limit=3)
        assert res.hits[0].id == "GO:0005634"
        assert "GO:0005667" not in [h.id for h in c.search_terms("transcription", hidden=["GO:0005667"]).hits]
        assert c.get_term("GO:0042051").id == "GO:0001745"  # an alternative id
        assert "GO:0005575" in [t.id for t in c.related_terms("GO:0005634", "ancestors").terms]
        assert c.resolve_terms("compound eye morphogenesis").results[0].id == "GO:0001745"
        assert c.flyaoc_search_terms("go", "nucleus", aspect="C")[0]["go_id"] == "GO:0005634"
        kids = c.flyaoc_term_children("GO:0032991")
        assert kids["children"][0]["go_id"] == "GO:0005667" and kids["truncated"] is False
        with pytest.raises(NotFoundError):
            c.get_term("GO:0005667", hidden="GO:0005667")
