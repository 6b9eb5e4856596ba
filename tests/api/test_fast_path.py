"""The lean path of the hot read routes (``search.api.fast``) answers exactly what FastAPI's own path answers: the same
status, body and headers for valid and hostile requests, the same trace events and budgets in a session, one
rate-limit token per request; and it does answer the hot routes (FastAPI's dependency solver never runs for them)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import fastapi.routing
import pytest
from fastapi import FastAPI, Response
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from search.api.app import create_app
from search.api.fast import FastPath, lean
from search.api.middleware import traceable
from search.core.config import Settings
from search.core.models import Gene
from search.engines.embedded.terms import TermIndex
from search.ontology.model import Ontology
from search.sessions.keys import new_key
from search.sessions.store import SqliteStore
from search.text.lexicon import Lexicon

from helpers import build_index, term_service

MINI_OBO = Path(__file__).resolve().parents[1] / "fixtures" / "mini.obo"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    d = tmp_path_factory.mktemp("fast") / "data"
    build_index(d)
    Lexicon([Gene(id="FBgn0000463", symbol="Dl", fullname="Delta")]).save(d / "lexicon.tsv")
    term_service(d).index_ontology(Ontology.load(MINI_OBO, "go", cache_dir=tmp_path_factory.mktemp("cache")),
                                  TermIndex(d).write)
    return create_app(Settings(data_dir=d))


@pytest.fixture(scope="module")
def client(app):
    with TestClient(app) as c:
        c.get("/v1/health")  # builds the middleware stack
        yield c


def _fast_path(app) -> FastPath:
    layer = app.middleware_stack
    while not isinstance(layer, FastPath):
        layer = layer.app
    return layer


@pytest.fixture
def solver_calls(monkeypatch) -> list[str]:
    """Paths whose request went through FastAPI's dependency solver."""
    calls: list[str] = []
    real = fastapi.routing.solve_dependencies

    async def spying(*, request, **kw):
        calls.append(request.url.path)
        return await real(request=request, **kw)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", spying)
    return calls


def both(client, app, method: str, path: str, **kw):
    """The answer of the lean path and of FastAPI's path (the lean routes switched off) to the same request."""
    fp = _fast_path(app)
    fp.plans = None
    fast = client.request(method, path, **kw)
    fp.plans = {}
    try:
        slow = client.request(method, path, **kw)
    finally:
        fp.plans = None
    return fast, slow


def _timeless(body: bytes) -> bytes:
    return re.sub(rb'"(took_ms|latency_ms)":[0-9.e+-]+', rb'"\1":0', body)


def same(fast, slow) -> None:
    """Same status, body (but the time a search took) and headers."""
    assert (fast.status_code, _timeless(fast.content)) == (slow.status_code, _timeless(slow.content)), \
        (fast.text[:300], slow.text[:300])
    keep = ("content-type", "x-budget-used", "x-budget-max", "allow", "retry-after", "www-authenticate")
    assert {k: v for k, v in fast.headers.items() if k in keep} == {k: v for k, v in slow.headers.items() if k in keep}


SEARCHES = [
    {"query": "Dl"}, {"query": "Dl wing margin", "limit": 3, "offset": 1}, {"query": "Dl", "gene": "Dl"},
    {"query": "Dl", "snippets": True, "explain": True}, {"query": "Notch", "filters": {"year_from": 2000}},
    {"query": "Dl", "limit": 1000}, {"query": "Dl", "limit": "3"}, {"query": "Dl", "limit": "x"}, {"query": ""},
    {"query": "Dl", "collection": "nope"}, {"query": "Dl", "collection": "../x"}, {"query": "Dl", "mode": "dense"},
    {"query": "Dl", "extra": 1}, {"query": "Dl", "gene": "nosuchgene"}, {"limit": 5}, {"query": 5},
    {"query": "Dl", "filters": {"bogus": 1}}, {"query": "Dl", "offset": -1}, {"query": "Dl", "snippets": "yes"},
]
BODIES = [b"[1, 2]", b'"Dl"', b"null", b"{}", b"", b'{"query": "Dl"']


@pytest.mark.parametrize("path", ["/v1/papers/search", "/v1/passages/search"])
def test_searches_answer_alike(client, app, path):
    for body in SEARCHES:
        same(*both(client, app, "POST", path, json=body))
    for raw in BODIES:
        same(*both(client, app, "POST", path, content=raw, headers={"Content-Type": "application/json"}))
    for ctype in ("text/plain", "application/json; charset=UTF-8", "application/vnd.api+json", "APPLICATION/JSON"):
        same(*both(client, app, "POST", path, content=b'{"query": "Dl"}', headers={"Content-Type": ctype}))
    same(*both(client, app, "POST", path, content=b'{"query": "Dl"}'))  # no content type
    same(*both(client, app, "GET", path))  # 405 from the shadowing route, not a paper named "search"


