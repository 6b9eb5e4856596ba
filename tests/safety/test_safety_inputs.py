"""Issue #9 items 3, 4, 6 and the request hygiene of item 9, over a real server on loopback.

The hostile requests are files (tests/fixtures/bad_inputs/requests/, format in its README), so others can rerun
them; each must be answered in full with the one error shape, and the session it touched must stay readable.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx
import pytest

from search.api.app import create_app
from search.core.config import Settings
from search.core.inputs import MAX_JSON_DEPTH
from search.core.models import Gene
from search.schema.sessions import Submission, TraceEvent
from search.sessions.keys import new_key
from search.sessions.store import SqliteStore
from search.text.lexicon import Lexicon

from helpers import PAPERS, LiveServer, build_index

CORPUS = Path(__file__).parents[1] / "fixtures" / "bad_inputs" / "requests"
GENES = [Gene(id="FBgn0000014", symbol="abd-A", fullname="abdominal A", symbol_synonyms=["iab-4"])]


def nested(depth: int) -> object:
    value: object = "x"
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs") / "data"
    build_index(d, PAPERS)
    Lexicon(GENES).save(d / "lexicon.tsv")
    with LiveServer(create_app(Settings(data_dir=d))) as srv:
        yield srv, d


@pytest.fixture(scope="module")
def http(served):
    # no keep-alive: a server that breaks one answer must not hide behind a reused connection
    with httpx.Client(base_url=served[0].url, timeout=30, limits=httpx.Limits(max_keepalive_connections=0)) as c:
        yield c


def new_session(http) -> str:
    r = http.post("/v1/sessions", json={"gene": "abd-A"})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def error_of(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"], body
    return body["error"]


def fields_of(err: dict) -> list[str]:
    d = err["details"]
    return [d["field"]] if "field" in d else [e["field"] for e in d.get("errors", [])]


def assert_readable(http, sid: str) -> None:
    for path in ("trace", "submission", "coverage?pmcids=PMC100001"):
        r = http.get(f"/v1/sessions/{sid}/{path}")
        assert r.status_code == 200, (path, r.text)


def load(path: Path) -> tuple[str, str, int, str, str, dict[str, str], bytes]:
    head, _, body = path.read_bytes().partition(b"\n\n")
    first, *header_lines = head.decode().split("\n")
    request, expect = first.split(" -> ")
    method, target = request.split(" ", 1)
    status, code, *field = expect.split()
    headers = dict(h.split(": ", 1) for h in header_lines if h)
    return method, target, int(status), code, field[0] if field else "", headers, body


CASES = sorted(CORPUS.glob("*.http"))


def test_the_corpus_is_listed_in_its_readme():
    readme = (CORPUS / "README.md").read_text()
    assert CASES and all(f"`{p.name}`" in readme for p in CASES)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_hostile_request_is_refused_in_full(http, path):
    method, target, status, code, field, headers, body = load(path)
    sid = new_session(http)
    target = target.replace("{session}", sid)
    headers = {k: v.replace("{session}", sid) for k, v in headers.items()}
    # the raw target goes on the wire as written (httpx would re-encode %00 and friends)
    r = http.request(method, httpx.URL(http.base_url.join(target.split("?")[0]),
                                       query=target.partition("?")[2].encode()), content=body, headers=headers)
    err = error_of(r, status, code)
    if field:
        assert any(f.startswith(field) for f in fields_of(err)), err
    assert_readable(http, sid)


# ---- item 3: a poisoned session -------------------------------------------------------------------------------

def test_deep_submission_is_refused_and_the_session_stays_readable(http):
    sid = new_session(http)
    r = http.post(f"/v1/sessions/{sid}/submission", json={"gene_id": "FBgn0000014", "x": nested(200)})
    err = error_of(r, 422, "invalid_request")
    assert f"deeper than {MAX_JSON_DEPTH}" in err["message"] and err["details"]["field"].startswith("body.x")
    ok = http.post(f"/v1/sessions/{sid}/submission", json={"gene_id": "FBgn0000014", "x": nested(MAX_JSON_DEPTH - 2)})
    assert ok.status_code == 200, ok.text
    assert_readable(http, sid)
    assert http.get(f"/v1/sessions/{sid}/submission").json()["submissions"][0]["annotations"]["x"] == \
        nested(MAX_JSON_DEPTH - 2)


def test_a_session_poisoned_by_an_older_version_is_still_readable(served, http):
    """What an older version stored (a 200-deep value in a trace event and a submission) is served, cut."""
    srv, d = served
    sid = new_session(http)
    store = SqliteStore(d / "sessions.sqlite")
    try:
        store.append_trace(sid, TraceEvent(time=1.0, tool="submit", arguments={"body": {"x": nested(200)}},
                                           latency_ms=1.0, status=200))
        store.add_submission(sid, Submission(time=1.0, annotations={"x": nested(200)}, report={}, valid=False))
    finally:
        store.close()
    assert_readable(http, sid)
    event = http.get(f"/v1/sessions/{sid}/trace").json()["events"][0]
    assert event["seq"] == 1 and event["tool"] == "submit" and "cut: nested deeper" in json.dumps(event)
    sub = http.get(f"/v1/sessions/{sid}/submission").json()["submissions"][0]
    assert sub["seq"] == 1 and "cut: nested deeper" in json.dumps(sub["annotations"])


# ---- item 4: lone surrogates and NUL ----------------------------------------------------------------------------

def raw_exchange(url: str, request: bytes) -> bytes:
    """One HTTP/1.1 exchange on a plain socket, read to the end: shows an answer cut after its headers."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(request)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("content_type", ["application/json", "text/plain"])
