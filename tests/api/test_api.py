"""The REST API over a real server on loopback: search, paper paging, limits and the one error shape."""

from __future__ import annotations

import httpx
import pytest

from helpers import PAPERS


@pytest.fixture
def http(live_server):
    with httpx.Client(base_url=live_server.url, timeout=10) as c:
        yield c


def assert_error(resp, status, code):
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"]
    return body["error"]


def test_paper_search_returns_flyaoc_fields(http):
    r = http.post("/v1/papers/search", json={"query": "Su(H)", "limit": 5, "snippets": True})
    assert r.status_code == 200
    body = r.json()
    assert body["total"] == 2
    hit = body["hits"][0]
    assert {"pmcid", "title", "abstract", "score", "gene_in_title", "snippets", "matched"} <= set(hit)
    assert any(s["highlights"] for h in body["hits"] for s in h["snippets"])
    r = http.post("/v1/papers/search", json={"query": "dorsal", "limit": 5})
    assert r.json()["hits"][0]["gene_in_title"] is True


def test_passage_search_and_filters(http):
    r = http.post("/v1/passages/search", json={"query": "Dl", "filters": {"section_types": ["RESULTS"]}})
    hits = r.json()["hits"]
    assert [h["passage_id"] for h in hits] == ["PMC100001:2:0"]
    assert hits[0]["snippet"]["highlights"]


def test_limits_are_enforced_with_clear_messages(http):
    err = assert_error(http.post("/v1/papers/search", json={"query": "wing", "limit": 500}), 422, "limit_exceeded")
    assert "100" in err["message"]
    assert_error(http.post("/v1/papers/search", json={"query": "x" * 5000}), 422, "limit_exceeded")
    assert_error(http.post("/v1/papers/search", json={"query": "  "}), 422, "invalid_request")
    assert_error(http.post("/v1/papers/search", json={"qury": "wing"}), 422, "invalid_request")
    assert_error(http.post("/v1/papers/search", json={"query": "wing", "filters": {"section_types": ["INTRODUCTION"]}}),
                 422, "invalid_request")


def test_get_paper_sections_and_errors(http):
    r = http.get("/v1/papers/PMC100002", params={"sections": "INTRO,abstract"})
    body = r.json()
    assert body["abstract"].startswith("The dl gradient")
    assert [s["type"] for s in body["sections"]] == ["INTRO"]
    r = http.get("/v1/papers/PMC100002", params={"sections": "METHODS"})
    assert r.json()["abstract"] is None
    assert_error(http.get("/v1/papers/PMC999"), 404, "not_found")
    err = assert_error(http.get("/v1/papers/PMC100002", params={"sections": "BOGUS"}), 422, "invalid_request")
    assert "INTRO" in err["details"]["valid"]


def test_long_paper_comes_in_pages_with_a_cursor(http):
    paper = PAPERS[3]
    pages, cursor = [], None
    while True:
        params = {"max_chars": 200, **({"cursor": cursor} if cursor else {})}
        body = http.get(f"/v1/papers/{paper.pmcid}", params=params).json()
        pages.append(body)
        cursor = body["next_cursor"]
        if not cursor:
            break
    assert len(pages) > 1
    text = "".join((p["abstract"] or "") + "".join("".join(s["paragraphs"]) for s in p["sections"]) for p in pages)
    expected = paper.abstract + "".join("".join(s.paragraphs) for s in paper.sections)
    assert text == expected
    assert_error(http.get(f"/v1/papers/{paper.pmcid}", params={"cursor": "garbage"}), 422, "invalid_cursor")


def test_health_stats_openapi(http):
    assert http.get("/v1/health").json()["status"] == "ok"
    stats = http.get("/v1/stats").json()
    assert stats["papers"] == len(PAPERS) and stats["passages"] > len(PAPERS) and stats["index_bytes"] > 0
    spec = http.get("/openapi.json").json()
    assert "/v1/papers/search" in spec["paths"]
    assert_error(http.get("/v1/nope"), 404, "not_found")


def test_collection_built_through_the_api(http):
    bid = http.post("/v1/collections/ir-test/builds").json()["build_id"]
    docs = [{"pmcid": "d1", "title": "", "abstract": "aerodynamic heating of wings"},
            {"pmcid": "d2", "title": "", "abstract": "boundary layer transition"}]
    assert http.post(f"/v1/collections/ir-test/builds/{bid}/papers", json={"papers": docs}).json()["indexed"] == 2
    assert http.post(f"/v1/collections/ir-test/builds/{bid}/publish").json()["indexed"] == 2
    r = http.post("/v1/papers/search", json={"query": "boundary layer", "collection": "ir-test"})
    assert [h["pmcid"] for h in r.json()["hits"]] == ["d2"]
    # the default collection is untouched
    assert http.get("/v1/stats").json()["papers"] == len(PAPERS)
    assert_error(http.post("/v1/papers/search", json={"query": "x", "collection": "Bad Name"}), 422, "invalid_request")
