"""The bulk label export ``GET /v1/terms/{ontology}/labels`` against a real service on loopback: every live term once
across pages, the same records a lookup gives, the version as ETag (304 on If-None-Match), hidden terms left out,
and hostile input (page size, cursors, ontology names)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import httpx
import pytest

from search.api.app import create_app
from search.client import AsyncClient, Client, InvalidRequestError, NotFoundError
from search.core.config import Settings
from search.core.models import Gene
from search.engines.embedded.terms import TermIndex
from search.ontology.model import Ontology
from search.text.lexicon import Lexicon

from helpers import LiveServer, term_service

FIX = Path(__file__).parents[1] / "fixtures"


def index(data: Path, cache: Path, name: str, path: Path, drop: frozenset[str] = frozenset()) -> Ontology:
    ont = Ontology.load(path, name, cache_dir=cache)
    if drop:
        ont = Ontology.from_terms(name, [t for t in ont.terms() if t.id not in drop])
    term_service(data).index_ontology(ont, TermIndex(data).write)
    return ont


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    data, cache = tmp_path_factory.mktemp("data"), tmp_path_factory.mktemp("cache")
    data.mkdir(parents=True, exist_ok=True)
    Lexicon([Gene(id="FBgn0000463", symbol="Dl", fullname="Delta")]).save(data / "lexicon.tsv")
    go = index(data, cache, "go", FIX / "mini.obo")
    index(data, cache, "fbbt", FIX / "mini_fbbt.obo")
    with LiveServer(create_app(Settings(data_dir=data))) as srv:
        yield srv, go, data, cache


def all_pages(c: Client, ontology: str = "go", page_size: int = 7, **kw) -> list:
    return list(c.iter_term_labels(ontology, page_size=page_size, **kw))


def test_pages_hold_every_live_term_once_as_a_lookup_gives_it(served):
    srv, go, _, _ = served
    live = sorted(t.id for t in go.terms() if not t.obsolete)
    assert len(live) > 14 and any(t.obsolete for t in go.terms())
    with Client(srv.url) as c:
        pages = all_pages(c)
        assert len(pages) == -(-len(live) // 7) and {p.version for p in pages} == {pages[0].version}
        assert [p.offset for p in pages] == list(range(0, len(live), 7))
        assert all(p.total == len(live) for p in pages) and pages[-1].next_cursor is None
        records = [t for p in pages for t in p.terms]
        assert sorted(r.id for r in records) == live and len(records) == len(live)
        for r in records:
            term = c.get_term(r.id).term
            assert (r.name, r.aspect, r.depth, r.synonyms, r.parents) == \
                (term.name, term.aspect, term.depth, term.synonyms, term.parents)
        assert any(s.scope != "RELATED" for r in records for s in r.synonyms)  # scopes travel
        one = c.term_labels("go", limit=10_000)
        assert one.next_cursor is None and [t.id for t in one.terms] == [r.id for r in records]


def test_version_is_the_etag_and_if_none_match_answers_304(served):
    srv = served[0]
    with httpx.Client(base_url=srv.url) as http:
        first = http.get("/v1/terms/go/labels", params={"limit": 3})
        version = first.json()["version"]
        assert first.status_code == 200 and first.headers["ETag"] == f'"{version}"'
        again = http.get("/v1/terms/go/labels", params={"limit": 3}, headers={"If-None-Match": f'"x", "{version}"'})
        assert again.status_code == 304 and again.content == b"" and again.headers["ETag"] == f'"{version}"'
        other = http.get("/v1/terms/go/labels", params={"limit": 3}, headers={"If-None-Match": '"0123"'})
        assert other.status_code == 200 and other.json() == first.json()
        fbbt = http.get("/v1/terms/fbbt/labels").json()
        assert fbbt["ontology"] == "fbbt" and fbbt["version"] != version and fbbt["terms"][0]["id"].startswith("FBbt:")


def test_hidden_terms_are_left_out_and_change_the_version(served):
    srv = served[0]
    with Client(srv.url) as c:
        full = all_pages(c, page_size=100)[0]
        hidden = all_pages(c, page_size=100, hidden=["GO:0005634"], hidden_descendants=True)[0]
        gone = {t.id for t in full.terms} - {t.id for t in hidden.terms}
        assert "GO:0005634" in gone and hidden.total == full.total - len(gone) and hidden.version != full.version
        s = c.create_session("Dl", hidden_terms={"ids": ["GO:0005634"]})
        c.session_id = s.id
        in_session = all_pages(c, page_size=100)[0]
        assert "GO:0005634" not in {t.id for t in in_session.terms} and in_session.version != full.version
        # a cursor names the version it was issued for: one from the hidden view is stale in the full view
        cursor = c.term_labels("go", limit=2).next_cursor
        c.session_id = None
        with pytest.raises(InvalidRequestError) as e:
            c.term_labels("go", limit=2, cursor=cursor)
        assert e.value.code == "cursor_stale" and e.value.details["version"] == full.version


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def test_hostile_cursors_are_refused(served):
    srv = served[0]
    with Client(srv.url) as c:
        page = c.term_labels("go", limit=5)
        good = page.next_cursor
        assert good and c.term_labels("go", limit=5, cursor=good).offset == 5
        raw = base64.urlsafe_b64decode(good + "=" * (-len(good) % 4)).decode()
        prefix, version, offset = raw.split(":")
        forged = [
            "garbage", "", "é" * 10, "A" * 101, good + "A", good[:-1],
            _b64(f"{prefix}:{version}:-1"), _b64(f"{prefix}:{version}:0"), _b64(f"{prefix}:{version}:999999"),
            _b64(f"{prefix}:{version}:{page.total}"), _b64(f"{prefix}:{version}:+5"), _b64(f"{prefix}:{version}:5:1"),
            _b64(f"l0:{version}:5"), _b64(f"{prefix}:{version}:05"), base64.urlsafe_b64encode(raw.encode()).decode(),
        ]
        for bad in forged:
            with pytest.raises(InvalidRequestError) as e:
                c.term_labels("go", limit=5, cursor=bad)
            assert e.value.status == 422 and e.value.details.get("field", "cursor") == "cursor", bad
            assert len(e.value.message) < 400
        with pytest.raises(InvalidRequestError) as e:
            c.term_labels("go", limit=5, cursor=_b64(f"{prefix}:{'0' * 20}:5"))
        assert e.value.code == "cursor_stale"


@pytest.mark.parametrize("limit", [0, -1, 10_001])
def test_page_size_is_bounded(served, limit):
    with Client(served[0].url) as c, pytest.raises(InvalidRequestError) as e:
        c.term_labels("go", limit=limit)
    assert e.value.status == 422


def test_unknown_ontology_is_404_with_the_valid_names_and_malformed_is_422(served):
    with Client(served[0].url) as c:
        with pytest.raises(NotFoundError) as e:
            c.term_labels("fbdv")
        assert e.value.status == 404 and set(e.value.details["valid"]) == {"fbbt", "go"}
        for bad in ("GO", "go.obo", "a" * 40, "go\u00e9", "go%5C..%5Cx"):
            with pytest.raises(InvalidRequestError) as e2:
                c.term_labels(bad)
            assert e2.value.status == 422 and e2.value.details["field"] == "ontology", bad


def test_reindexing_changes_the_version_and_stales_cursors(tmp_path):
    data, cache = tmp_path / "data", tmp_path / "cache"
    data.mkdir(parents=True, exist_ok=True)
    index(data, cache, "go", FIX / "mini.obo")
    with LiveServer(create_app(Settings(data_dir=data))) as srv, Client(srv.url) as c:
        before = c.term_labels("go", limit=4)
        index(data, cache, "go", FIX / "mini.obo", drop=frozenset({"GO:0005634"}))
        after = c.term_labels("go", limit=4)
        assert after.version != before.version and after.total == before.total - 1
        with pytest.raises(InvalidRequestError) as e:
            c.term_labels("go", limit=4, cursor=before.next_cursor)
        assert e.value.code == "cursor_stale"


def test_async_client_iterates_the_same_pages(served):
    srv = served[0]

    async def pages() -> list:
        async with AsyncClient(srv.url) as ac:
            return [p async for p in ac.iter_term_labels("go", page_size=6)]

    with Client(srv.url) as c:
        sync = all_pages(c, page_size=6)
    assert asyncio.run(pages()) == sync