READS = [("/v1/papers/PMC100001", {}), ("/v1/papers/PMC100001", {"max_chars": 120}),
         ("/v1/papers/PMC100001", {"sections": ["ABSTRACT", "RESULTS,METHODS"]}),
         ("/v1/papers/PMC100001", {"max_chars": "x"}), ("/v1/papers/PMC100001", {"max_chars": -3}),
         ("/v1/papers/PMC100001", {"cursor": "garbage"}), ("/v1/papers/PMC999999", {}),
         ("/v1/papers/PMC100001", {"collection": "../etc"}), ("/v1/papers/PMC100001", {"max_chars": ["5", "7"]}),
         ("/v1/papers/search", {}), ("/v1/papers/", {}),
         ("/v1/terms/search", {"q": "wing"}), ("/v1/terms/search", {"query": "wing", "limit": 2}),
         ("/v1/terms/search", {"query": "wing", "q": "wing"}), ("/v1/terms/search", {}),
         ("/v1/terms/search", {"query": "wing", "limit": 0}), ("/v1/terms/search", {"query": "wing", "limit": "2.5"}),
         ("/v1/terms/search", {"query": "wing", "include_obsolete": "yes"}),
         ("/v1/terms/search", {"query": "wing", "include_obsolete": "maybe"}),
         ("/v1/terms/search", {"query": "wing", "ontology": "nope"}),
         ("/v1/terms/search", {"query": "wing", "hidden": "flyaoc", "hidden_descendants": "true"}),
         ("/v1/sessions/nosuchsession", {}),
         ("/v1/terms/resolve", {"text": "transcription factor activity"}), ("/v1/terms/resolve", {"limit": 3}),
         ("/v1/terms/GO:0003700", {}), ("/v1/terms/GO:0003700", {"hidden": "GO:0003700"}), ("/v1/terms/nope", {}),
         ("/v1/terms/GO:0003674/descendants", {"limit": 2}), ("/v1/terms/GO:0003700/ancestors", {"relations": "is_a"}),
         ("/v1/terms/GO:0003700/parents", {"limit": 0}), ("/v1/terms/GO:0003674/children", {"relations": "bogus"}),
         ("/v1/terms/go/labels", {"limit": 2}),
         ("/v1/flyaoc/search_go_terms", {"query": "binding", "aspect": "F"}), ("/v1/flyaoc/search_go_terms", {}),
         ("/v1/flyaoc/search_anatomy_terms", {"query": "wing"}), ("/v1/flyaoc/search_stage_terms", {"query": "x"}),
         ("/v1/flyaoc/get_term_children", {"term_id": "GO:0003674", "limit": 5}),
         ("/v1/flyaoc/get_term_children", {"term_id": "GO:9999999"})]


def test_reads_and_term_search_answer_alike(client, app):
    for path, params in READS:
        same(*both(client, app, "GET", path, params=params))
        same(*both(client, app, "HEAD", path, params=params))


def test_the_hot_routes_skip_the_solver_and_invalid_requests_take_fastapis_path(client, solver_calls):
    sid = client.post("/v1/sessions", json={"gene": "Dl", "max_papers": 3}).json()["id"]
    solver_calls.clear()
    assert client.post("/v1/papers/search", json={"query": "Dl"}).status_code == 200
    assert client.post("/v1/passages/search", json={"query": "Dl"}, headers={"X-Session-Id": sid}).status_code == 200
    assert client.get("/v1/papers/PMC100001", headers={"X-Session-Id": sid}).status_code == 200
    assert client.get("/v1/terms/search", params={"query": "wing"}).status_code == 200
    assert client.get(f"/v1/sessions/{sid}").status_code == 200
    assert client.get("/v1/terms/GO:0003700").status_code == 200
    assert client.get("/v1/terms/GO:0003674/children").status_code == 200
    assert client.get("/v1/flyaoc/search_go_terms", params={"query": "binding"}).status_code == 200
    assert solver_calls == []
    assert client.post("/v1/papers/search", json={"query": "Dl", "limit": "x"}).status_code == 422
    assert client.get(f"/v1/sessions/{sid}/trace").status_code == 200  # not a lean route
    assert solver_calls == ["/v1/papers/search", f"/v1/sessions/{sid}/trace"]


def _events(client, sid: str) -> list[dict]:
    out = []
    for e in client.get(f"/v1/sessions/{sid}/trace").json()["events"]:
        out.append({k: v for k, v in e.items() if k not in ("time", "latency_ms", "seq")})
    return out


