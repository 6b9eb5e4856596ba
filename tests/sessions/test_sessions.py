"""Sessions through the REST API on a real loopback server: budgets, synonym policies, traces, coverage, submissions."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from search.api.app import create_app
from search.core.config import Settings
from search.core.models import Gene, Paper, Section, Term
from search.ontology.model import Ontology
from search.schema.hidden import HiddenSpec
from search.schema.sessions import Session
from search.sessions.policy import hidden_ids_for
from search.text.lexicon import Lexicon

from helpers import PAPERS, LiveServer, build_index

EXTRA = [
    Paper(pmcid="PMC100005", year=1990, title="Homeotic genes of the bithorax complex",
          abstract="The old name iab-4 was used for this homeotic gene.",
          sections=[Section(type="RESULTS", paragraphs=["iab-4 mutants transform segments. " * 12])]),
    Paper(pmcid="PMC100006", year=1992, title="Segment identity",
          abstract="Alleles of infra-abdominal 4 were mapped.", sections=[]),
]
GENES = [
    Gene(id="FBgn0000014", symbol="abd-A", fullname="abdominal A", symbol_synonyms=["iab-4"],
         fullname_synonyms=["infra-abdominal 4"]),
    Gene(id="FBgn0000463", symbol="Dl", fullname="Delta"),
    Gene(id="FBgn0000499", symbol="dl", fullname="dorsal"),
]
NO_MATCH = "zebrafish"  # matches no paper: hits come from the gene expansion alone


def make_data(root: Path) -> Path:
    """A small index (the shared papers plus two with abd-A's old names) and a lexicon in the data dir."""
    d = root / "data"
    build_index(d, PAPERS + EXTRA)
    Lexicon(GENES).save(d / "lexicon.tsv")
    return d


def write_ground_truth(path: Path) -> Path:
    rows = [{"gene_id": "FBgn0000014", "gene_symbol": "abd-A",
             "task1_function": [{"go_id": "GO:0005634", "pmcid": "PMC100003", "in_corpus": True},
                                {"go_id": "GO:0003700", "pmcid": "PMC100005", "in_corpus": True},
                                {"go_id": "GO:0003700", "pmcid": "PMC999999", "in_corpus": False}],
             "task2_expression": [{"anatomy_id": None, "pmcid": "PMC100006", "in_corpus": True}],
             "task3_synonyms": {"current_fullname": "abdominal A", "fullname_synonyms": [], "symbol_synonyms": []}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def http(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("sessions")
    d = make_data(tmp_path)
    app = create_app(Settings(data_dir=d, ground_truth=write_ground_truth(tmp_path / "gt.jsonl")))
    with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        yield c


def new_session(http, **kw) -> str:
    r = http.post("/v1/sessions", json={"gene": "abd-A", **kw})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def read(http, sid, pmcid, **params):
    return http.get(f"/v1/papers/{pmcid}", params=params, headers={"X-Session-Id": sid})


def err(r, status, code) -> dict:
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    return r.json()["error"]


# ---- lifecycle ----------------------------------------------------------------------------------------------------

def test_create_get_list_close(http):
    r = http.post("/v1/sessions", json={"gene": "FBgn0000463", "team": "lab1", "max_papers": 4,
                                        "hidden_terms": {"set": "flyaoc", "ids": ["GO:0005634"]}})
    s = r.json()
    assert r.status_code == 201 and s["id"].startswith("ses_")
    assert s["gene"]["symbol"] == "Dl" and s["team"] == "lab1" and s["max_papers"] == 4
    assert s["budget_policy"] == "distinct" and s["synonym_policy"] == "snapshot" and s["status"] == "open"
    assert http.get(f"/v1/sessions/{s['id']}").json() == s
    other = new_session(http, team="lab2")
    assert [x["id"] for x in http.get("/v1/sessions", params={"team": "lab1"}).json()["sessions"]] == [s["id"]]
    assert [x["id"] for x in http.get("/v1/sessions", params={"team": "lab2"}).json()["sessions"]] == [other]
    assert other not in [x["id"] for x in http.get("/v1/sessions").json()["sessions"]]  # default team: local
    closed = http.post(f"/v1/sessions/{s['id']}/close").json()
    assert closed["status"] == "closed" and closed["closed_at"]
    err(read(http, s["id"], "PMC100001"), 409, "session_closed")
    err(http.get("/v1/sessions/ses_nope"), 404, "session_not_found")
    err(http.post("/v1/papers/search", json={"query": "Dl"}, headers={"X-Session-Id": "ses_nope"}), 404,
        "session_not_found")


@pytest.mark.parametrize("body,code", [({"gene": "abd-A", "max_papers": 0}, "invalid_request"),
                                       ({"gene": "abd-A", "max_papers": 1001}, "invalid_request"),
                                       ({"gene": "abd-A", "synonym_policy": "all"}, "invalid_request"),
                                       ({"gene": "abd-A", "hidden_terms": {"set": "nope"}}, "invalid_request"),
                                       ({"gene": "ABD-A"}, "gene_not_found"),
                                       ({"gene": "iab-4"}, "gene_not_found")])
def test_create_refuses_bad_input(http, body, code):
    e = err(http.post("/v1/sessions", json=body), 404 if code == "gene_not_found" else 422, code)
    if body["gene"] == "iab-4":
        assert "abd-A (FBgn0000014)" in e["message"]


# ---- budget -------------------------------------------------------------------------------------------------------

def test_distinct_budget_through_rest(http):
    sid = new_session(http, max_papers=2)
    r = read(http, sid, "PMC100001")
    assert r.status_code == 200 and r.headers["X-Budget-Used"] == "1" and r.headers["X-Budget-Max"] == "2"
    assert read(http, sid, "PMC100001", sections="RESULTS").headers["X-Budget-Used"] == "1"  # re-read is free
    err(read(http, sid, "PMC404404"), 404, "not_found")  # unknown paper costs nothing
    assert http.post("/v1/papers/search", json={"query": "Dl"}, headers={"X-Session-Id": sid}).status_code == 200
    assert read(http, sid, "PMC100002").headers["X-Budget-Used"] == "2"
    e = err(read(http, sid, "PMC100003"), 409, "budget_exhausted")
    assert e["message"] == "Paper limit reached (2/2). Submit your annotations."
    assert e["details"] == {"used": 2, "max_papers": 2}
    assert read(http, sid, "PMC100002").status_code == 200  # papers already read stay readable
    s = http.get(f"/v1/sessions/{sid}").json()
    assert s["budget_used"] == 2 and s["papers_read"] == ["PMC100001", "PMC100002"]
    assert http.get("/v1/papers/PMC100003").status_code == 200  # no session, no budget


def test_flyaoc_budget_counts_every_call(http):
    sid = new_session(http, max_papers=3, budget_policy="flyaoc")
    page = read(http, sid, "PMC100005", max_chars=200)
    assert page.headers["X-Budget-Used"] == "1" and page.json()["next_cursor"]
    more = read(http, sid, "PMC100005", max_chars=200, cursor=page.json()["next_cursor"])
    assert more.status_code == 200 and more.headers["X-Budget-Used"] == "1"  # a continuation is the same read
    assert read(http, sid, "PMC100005").headers["X-Budget-Used"] == "2"  # a new call on the same paper costs
    err(read(http, sid, "PMC404404"), 404, "not_found")  # and so does an unknown pmcid, as in the reference
    e = err(read(http, sid, "PMC100001"), 409, "budget_exhausted")
    assert e["message"].startswith("Paper limit reached (3/3).")
    s = http.get(f"/v1/sessions/{sid}").json()
    assert s["budget_used"] == 3 and s["papers_read"] == ["PMC100005", "PMC404404"]


# ---- synonym expansion --------------------------------------------------------------------------------------------

def _matched(http, sid: str | None, path="/v1/papers/search") -> dict[str, list[str]]:
    headers = {"X-Session-Id": sid} if sid else {}
    r = http.post(path, json={"query": NO_MATCH, "gene": "abd-A", "limit": 20}, headers=headers)
    assert r.status_code == 200, r.text
    return {h["pmcid"]: h["matched"] for h in r.json()["hits"]}


@pytest.mark.parametrize("policy,expected", [
    ("none", {}),
    ("snapshot", {"PMC100003": ["abd-A"]}),
    ("registered", {"PMC100003": ["abd-A"], "PMC100005": ["iab-4"]}),
    ("full", {"PMC100003": ["abd-A"], "PMC100005": ["iab-4"], "PMC100006": ["infra-abdominal 4"]}),
])
def test_gene_expansion_follows_the_policy(http, policy, expected):
    sid = new_session(http, synonym_policy=policy)
    r = http.post(f"/v1/sessions/{sid}/names", json={"names": [" iab-4 ", "iab-4"]})
    assert r.json()["registered_names"] == ["iab-4"]
    assert _matched(http, sid) == expected
    passages = _matched(http, sid, "/v1/passages/search")
    assert set(passages) == set(expected)


def test_registered_names_apply_only_to_the_session_gene_and_search_without_session(http):
    sid = new_session(http, synonym_policy="registered")
    http.post(f"/v1/sessions/{sid}/names", json={"names": ["Delta ligand"]})
    r = http.post("/v1/papers/search", json={"query": NO_MATCH, "gene": "Dl"}, headers={"X-Session-Id": sid})
    assert r.json()["query"]["clauses"][-1]["name"] == "Delta"  # Dl is not the session's gene: snapshot names only
    assert _matched(http, None) == {"PMC100003": ["abd-A"]}  # no session: snapshot
    err(http.post("/v1/papers/search", json={"query": "x", "gene": "nope"}), 404, "gene_not_found")
    err(http.post(f"/v1/sessions/{sid}/names", json={"names": ["  "]}), 422, "invalid_request")


# ---- trace and coverage -------------------------------------------------------------------------------------------

def test_trace_records_every_call(http):
    sid = new_session(http, max_papers=1)
    h = {"X-Session-Id": sid}
    http.post("/v1/papers/search", json={"query": "Su(H)", "limit": 5}, headers=h)
    http.post("/v1/passages/search", json={"query": "Dl"}, headers=h)
    read(http, sid, "PMC100003", sections="RESULTS")
    read(http, sid, "PMC100001")
    http.post("/v1/papers/search", json={"query": "x", "limit": 1000}, headers=h)
    http.get("/v1/papers/PMC100002")  # outside the session: not traced
    events = http.get(f"/v1/sessions/{sid}/trace").json()["events"]
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5]
    assert [e["tool"] for e in events] == ["search_papers", "search_passages", "get_paper", "get_paper",
                                           "search_papers"]
    assert events[0]["arguments"]["body"] == {"query": "Su(H)", "limit": 5}
    assert sorted(events[0]["returned_ids"]) == ["PMC100001", "PMC100003"]
    assert {"PMC100001:2:0", "PMC100001"} <= set(events[1]["returned_ids"])
    assert events[2]["arguments"] == {"pmcid": "PMC100003", "sections": "RESULTS"} and events[2]["status"] == 200
    assert events[3]["error"]["code"] == "budget_exhausted" and events[3]["status"] == 409
    assert events[4]["error"]["code"] == "limit_exceeded"
    assert all(e["latency_ms"] >= 0 and e["time"] > 0 for e in events)
    assert [e["seq"] for e in http.get(f"/v1/sessions/{sid}/trace", params={"after": 3}).json()["events"]] == [4, 5]


def test_coverage_from_request_and_from_ground_truth(http):
    sid = new_session(http)
    h = {"X-Session-Id": sid}
    http.post("/v1/papers/search", json={"query": "iab-4"}, headers=h)  # surfaces PMC100005
    read(http, sid, "PMC100003")
    cov = http.get(f"/v1/sessions/{sid}/coverage").json()
    assert cov == {"gene": "FBgn0000014", "cited": ["PMC100003", "PMC100005", "PMC100006"], "read": ["PMC100003"],
                   "surfaced_not_read": ["PMC100005"], "never_surfaced": ["PMC100006"], "read_fraction": 0.3333,
                   "surfaced_fraction": 0.6667, "source": "ground_truth"}
    cov = http.get(f"/v1/sessions/{sid}/coverage", params={"pmcids": "PMC100003,PMC100004"}).json()
    assert cov["read_fraction"] == 0.5 and cov["never_surfaced"] == ["PMC100004"] and cov["source"] == "request"


# ---- submission ---------------------------------------------------------------------------------------------------

def prediction(**overrides) -> dict:
    obj = {"gene_id": "FBgn0000014", "gene_symbol": "abd-A",
           "task1_function": [{"go_id": "GO:0005634", "qualifier": "located_in", "aspect": "C",
                               "evidence": {"pmcid": "PMC100003", "text": "nuclear"}}],
           "task2_expression": [{"expression_type": "polypeptide", "anatomy_id": "FBbt:00001040", "stage_id": None}],
           "task3_synonyms": {"fullname_synonyms": ["infra-abdominal 4"], "symbol_synonyms": ["iab-4"]}}
    obj.update(overrides)
    return obj


def test_submission_is_validated_and_stored(http):
    sid = new_session(http, hidden_terms={"ids": ["GO:0005634"]})
    r = http.post(f"/v1/sessions/{sid}/submission", json=prediction())
    rep = r.json()
    assert r.status_code == 200 and rep["valid"] is False and rep["submission_seq"] == 1
    assert any(e.startswith("task1_function[0].go_id") for e in rep["errors"])  # hidden id refused
    assert any("PMC100003" in w for w in rep["warnings"])  # evidence from a paper the session never read
    read(http, sid, "PMC100003")
    fixed = prediction(task1_function=[{"description": "nucleus-like compartment", "qualifier": "located_in",
                                        "aspect": "C", "evidence": {"pmcid": "PMC100003"}}])
    rep = http.post(f"/v1/sessions/{sid}/submission", json=fixed).json()
    assert rep["valid"] is True and rep["errors"] == [] and rep["warnings"] == [] and rep["submission_seq"] == 2
    assert rep["annotation_count"] == {"task1_go_terms": 1, "task2_expression": 1, "task3_synonyms": 2}
    subs = http.get(f"/v1/sessions/{sid}/submission").json()["submissions"]
    assert [(s["seq"], s["valid"]) for s in subs] == [(1, False), (2, True)] and subs[1]["annotations"] == fixed
    assert http.get(f"/v1/sessions/{sid}").json()["submissions"] == 2
    tools = [e["tool"] for e in http.get(f"/v1/sessions/{sid}/trace").json()["events"]]
    assert tools == ["submit", "get_paper", "submit"]
    bad = http.post(f"/v1/sessions/{sid}/submission", json={"gene_id": "x"}).json()
    assert bad["valid"] is False and bad["errors"]
    http.post(f"/v1/sessions/{sid}/close")
    err(http.post(f"/v1/sessions/{sid}/submission", json=fixed), 409, "session_closed")


def test_hidden_ids_for_sessions():
    def session(spec):
        return Session(id="s", team="t", gene=GENES[0], max_papers=1, created_at=0, hidden_terms=spec)

    assert hidden_ids_for(None) == frozenset()
    assert hidden_ids_for(session(None)) == frozenset()
    flyaoc = hidden_ids_for(session(HiddenSpec(set="flyaoc")))
    assert len(flyaoc) == 120 and all(i.startswith("GO:") for i in flyaoc)
    ont = Ontology.from_terms("go", [Term(id="GO:0000001", ontology="go"),
                                     Term(id="GO:0000002", ontology="go", parents={"is_a": ["GO:0000001"]}),
                                     Term(id="GO:0000003", ontology="go", parents={"part_of": ["GO:0000002"]})])
    spec = HiddenSpec(ids=["GO:0000002"], descendants=True)
    assert hidden_ids_for(session(spec), ont) == {"GO:0000002", "GO:0000003"}
    assert hidden_ids_for(session(spec.model_copy(update={"descendants": False})), ont) == {"GO:0000002"}