def test_surrogate_in_a_session_search_gets_a_whole_answer_and_the_trace_stays_whole(served, http, content_type):
    sid = new_session(http)
    assert http.post("/v1/passages/search", json={"query": "wing"}, headers={"X-Session-Id": sid}).status_code == 200
    body = b'{"query": "\\ud800 wing"}'
    raw = raw_exchange(served[0].url, b"POST /v1/passages/search HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                       b"Content-Type: " + content_type.encode() + b"\r\nX-Session-Id: " + sid.encode() +
                       b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    head, _, payload = raw.partition(b"\r\n\r\n")
    length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
    assert head.startswith(b"HTTP/1.1 422") and len(payload) == length > 0  # answered in full
    assert json.loads(payload)["error"]["code"] == "invalid_request"
    events = http.get(f"/v1/sessions/{sid}/trace").json()["events"]
    assert events[0]["status"] == 200 and events[0]["arguments"]["body"] == {"query": "wing"}
    if content_type == "text/plain":  # reached the route (and the trace): stored with the surrogate replaced
        assert [e["status"] for e in events] == [200, 422]
        assert events[1]["arguments"]["body"] == {"query": "\ufffd wing"}
    else:  # refused at the boundary, before any route: not a call of the session
        assert len(events) == 1


# ---- item 9: errors quote little, wrong secrets are limited --------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda h: h.post("/v1/sessions", json={"gene": "x" * 100_000}),
    lambda h: h.post("/v1/papers/search", json={"query": "wing", "gene": "y" * 100_000}),
    lambda h: h.post("/v1/papers/search", json={"query": "wing", "collection": "Z" * 100_000}),
    lambda h: h.post("/v1/papers/search", json={"query": "wing", "filters": {"w" * 100_000: 1}}),
    lambda h: h.get("/v1/papers/" + "P" * 6000),
    lambda h: h.get("/v1/sessions/ses_" + "s" * 6000),
])
def test_errors_quote_at_most_a_little_of_the_input(http, call):
    r = call(http)
    assert 400 <= r.status_code < 500, r.text[:300]
    assert len(r.content) < 2000, r.text[:300]


def test_wrong_secrets_for_a_real_key_id_are_rate_limited(tmp_path):
    d = tmp_path / "data"
    build_index(d, PAPERS)
    store = SqliteStore(d / "sessions.sqlite")
    store.create_team("lab1")
    key, rec = new_key("lab1", ["agent"])
    store.add_key(rec)
    store.close()
    forged = key[:-6] + ("A" if key[-6] != "A" else "B") + key[-5:]
    settings = Settings(data_dir=d, auth=True, rate_limit_per_minute=6, rate_limit_burst=3)
    with LiveServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        codes = [c.get("/v1/stats", headers={"Authorization": f"Bearer {forged}"}).status_code for _ in range(5)]
        assert codes[:3] == [401, 401, 401] and codes[3:] == [429, 429]
        # the owner is not locked out by someone else's guesses
        assert c.get("/v1/stats", headers={"Authorization": f"Bearer {key}"}).status_code == 200
