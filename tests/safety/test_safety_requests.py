"""Request fields a hostile client sends where the service used to take them (issue #28, "Breaks"): ``true`` as an
integer, a team name with a trailing newline, paper ids that are paths or markup, repeated papers counted twice,
collection folders left by builds that never published, server paths in error answers."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from search.api.app import create_app
from search.core.config import Settings
from search.core.errors import InvalidRequest
from search.sessions.keys import RateLimiter, check_team_name

from helpers import PAPERS, LiveServer, build_index


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    data = tmp_path_factory.mktemp("requests") / "data"
    build_index(data)
    with LiveServer(create_app(Settings(data_dir=data, rate_limit_per_minute=0))) as srv, \
            httpx.Client(base_url=srv.url, timeout=60) as c:
        yield c, data


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


@pytest.mark.parametrize("body", [{"query": "wing", "limit": True}, {"query": "wing", "offset": False},
                                  {"query": "wing", "filters": {"year_from": True}}])
def test_true_is_not_an_integer(served, body):
    c, _ = served
    err = _error(c.post("/v1/papers/search", json=body), 422)
    assert err["code"] == "invalid_request"


def test_a_session_budget_of_true_is_refused(served):
    c, _ = served
    _error(c.post("/v1/sessions", json={"gene": "Dl", "max_papers": True}), 422)


@pytest.mark.parametrize("batch", ["0", "-17179869185", "1025", str(2 ** 70)])
def test_a_dense_build_batch_outside_its_declared_bounds_is_refused_before_any_work(served, batch):
    """The bounds are in the OpenAPI schema (schemathesis found a schema-valid 0 refused by the handler), and no
    caller can ask for one batch of every passage."""
    c, _ = served
    err = _error(c.post(f"/v1/collections/default/dense?batch_size={batch}"), 422)
    assert err["code"] == "invalid_request" and len(json.dumps(err)) < 1000
    param = next(p for p in c.get("/openapi.json").json()["paths"]["/v1/collections/{collection}/dense"]["post"]
                 ["parameters"] if p["name"] == "batch_size")
    assert param["schema"]["minimum"] == 1 and param["schema"]["maximum"] == 1024


@pytest.mark.parametrize("name", ["lab1\n", "lab1\r\n", "\nlab1", "lab 1", ""])
def test_team_names_are_matched_in_full(name):
    with pytest.raises(InvalidRequest):
        check_team_name(name)
    assert check_team_name("lab1") == "lab1"


def test_a_team_with_a_trailing_newline_is_not_another_team(served):
    c, _ = served
    r = c.get("/v1/sessions", params={"team": "lab1\n"})
    assert _error(r, 422)["details"]["field"] == "team"


def test_rate_limit_buckets_of_unknown_keys_are_pruned():
    """30,000 random key ids (each a failed-auth bucket) used to stay in memory for ever."""
    lim = RateLimiter(per_minute=600, burst=60)
    for i in range(30_000):
        lim.hit(f"failed:{i:012x}", now=i * 0.001)  # 1,000 ids a second
    assert len(lim) <= 1_100   # about one second's worth: a used bucket refills in 0.1 s at 10 requests a second
    capped = RateLimiter(per_minute=1, burst=60, max_buckets=500)  # buckets that refill slowly: the cap holds
    for i in range(5_000):
        capped.hit(f"k{i}", now=float(i))
    assert len(capped) <= 500


def test_a_limited_key_stays_limited_while_others_come_and_go():
    lim = RateLimiter(per_minute=60, burst=2, max_buckets=100)
    lim.hit("me", now=0.0)
    lim.hit("me", now=0.0)
    for i in range(3_000):   # other keys, at the same instant
        lim.hit(f"other{i}", now=0.0) if i % 2 else None
        if i % 100 == 0:
            with pytest.raises(Exception, match="Rate limit"):
                lim.hit("me", now=0.0)


# ---- API builds: paper ids and counts -----------------------------------------------------------------------------

def _paper(pmcid: str, title: str = "Wing disc growth") -> dict:
    return {"pmcid": pmcid, "title": title, "abstract": "Dpp controls growth."}


@pytest.mark.parametrize("pmcid", ["../../etc/passwd", "<script>alert(1)</script>", "", " PMC1", "PMC1\n",
                                   "a..b", "x" * 300])
def test_api_builds_refuse_paper_ids_that_are_not_ids(served, pmcid):
    c, _ = served
    bid = c.post("/v1/collections/ids/builds").json()["build_id"]
    try:
        err = _error(c.post(f"/v1/collections/ids/builds/{bid}/papers", json={"papers": [_paper(pmcid)]}), 422)
        assert "papers[0].pmcid" in err["message"]
    finally:
        c.delete(f"/v1/collections/ids/builds/{bid}")


def test_api_builds_take_the_ids_the_indexer_makes(served):
    c, _ = served
    bid = c.post("/v1/collections/ids/builds").json()["build_id"]
    ids = ["PMC123", "PMID:456", "DOI:10.1000/abc(1)-2", "MED-10", "4983"]
    r = c.post(f"/v1/collections/ids/builds/{bid}/papers", json={"papers": [_paper(i) for i in ids]})
    assert r.status_code == 200, r.text
    assert r.json()["indexed"] == len(ids)
    c.delete(f"/v1/collections/ids/builds/{bid}")


def test_indexed_counts_distinct_papers(served):
    c, _ = served
    bid = c.post("/v1/collections/counts/builds").json()["build_id"]
    papers = [_paper(f"PMC{i}") for i in range(9)] + [_paper("PMC0", "Second copy of the first paper")]
    r = c.post(f"/v1/collections/counts/builds/{bid}/papers", json={"papers": papers})
    assert r.status_code == 200, r.text
    assert (r.json()["indexed"], r.json()["duplicates"]) == (9, 1)
    assert c.post(f"/v1/collections/counts/builds/{bid}/publish").json()["indexed"] == 9
    hit = c.post("/v1/papers/search", json={"query": "second copy", "collection": "counts"}).json()["hits"]
    assert [h["pmcid"] for h in hit] == ["PMC0"]   # the last copy is the one kept


def test_builds_that_never_publish_leave_no_collection_folder(served):
    c, data = served
    for k in range(5):
        coll = f"never-{k}"
        bid = c.post(f"/v1/collections/{coll}/builds").json()["build_id"]
        c.post(f"/v1/collections/{coll}/builds/{bid}/papers", json={"papers": [_paper("PMC1")]})
        assert (data / "collections" / coll).is_dir()
        assert c.delete(f"/v1/collections/{coll}/builds/{bid}").status_code == 200
        assert not (data / "collections" / coll).exists()
    bid = c.post("/v1/collections/never-0/builds").json()["build_id"]   # the name is free again
    assert c.delete(f"/v1/collections/never-0/builds/{bid}").status_code == 200


def test_a_published_collection_keeps_its_folder_when_a_build_is_aborted(served):
    c, data = served
    bid = c.post("/v1/collections/default/builds").json()["build_id"]
    assert c.delete(f"/v1/collections/default/builds/{bid}").status_code == 200
    assert (data / "collections" / "default" / "CURRENT").exists()


# ---- no server paths in answers -----------------------------------------------------------------------------------

def test_errors_never_show_server_paths(tmp_path: Path):
    """A missing index, an unreadable ontology and a failed write each name a file: relative to the data dir."""
    data = tmp_path / "srv-data"
    with LiveServer(create_app(Settings(data_dir=data))) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        answers = [c.post("/v1/papers/search", json={"query": "wing"})]
        build_index(data, PAPERS)
        (data / "ontologies").mkdir()
        (data / "ontologies" / "go.ontology.json.gz").write_bytes(b"not gzip")
        answers.append(c.get("/v1/terms/search", params={"query": "wing", "ontology": "go"}))
        for r in answers:
            assert r.status_code >= 400
            text = json.dumps(r.json())
            assert str(tmp_path) not in text and str(data.resolve()) not in text, text
        assert "ontologies/go.ontology.json.gz" in json.dumps(answers[1].json())   # still says which file


# ---- auth off on a public address ---------------------------------------------------------------------------------

@pytest.mark.parametrize("host, auth, warned", [("0.0.0.0", False, True), ("::", False, True),
                                                ("10.1.2.3", False, True), ("api.example.org", False, True),
                                                ("127.0.0.1", False, False), ("::1", False, False),
                                                ("localhost", False, False), ("0.0.0.0", True, False)])
def test_serving_without_auth_beyond_loopback_is_warned_about(tmp_path: Path, host, auth, warned):
    from search.cli.main import serve_banner

    banner = serve_banner(Settings(data_dir=tmp_path / "data", auth=auth), host, 8000, 1, False)
    assert ("WARNING: auth is off" in banner) == warned, banner


def test_builds_open_when_the_service_stops_are_removed(tmp_path: Path):
    data = tmp_path / "data"
    build_index(data)
    with LiveServer(create_app(Settings(data_dir=data))) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        bid = c.post("/v1/collections/left-open/builds").json()["build_id"]
        c.post(f"/v1/collections/left-open/builds/{bid}/papers", json={"papers": [_paper("PMC1")]})
        live = c.post("/v1/collections/default/builds").json()["build_id"]
        assert (data / "collections" / "left-open").is_dir()
    assert not (data / "collections" / "left-open").exists()
    assert not (data / "collections" / "default" / "builds" / live).exists()
    assert (data / "collections" / "default" / "CURRENT").exists()
