"""A full disk at serving time (issue #28): every call that writes the session store answers 507 ``storage_full``
(the documented error), never 500, and a traced call is never answered before its record is stored (a session search
used to answer 200 with a Content-Length and then no body).

The disk is made full by SQLite itself: every connection of the store gets ``PRAGMA max_page_count`` at the
database's current size, so any write that needs a new page fails with SQLite's own SQLITE_FULL ("database or disk
is full"). Each call below stores more than a page (a long query parameter is recorded in the trace), so each needs
one.
"""

from __future__ import annotations

import json

import httpx
import pytest

from search.api.app import create_app
from search.core.config import Settings
from search.core.models import Gene
from search.sessions.store import SqliteStore
from search.text.lexicon import Lexicon

from helpers import PAPERS, LiveServer, build_index

PAD = "x" * 9000   # recorded in the trace event's arguments: more than two 4 KiB pages


@pytest.fixture
def full_disk(tmp_path, monkeypatch):
    data = tmp_path / "data"
    build_index(data)
    Lexicon([Gene(id="FBgn0000463", symbol="Dl", fullname="Delta")]).save(data / "lexicon.tsv")
    state = {"full": False}
    real = SqliteStore._conn

    def conn(self: SqliteStore):
        db = real(self)
        if state["full"]:
            pages = db.execute("PRAGMA page_count").fetchone()[0]
            db.execute(f"PRAGMA max_page_count={pages}")
        else:
            db.execute("PRAGMA max_page_count=1073741823")
        return db

    monkeypatch.setattr(SqliteStore, "_conn", conn)
    with LiveServer(create_app(Settings(data_dir=data))) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        sid = c.post("/v1/sessions", json={"gene": "Dl", "max_papers": 3}).json()["id"]
        yield c, sid, state


def _storage_full(r: httpx.Response) -> None:
    assert r.status_code == 507, (r.status_code, r.text[:300])
    body = r.json()   # a whole JSON body, never a cut one
    assert body["error"]["code"] == "storage_full", body
    assert "disk is full" in body["error"]["message"]


def test_every_store_write_answers_507_on_a_full_disk(full_disk):
    c, sid, state = full_disk
    state["full"] = True
    head = {"X-Session-Id": sid}
    _storage_full(c.post("/v1/sessions", json={"gene": "Dl", "label": "l" * 200,
                                               "hidden_terms": {"ids": [f"GO:{i:07d}" for i in range(2000)]}}))
    _storage_full(c.get(f"/v1/papers/{PAPERS[0].pmcid}", params={"pad": PAD}, headers=head))
    _storage_full(c.post("/v1/papers/search", params={"pad": PAD}, json={"query": "wing"}, headers=head))
    _storage_full(c.post(f"/v1/sessions/{sid}/names", params={"pad": PAD}, json={"names": ["Delta"]}))
    _storage_full(c.post(f"/v1/sessions/{sid}/submission", params={"pad": PAD},
                         json={"gene_id": "FBgn0000463", "annotations": []}))

    # room again: no read was charged and no call recorded (names and a submission small enough to fit may have
    # been stored before their trace event failed: registering names again is harmless)
    state["full"] = False
    session = c.get(f"/v1/sessions/{sid}").json()
    assert session["budget_used"] == 0 and session["papers_read"] == []
    assert c.get(f"/v1/sessions/{sid}/trace").json()["events"] == []
    r = c.get(f"/v1/papers/{PAPERS[0].pmcid}", headers=head)
    assert r.status_code == 200 and r.headers["X-Budget-Used"] == "1"
    assert [e["status"] for e in c.get(f"/v1/sessions/{sid}/trace").json()["events"]] == [200]


def test_a_traced_answer_is_complete_or_an_error(full_disk):
    """The status line of a traced call goes out only after its record is stored."""
    c, sid, state = full_disk
    state["full"] = True
    with c.stream("POST", "/v1/passages/search", params={"pad": PAD}, json={"query": "wing"},
                  headers={"X-Session-Id": sid}) as r:
        raw = r.read()
    assert r.status_code == 507 and int(r.headers["content-length"]) == len(raw)
    assert json.loads(raw)["error"]["code"] == "storage_full"
