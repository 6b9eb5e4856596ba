"""The request path (issue #13): dependencies run on the event loop, a route's blocking work takes one thread-pool
hop, the answer is serialised once (not re-validated) while the OpenAPI document keeps its schemas, and only
requests that carry a session pay for tracing."""

from __future__ import annotations

import anyio.to_thread
import pytest
from fastapi.testclient import TestClient

from search.api.app import create_app
from search.api.middleware import traceable
from search.core.models import Gene, PaperSearchResults
from search.text.lexicon import Lexicon


@pytest.fixture
def client(settings):
    Lexicon([Gene(id="FBgn0000463", symbol="Dl", fullname="Delta")]).save(settings.data_dir / "lexicon.tsv")
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture
def hops(monkeypatch) -> list[str]:
    """The names of the functions handed to the thread pool, in order."""
    calls: list[str] = []
    real = anyio.to_thread.run_sync

    async def counting(func, *args, **kwargs):
        calls.append(getattr(func, "__name__", type(func).__name__))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counting)
    return calls


CALLS = [("post", "/v1/papers/search", {"json": {"query": "Dl", "limit": 5}}),
         ("post", "/v1/passages/search", {"json": {"query": "Dl"}}),
         ("get", "/v1/papers/PMC100001", {"params": {"max_chars": 200}}),
         ("get", "/v1/terms/search", {"params": {"q": "wing"}})]


@pytest.mark.parametrize(("method", "path", "kw", "n"), [(*c, 0 if "search" in c[1] and "terms" not in c[1] else 1)
                                                       for c in CALLS], ids=[c[1] for c in CALLS])
def test_a_call_without_session_takes_at_most_one_hop(client, hops, method, path, kw, n):
    """BM25 searches on the embedded engine run on the event loop (CPU work on open files); reads and term search
    take one hop."""
    hops.clear()
    r = getattr(client, method)(path, **kw)
    assert r.status_code in (200, 404), r.text  # term search answers 404 when the fixture has no ontology
    assert len(hops) == n, hops


def test_a_session_call_takes_a_lookup_its_work_and_its_record(client, hops):
    """Lookup, work (not for an embedded BM25 search) and the trace record: one hop each."""
    sid = client.post("/v1/sessions", json={"gene": "Dl", "max_papers": 2}).json()["id"]
    for method, path, kw in CALLS[:3]:
        hops.clear()
        r = getattr(client, method)(path, headers={"X-Session-Id": sid}, **kw)
        assert r.status_code == 200, r.text
        assert len(hops) == (2 if "search" in path else 3), (path, hops)  # searches: lookup and record
    hops.clear()
    assert client.get(f"/v1/sessions/{sid}").json()["budget_used"] == 1
    assert len(hops) == 1, hops
    events = client.get(f"/v1/sessions/{sid}/trace").json()["events"]
    assert [e["tool"] for e in events] == ["search_papers", "search_passages", "get_paper"]


def test_answers_are_the_models_json_and_the_schema_stays(client):
    r = client.post("/v1/papers/search", json={"query": "Dl", "limit": 5})
    assert r.headers["content-type"] == "application/json"
    parsed = PaperSearchResults.model_validate_json(r.content)
    assert r.json() == parsed.model_dump(mode="json", by_alias=True)
    r = client.get("/v1/papers/PMC100001", params={"max_chars": 100}, headers={"X-Session-Id": "nope"})
    assert r.status_code == 422 and set(r.json()) == {"error"}  # a malformed session id: the one error shape
    doc = client.get("/openapi.json").json()
    ok = doc["paths"]["/v1/papers/search"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/PaperSearchResults"}
    terms = doc["paths"]["/v1/flyaoc/search_go_terms"]["get"]["responses"]["200"]["content"]["application/json"]
    assert terms["schema"]["type"] == "array"


def test_only_requests_that_can_be_traced_are_wrapped():
    plain = {"type": "http", "path": "/v1/papers/search", "headers": [(b"content-type", b"application/json")]}
    assert not traceable(plain)
    assert traceable({**plain, "headers": [(b"x-session-id", b"s1")]})
    assert traceable({**plain, "path": "/v1/sessions/s1/names"})


def test_free_text_search_reads_the_lexicons_fold_set(tmp_path):
    """The routes hand the loaded lexicon's fold set to the planner (#15/#16): ``Hh`` (written so for hh) finds the
    paper that says ``hh``, exact-case mentions first; ``Dl`` never finds ``dl`` (dorsal is another gene)."""
    from search.api.app import create_app as make_app
    from search.core.config import Settings
    from search.core.models import Paper, Section
    from tests.helpers import build_index

    def paper(n, text):
        return Paper(pmcid=f"PMC4000{n:02d}", year=2001, journal="Genetics", title=f"Paper {n}", abstract=text,
                     sections=[Section(type="RESULTS", paragraphs=[text])])

    data = tmp_path / "data"
    build_index(data, [paper(0, "hh is expressed in the posterior compartment."),
                       paper(1, "Hh protein moves to the anterior cells."),
                       paper(2, "Delta: Dl signals to the wing margin."),
                       paper(3, "dl is a Rel-family factor in the embryo.")])
    Lexicon([Gene(id="FBgn0004644", symbol="hh", fullname="hedgehog", symbol_synonyms=["Hh"]),
             Gene(id="FBgn0260632", symbol="dl", fullname="dorsal"),
             Gene(id="FBgn0000463", symbol="Dl", fullname="Delta")]).save(data / "lexicon.tsv")
    with TestClient(make_app(Settings(data_dir=data))) as c:
        for route in ("/v1/papers/search", "/v1/passages/search"):
            r = c.post(route, json={"query": "Hh", "explain": True})
            assert r.status_code == 200, r.text
            assert list(dict.fromkeys(h["pmcid"] for h in r.json()["hits"])) == ["PMC400001", "PMC400000"], route
            assert r.json()["query"]["explain"]["tokens"][0]["case_folded"] == 0.5
            r = c.post(route, json={"query": "Dl"})
            assert {h["pmcid"] for h in r.json()["hits"]} == {"PMC400002"}, route


def test_a_lexicon_that_does_not_load_fails_sessions_not_search(settings, tmp_path):
    """The fold set comes from the lexicon; a configured lexicon that cannot be read must not take free-text search
    down with it (sessions, which need the lexicon, say why)."""
    from search.api.app import create_app as make_app

    missing = tmp_path / "no-such-lexicon.tsv"
    with TestClient(make_app(settings.model_copy(update={"lexicon": str(missing)}))) as c:
        r = c.post("/v1/papers/search", json={"query": "Dl"})
        assert r.status_code == 200 and r.json()["hits"], r.text
        r = c.post("/v1/sessions", json={"gene": "Dl"})
        assert r.status_code >= 400 and "no-such-lexicon" in r.text, r.text


@pytest.mark.parametrize("otel, looked_up", [(False, False), (True, True)])
def test_opentelemetry_is_looked_up_per_request_only_when_asked_for(settings, monkeypatch, otel, looked_up):
    """FastAPI's native OpenTelemetry checks the global providers on every request; it is opt-in (FLYSIFT_OTEL)."""
    from opentelemetry import trace

    calls: list[int] = []
    real = trace.get_tracer_provider
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: calls.append(1) or real())
    with TestClient(create_app(settings.model_copy(update={"otel": otel}))) as c:
        calls.clear()
        assert c.post("/v1/papers/search", json={"query": "Dl"}).status_code == 200
    assert bool(calls) is looked_up
