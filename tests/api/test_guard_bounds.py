"""No request body can stall a worker for everyone (issue #28): an unauthenticated body is refused before it is read,
each route takes a body only as large as it needs, the number of JSON values is bounded before parsing, and a large
body is parsed off the event loop. (How long ``/v1/health`` waits beside hostile bodies is measured by
bench/bench_guard.py, not asserted here.)"""

from __future__ import annotations

import threading

import httpx
import pytest

import search.api.guard as guard
from search.api.app import create_app
from search.core.config import Settings
from search.sessions.keys import new_key
from search.sessions.store import SqliteStore

from helpers import LiveServer, build_index


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    data = tmp_path_factory.mktemp("guard") / "data"
    build_index(data)
    store = SqliteStore(data / "sessions.sqlite")
    store.create_team("lab1")
    key, record = new_key("lab1", ["agent", "admin"])
    store.add_key(record)
    store.close()
    app = create_app(Settings(data_dir=data, auth=True, rate_limit_per_minute=0))
    with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        yield c, {"Authorization": f"Bearer {key}"}, app


def _code(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text[:300]
    return r.json()["error"]["code"]


def test_an_unauthenticated_body_is_refused_before_it_is_read(secured, monkeypatch):
    c, _, _ = secured
    parsed: list[int] = []
    real = guard.parse_json_body
    monkeypatch.setattr(guard, "parse_json_body", lambda raw: parsed.append(len(raw)) or real(raw))
    ints = b"[" + b",".join([b"1"] * 100_000) + b"]"
    head = {"Content-Type": "application/json"}
    assert _code(c.post("/v1/papers/search", content=b'{"query": "wing", "limit": ' + ints + b"}", headers=head),
                 401) == "unauthorized"
    assert _code(c.post("/v1/papers/search", content=b"{not json", headers=head), 401) == "unauthorized"
    bad_key = {**head, "Authorization": "Bearer fsk_0123456789ab_" + "x" * 40}
    assert _code(c.post("/v1/papers/search", content=b"{not json", headers=bad_key), 401) == "unauthorized"
    assert parsed == []   # none of them was parsed


def test_a_body_is_authenticated_once(tmp_path):
    """The guard's lookup is the request's: the rate limit counts one hit per call, not two."""
    data = tmp_path / "data"
    build_index(data)
    store = SqliteStore(data / "sessions.sqlite")
    store.create_team("lab1")
    key, record = new_key("lab1", ["agent"])
    store.add_key(record)
    app = create_app(Settings(data_dir=data, auth=True, rate_limit_per_minute=1, rate_limit_burst=2))
    with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=60,
                                              headers={"Authorization": f"Bearer {key}"}) as c:
        assert c.post("/v1/papers/search", json={"query": "wing"}).status_code == 200
        assert c.post("/v1/papers/search", json={"query": "wing"}).status_code == 200
        assert _code(c.post("/v1/papers/search", json={"query": "wing"}), 429) == "rate_limited"


def test_routes_that_take_a_query_take_small_bodies(secured):
    c, auth, app = secured
    limit = app.state.settings.max_query_body_bytes
    assert limit < app.state.settings.max_body_bytes // 8
    big = {"query": "wing", "filters": {"pmcids": ["PMC" + "1" * 250] * (limit // 250)}}
    r = c.post("/v1/papers/search", json=big, headers=auth)
    assert _code(r, 413) == "body_too_large" and r.json()["error"]["details"]["max_bytes"] == limit
    # a build's papers may be larger
    bid = c.post("/v1/collections/big/builds", headers=auth).json()["build_id"]
    paragraphs = ["wing " * (limit // 8)] * 2
    paper = {"pmcid": "PMC1", "title": "t", "sections": [{"type": "RESULTS", "paragraphs": paragraphs}]}
    r = c.post(f"/v1/collections/big/builds/{bid}/papers", json={"papers": [paper]}, headers=auth)
    assert r.status_code == 200, r.text[:300]
    c.delete(f"/v1/collections/big/builds/{bid}", headers=auth)


def test_the_number_of_values_is_bounded_before_parsing(secured, monkeypatch):
    c, auth, _ = secured
    parsed: list[int] = []
    real = guard.parse_json_body
    monkeypatch.setattr(guard, "parse_json_body", lambda raw: parsed.append(len(raw)) or real(raw))
    body = b'{"query": "wing", "filters": {"year_from": [' + b",".join([b"1"] * 300_000) + b"]}}"
    r = c.post("/v1/papers/search", content=body, headers={**auth, "Content-Type": "application/json"})
    assert _code(r, 413) == "body_too_large"
    assert r.json()["error"]["details"]["max_values"] == guard.MAX_VALUES and parsed == []


def test_a_large_body_is_parsed_off_the_event_loop(secured, monkeypatch):
    c, auth, _ = secured
    real_parse, real_read = guard.parse_json_body, guard.InputGuard._read
    loop: list[str] = []
    parser: list[str] = []

    async def read(scope, receive):
        loop.append(threading.current_thread().name)
        return await real_read(scope, receive)

    def parse(raw: bytes):
        parser.append(threading.current_thread().name)
        return real_parse(raw)

    monkeypatch.setattr(guard.InputGuard, "_read", staticmethod(read))
    monkeypatch.setattr(guard, "parse_json_body", parse)
    large = {"query": "wing", "filters": {"pmcids": [f"PMC{i:08d}" for i in range(9_000)]}}
    assert c.post("/v1/papers/search", json={"query": "wing"}, headers=auth).status_code == 200
    assert c.post("/v1/papers/search", json=large, headers=auth).status_code == 200
    assert parser[0] == loop[0]     # a small body: parsed where it was read, on the event loop
    assert parser[1] != loop[1]     # a large one: on a worker thread


def test_integers_of_thousands_of_digits_are_422(secured):
    c, auth, _ = secured
    body = b'{"query": "wing", "limit": ' + b"9" * 5000 + b"}"
    r = c.post("/v1/papers/search", content=body, headers={**auth, "Content-Type": "application/json"})
    assert _code(r, 422) == "invalid_request"
