"""Issue #26 over HTTP: the query language (default outside a session, plain text within one), 422 query_syntax
with a position, highlight and facets, exports by format= or Accept (streamed), the GET search (same answer as the
POST), collections and similar papers; the client's methods for each."""

from __future__ import annotations

import csv
import io

import httpx
import pytest

from search.client import Client, InvalidRequestError

from helpers import PAPERS


@pytest.fixture
def http(live_server):
    with httpx.Client(base_url=live_server.url, timeout=10) as c:
        yield c


def pmcids(body: dict) -> list[str]:
    return [h["pmcid"] for h in body["hits"]]


def test_the_query_language_is_the_default_outside_a_session(http):
    r = http.post("/v1/papers/search", json={"query": "wing -Dl"})
    assert r.status_code == 200 and pmcids(r.json()) == ["PMC100004"] and "tree" in r.json()["query"]
    plain = http.post("/v1/papers/search", json={"query": "wing -Dl", "syntax": "plain"}).json()
    assert set(pmcids(plain)) == {"PMC100001", "PMC100004"} and "tree" not in plain["query"]


def test_a_session_reads_plain_text_unless_it_asks(http):
    sid = http.post("/v1/sessions", json={"gene": "FBgn0000463", "max_papers": 3}).json()["id"]
    h = {"X-Session-Id": sid}
    r = http.post("/v1/papers/search", json={"query": 'wing -Dl "'}, headers=h)
    assert r.status_code == 200 and set(pmcids(r.json())) == {"PMC100001", "PMC100004"}
    r = http.post("/v1/papers/search", json={"query": "wing -Dl", "syntax": "query"}, headers=h)
    assert pmcids(r.json()) == ["PMC100004"]


def test_a_syntax_error_is_422_with_its_position(http):
    for r in (http.post("/v1/papers/search", json={"query": 'Su(H) "wing disc'}),
              http.get("/v1/papers/search", params={"query": 'Su(H) "wing disc'})):
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["code"] == "query_syntax" and err["details"]["position"] == 6
        assert err["details"]["rule"] == "unbalanced_quote" and err["details"]["hint"]
    r = http.post("/v1/papers/search", json={"query": "wing author:Smith"})
    assert r.json()["error"]["details"]["rule"] == "unknown_field"


def test_get_search_answers_as_the_post(http):
    body = {"query": "Dl OR wing", "limit": 3, "filters": {"year_from": 2000, "section_types": ["RESULTS"]},
            "highlight": True, "facets": ["year", "section"]}
    post = http.post("/v1/papers/search", json=body).json()
    get = http.get("/v1/papers/search", params={"query": "Dl OR wing", "limit": 3, "year_from": 2000,
                                                "section": "RESULTS", "highlight": "true",
                                                "facets": "year,section"}).json()
    for answer in (post, get):
        answer.pop("took_ms")
    assert get == post and post["facets"]["year"] and post["hits"][0]["highlight"]
    get = http.get("/v1/passages/search", params={"query": "Dl", "titles": "true", "fragment_size": 40}).json()
    assert get["hits"][0]["title"] == PAPERS[0].title and get["hits"][0]["highlight"]["text"]


def test_exports_stream_by_format_or_accept(http):
    r = http.get("/v1/papers/search", params={"query": "Dl OR wing OR Su(H)", "format": "csv"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert 'filename="flysift-papers.csv"' in r.headers["content-disposition"]
    rows = list(csv.reader(io.StringIO(r.text)))
    total = http.get("/v1/papers/search", params={"query": "Dl OR wing OR Su(H)", "limit": 1}).json()["total"]
    assert rows[0][:3] == ["rank", "pmcid", "pmid"] and len(rows) == 1 + total == 4   # every hit
    r = http.get("/v1/papers/search", params={"query": "Dl OR wing OR Su(H)", "format": "csv", "limit": 2})
    assert len(r.text.splitlines()) == 3                                      # a link's limit holds
    r = http.post("/v1/passages/search", json={"query": "Dl"}, headers={"Accept": "application/x-bibtex"})
    assert r.headers["content-type"].startswith("application/x-bibtex") and r.text.startswith("@article{")
    r = http.post("/v1/papers/search", json={"query": "Dl", "format": "trec", "trec_qid": "q1", "run_tag": "t"})
    assert r.text == "q1 Q0 PMC100001 1 " + r.text.split()[4] + " t\n"
    for fmt in ("csv", "tsv", "trec"):   # errors before the stream, as JSON (tsv writes its header first)
        r = http.post("/v1/papers/search", json={"query": "Dl", "format": fmt, "collection": "nope"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = http.post("/v1/papers/search", json={"query": "Dl", "format": "csv", "max_hits": 10**9})
    assert r.status_code == 422


def test_collections_and_similar_papers(http):
    body = http.get("/v1/collections").json()
    assert body["engine"] == "embedded" and [c["name"] for c in body["collections"]] == ["default"]
    assert body["collections"][0]["papers"] == len(PAPERS)
    r = http.get(f"/v1/papers/{PAPERS[0].pmcid}/similar")
    assert r.status_code == 200 and PAPERS[0].pmcid not in pmcids(r.json()) and r.json()["query"]["terms"]
    assert http.get("/v1/papers/PMC999/similar").status_code == 404


def test_the_client_sends_every_new_field(live_server):
    with Client(live_server.url) as c:
        res = c.search_papers("title:wing", syntax="query", highlight={"pre_tag": "[", "post_tag": "]"},
                              facets=["year"])
        assert [h.pmcid for h in res.hits] == ["PMC100001", "PMC100004"]
        assert res.hits[0].highlight == {"title": ["Delta and Notch signalling in the [wing]"]}
        assert res.facets == {"year": {"2001": 1, "2015": 1}}
        assert c.search_passages("Dl", titles=True).hits[0].title == PAPERS[0].title
        assert b"".join(c.iter_export("papers", "Dl", "tsv")).decode().splitlines()[1].startswith("1\tPMC100001")
        assert [x.name for x in c.collections()] == ["default"]
        assert c.similar_papers(PAPERS[0].pmcid).query["more_like_this"] == PAPERS[0].pmcid
        with pytest.raises(InvalidRequestError) as err:
            c.search_papers('"Dl')
        assert err.value.code == "query_syntax" and err.value.details["position"] == 0
