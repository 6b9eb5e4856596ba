"""API keys, team isolation, the admin scope, the rate limit and the admin CLI."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from search.api.app import create_app
from search.cli.admin import admin
from search.core.config import Settings
from search.core.errors import InvalidRequest
from search.core.models import Gene
from search.sessions.keys import RateLimited, RateLimiter, Unauthorized, key_id_of, new_key, verify
from search.sessions.store import Conflict, SqliteStore
from search.text.lexicon import Lexicon

from helpers import LiveServer, build_index


def test_keys_are_random_hashed_and_verified():
    key, rec = new_key("lab1", ["agent"], "harness")
    assert key.startswith(f"fsk_{rec.id}_") and key_id_of(key) == rec.id
    assert key not in rec.model_dump_json() and rec.hash not in rec.model_dump_json()  # the hash is never served
    p = verify(key, rec)
    assert p.team == "lab1" and p.scopes == ["agent"] and p.key_id == rec.id
    other, _ = new_key("lab1", ["agent"])
    with pytest.raises(Unauthorized):
        verify(other.replace(key_id_of(other), rec.id), rec)  # right id, wrong secret
    with pytest.raises(Unauthorized):
        verify(key, None)
    with pytest.raises(Unauthorized):
        verify(key, rec.model_copy(update={"revoked_at": 1.0}))
    with pytest.raises(Unauthorized):
        key_id_of("not-a-key")
    with pytest.raises(InvalidRequest):
        new_key("lab1", ["root"])


def test_rate_limiter_token_bucket():
    lim = RateLimiter(per_minute=60, burst=2)
    lim.hit("k", now=0.0)
    lim.hit("k", now=0.0)
    with pytest.raises(RateLimited) as e:
        lim.hit("k", now=0.5)
    assert e.value.status == 429 and e.value.headers["Retry-After"] == "1"
    lim.hit("other", now=0.5)  # buckets are per key
    lim.hit("k", now=1.6)
    RateLimiter(per_minute=0, burst=1).hit("k")  # 0 switches the limit off


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A server with auth on, two teams (lab1 with an agent and an admin key, lab2 with an agent key)."""
    root = tmp_path_factory.mktemp("auth")
    d = root / "data"
    build_index(d)
    Lexicon([Gene(id="FBgn0000463", symbol="Dl", fullname="Delta")]).save(d / "lexicon.tsv")
    store = SqliteStore(d / "sessions.sqlite")
    keys = {}
    for team, name, scopes in (("lab1", "agent1", ["agent"]), ("lab1", "admin1", ["agent", "admin"]),
                               ("lab2", "agent2", ["agent"]), ("lab2", "revoked", ["agent"])):
        if team not in store.list_teams():
            store.create_team(team)
        keys[name], rec = new_key(team, scopes)
        store.add_key(rec)
        if name == "revoked":
            store.revoke_key(rec.id)
    with LiveServer(create_app(Settings(data_dir=d, auth=True))) as srv:
        yield srv.url, keys