def test_sessions_trace_and_budget_alike(client, app):
    """The same calls in two sessions, one through each path: the same answers, budgets and trace events."""
    calls = [("POST", "/v1/papers/search", {"json": {"query": "Dl", "gene": "Dl"}}),
             ("POST", "/v1/passages/search", {"json": {"query": "Dl", "limit": "x"}}),
             ("GET", "/v1/papers/PMC100001", {"params": {"max_chars": 300}}),
             ("GET", "/v1/papers/PMC100001", {"params": {"max_chars": 300}}),
             ("GET", "/v1/papers/PMC100002", {}), ("GET", "/v1/papers/PMC100003", {}),
             ("GET", "/v1/terms/search", {"params": {"query": "wing"}})]
    fp = _fast_path(app)
    sids, answers = [], []
    for plans in (None, {}):
        fp.plans = plans
        try:
            sid = client.post("/v1/sessions", json={"gene": "Dl", "max_papers": 2}).json()["id"]
            got = []
            for method, path, kw in calls:
                r = client.request(method, path, headers={"X-Session-Id": sid}, **kw)
                body = _timeless(r.content.replace(sid.encode(), b"SID"))
                got.append((r.status_code, body, r.headers.get("x-budget-used")))
            got.append(client.get(f"/v1/sessions/{sid}").json()["budget_used"])
        finally:
            fp.plans = None
        sids.append(sid)
        answers.append(got)
    assert answers[0] == answers[1]
    assert [s for s, *_ in answers[0][:-1]] == [200, 422, 200, 200, 200, 409, 200], answers[0]
    fast, slow = _events(client, sids[0]), _events(client, sids[1])
    assert json.dumps(fast).replace(sids[0], "SID") == json.dumps(slow).replace(sids[1], "SID")
    assert [e["tool"] for e in fast] == ["search_papers", "search_passages", "get_paper", "get_paper", "get_paper",
                                         "get_paper", "search_terms"]
    assert fast[0]["arguments"]["body"] == {"query": "Dl", "gene": "Dl"}


_scalar = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
           | st.text(max_size=8))
_json = st.recursive(_scalar, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                     max_leaves=6)
_field = st.sampled_from(["query", "limit", "offset", "filters", "snippets", "collection", "gene", "mode", "explain"])


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.dictionaries(_field, _json | st.sampled_from(["Dl", 3, True, "bm25", "default"]), max_size=5))
def test_any_search_body_answers_alike(client, app, body):
    same(*both(client, app, "POST", "/v1/papers/search", json=body))


def test_a_request_spends_one_rate_limit_token_on_either_path(tmp_path, monkeypatch):
    """A request that fails validation on the lean path is answered by FastAPI's path: still one token."""
    monkeypatch.setenv("FLYSIFT_RATE_LIMIT_PER_MINUTE", "6")
    monkeypatch.setenv("FLYSIFT_RATE_LIMIT_BURST", "3")
    d = tmp_path / "data"
    build_index(d)
    store = SqliteStore(d / "sessions.sqlite")
    store.create_team("lab1")
    key, rec = new_key("lab1", ["agent"])
    store.add_key(rec)
    with TestClient(create_app(Settings(data_dir=d, auth=True))) as c:
        auth = {"Authorization": f"Bearer {key}"}
        codes = [c.get("/v1/papers/PMC100001", params={"max_chars": "x"}, headers=auth).status_code,
                 c.post("/v1/papers/search", json={"query": "Dl", "limit": "x"}, headers=auth).status_code,
                 c.post("/v1/papers/search", json={"query": "Dl"}, headers=auth).status_code,
                 c.post("/v1/papers/search", json={"query": "Dl"}, headers=auth).status_code]
        assert codes == [422, 422, 200, 429]
        assert c.post("/v1/papers/search", json={"query": "Dl"}).status_code == 401


def test_reading_a_session_is_not_wrapped_for_tracing_but_writes_under_its_path_are():
    scope = {"type": "http", "path": "/v1/sessions/s1", "headers": []}
    assert not traceable({**scope, "method": "GET"}) and not traceable({**scope, "method": "HEAD"})
    assert traceable({**scope, "method": "POST", "path": "/v1/sessions/s1/names"})
    assert traceable({**scope, "method": "GET", "headers": [(b"x-session-id", b"s1")]})


def test_a_lean_route_that_the_lean_path_cannot_answer_as_fastapi_would_is_refused():
    """A ``def`` route (FastAPI runs it on the thread pool) or one that returns a model (FastAPI serialises it through
    ``response_model``) cannot be marked lean: the app refuses to answer rather than answer differently."""
    for route in ("sync", "model"):
        app = FastAPI()
        if route == "sync":
            @app.get("/x")
            @lean
            def sync() -> Response:
                return Response(b"")
        else:
            @app.get("/x")
            @lean
            async def model() -> dict:
                return {}
        app.add_middleware(FastPath)
        with TestClient(app) as c, pytest.raises(RuntimeError, match="not async" if route == "sync" else "Response"):
            c.get("/x")