def _client(url: str, key: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {key}"} if key else {})


def _code(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    return r.json()["error"]["code"]


def test_requests_need_a_valid_key(secured):
    url, keys = secured
    with _client(url) as c:
        r = c.post("/v1/papers/search", json={"query": "Dl"})
        assert _code(r, 401) == "unauthorized" and r.headers["WWW-Authenticate"] == "Bearer"
        assert c.get("/v1/health").status_code == 200  # public
    with _client(url, "fsk_garbage") as c:
        assert _code(c.get("/v1/papers/PMC100001"), 401) == "unauthorized"
    with _client(url, keys["revoked"]) as c:
        r = c.get("/v1/papers/PMC100001")
        assert _code(r, 401) == "unauthorized" and "revoked" in r.json()["error"]["message"]
    with _client(url, keys["agent1"]) as c:
        assert c.get("/v1/papers/PMC100001").status_code == 200


def test_a_team_sees_only_its_own_sessions(secured):
    url, keys = secured
    with _client(url, keys["agent1"]) as lab1, _client(url, keys["agent2"]) as lab2:
        r = lab1.post("/v1/sessions", json={"gene": "Dl", "max_papers": 2})
        assert r.status_code == 201 and r.json()["team"] == "lab1"
        sid = r.json()["id"]
        assert _code(lab1.post("/v1/sessions", json={"gene": "Dl", "team": "lab2"}), 403) == "forbidden"
        assert lab1.get("/v1/papers/PMC100001", headers={"X-Session-Id": sid}).status_code == 200
        for call in (lambda: lab2.get(f"/v1/sessions/{sid}"), lambda: lab2.get(f"/v1/sessions/{sid}/trace"),
                     lambda: lab2.get(f"/v1/sessions/{sid}/coverage", params={"pmcids": "PMC100001"}),
                     lambda: lab2.post(f"/v1/sessions/{sid}/close"),
                     lambda: lab2.post(f"/v1/sessions/{sid}/names", json={"names": ["x"]}),
                     lambda: lab2.post(f"/v1/sessions/{sid}/submission", json={}),
                     lambda: lab2.get("/v1/papers/PMC100002", headers={"X-Session-Id": sid}),
                     lambda: lab2.post("/v1/papers/search", json={"query": "Dl"}, headers={"X-Session-Id": sid})):
            assert _code(call(), 404) == "session_not_found"
        assert sid not in [s["id"] for s in lab2.get("/v1/sessions").json()["sessions"]]
        assert sid in [s["id"] for s in lab1.get("/v1/sessions", params={"team": "lab2"}).json()["sessions"]]
        s = lab1.get(f"/v1/sessions/{sid}").json()
        assert s["budget_used"] == 1  # lab2's attempt to read in lab1's session spent nothing
        assert len(lab1.get(f"/v1/sessions/{sid}/trace").json()["events"]) == 1  # ... and was not traced there


def test_indexing_needs_the_admin_scope(secured):
    url, keys = secured
    with _client(url, keys["agent1"]) as agent:
        r = agent.post("/v1/collections/extra/builds")
        assert _code(r, 403) == "forbidden" and "admin" in r.json()["error"]["message"]
    with _client(url, keys["admin1"]) as adm:
        r = adm.post("/v1/collections/extra/builds")
        assert r.status_code == 200, r.text
        paper = {"pmcid": "PMC1", "title": "Wing disc", "abstract": "dpp."}  # an empty build is never published
        assert adm.post(f"/v1/collections/extra/builds/{r.json()['build_id']}/papers",
                        json={"papers": [paper]}).status_code == 200
        assert adm.post(f"/v1/collections/extra/builds/{r.json()['build_id']}/publish").status_code == 200


def test_rate_limit_answers_429_with_retry_after(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("FLYSIFT_RATE_LIMIT_PER_MINUTE", "6")
    monkeypatch.setenv("FLYSIFT_RATE_LIMIT_BURST", "3")
    d = tmp_path / "data"
    build_index(d)
    store = SqliteStore(d / "sessions.sqlite")
    store.create_team("lab1")
    key, rec = new_key("lab1", ["agent"])
    store.add_key(rec)
    other, rec2 = new_key("lab1", ["agent"])
    store.add_key(rec2)
    with LiveServer(create_app(Settings(data_dir=d, auth=True))) as srv, _client(srv.url, key) as c:
        codes = [c.get("/v1/papers/PMC100001").status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        r = c.get("/v1/papers/PMC100001")
        assert _code(r, 429) == "rate_limited" and 1 <= int(r.headers["Retry-After"]) <= 10
        with _client(srv.url, other) as c2:  # the limit is per key
            assert c2.get("/v1/papers/PMC100001").status_code == 200


def test_admin_cli(tmp_path: Path):
    run = CliRunner()
    d = ["--data-dir", str(tmp_path)]
    assert run.invoke(admin, ["create-team", *d, "lab1"]).exit_code == 0
    dup = run.invoke(admin, ["create-team", *d, "lab1"])
    assert dup.exit_code != 0 and isinstance(dup.exception, Conflict)
    res = run.invoke(admin, ["create-key", *d, "--team", "lab1", "--scope", "agent", "--scope", "admin",
                             "--name", "ci"])
    assert res.exit_code == 0, res.output
    key = res.stdout.strip().splitlines()[0]
    kid = key_id_of(key)
    store = SqliteStore(tmp_path / "sessions.sqlite")
    assert verify(key, store.get_key(kid)).scopes == ["agent", "admin"]
    listing = run.invoke(admin, ["list-keys", *d, "--team", "lab1"]).stdout
    assert kid in listing and "agent,admin" in listing and "active" in listing and key not in listing
    assert run.invoke(admin, ["revoke-key", *d, kid]).exit_code == 0
    assert "revoked" in run.invoke(admin, ["list-keys", *d]).stdout
    assert store.get_key(kid).revoked_at is not None
    assert run.invoke(admin, ["create-key", *d, "--team", "nope"]).exit_code != 0
