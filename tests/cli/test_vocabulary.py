"""Issue #14 item 9: one vocabulary across REST, CLI, client and MCP (term search takes ``query`` like paper
search, ``q`` a deprecated alias; one URL option; ``--json`` is the REST body; labelled table columns; the CLI
lists the valid ontology names as REST does)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from search.api.app import create_app
from search.client import Client
from search.core.config import Settings
from search.ontology.model import Ontology

from helpers import term_service

FIX = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def go_settings(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("FLYSIFT_ONTOLOGY_CACHE", str(tmp_path / "cache"))
    term_service(settings.data_dir).index_ontology(Ontology.load(FIX / "mini.obo", "go"))
    return settings


@pytest.fixture
def client(go_settings: Settings) -> TestClient:
    return TestClient(create_app(go_settings))


def test_term_search_takes_query_and_q_is_a_deprecated_alias(client):
    new = client.get("/v1/terms/search", params={"query": "nucleus", "ontology": "go"})
    old = client.get("/v1/terms/search", params={"q": "nucleus", "ontology": "go"})
    assert new.status_code == old.status_code == 200 and new.json() == old.json()
    assert new.json()["hits"][0]["id"] == "GO:0005634"
    both = client.get("/v1/terms/search", params={"query": "nucleus", "q": "cell"})
    assert both.status_code == 422 and both.json()["error"]["details"]["field"] == "q"
    neither = client.get("/v1/terms/search", params={"ontology": "go"})
    assert neither.status_code == 422 and neither.json()["error"]["details"]["field"] == "query"
    op = client.get("/openapi.json").json()["paths"]["/v1/terms/search"]["get"]
    params = {p["name"]: p for p in op["parameters"]}
    assert params["q"].get("deprecated") is True and not params["query"].get("deprecated")


def test_client_sends_query_and_warns_on_q():
    sent: list[httpx.URL] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.url)
        return httpx.Response(200, json={"ontology": "go", "query": "x", "aspect": None, "hidden": 0, "hits": []})

    with Client("http://flysift.test", transport=httpx.MockTransport(handler)) as c:
        c.search_terms("nucleus")
        with pytest.warns(DeprecationWarning, match="query="):
            c.search_terms(q="cell")
    assert [u.params.get("query") for u in sent] == ["nucleus", "cell"] and "q" not in sent[0].params


def _cli(*args: str) -> str:
    from search.cli.main import main

    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 0, r.output
    return r.output


def test_terms_json_is_the_rest_body(client, go_settings):
    d = str(go_settings.data_dir)
    body = client.get("/v1/terms/search", params={"query": "nucleus", "ontology": "go"}).json()
    assert json.loads(_cli("terms", "nucleus", "--json", "--data-dir", d)) == body
    resolved = client.get("/v1/terms/resolve", params={"text": "cell nucleus", "limit": 10}).json()
    assert json.loads(_cli("terms", "cell nucleus", "--resolve", "--json", "--data-dir", d)) == resolved


def test_search_json_is_the_rest_body_with_the_snippets_the_table_shows(client, go_settings):
    body = client.post("/v1/papers/search", json={"query": "wing", "snippets": True}).json()
    out = json.loads(_cli("search", "wing", "--json", "--data-dir", str(go_settings.data_dir)))
    assert any(h["snippets"] for h in out["hits"])
    for got in (out, body):
        got.pop("took_ms", None)
    assert out == body


def test_terms_table_columns_are_labelled(go_settings, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    header = _cli("terms", "nucleus", "--data-dir", str(go_settings.data_dir)).splitlines()[0]
    # columns with nothing in them (no hit matched a synonym, none is obsolete) are left out (issue #26 item 7)
    assert re.split(r"\s{2,}", header.strip()) == ["id", "aspect", "name", "score", "definition"]


def test_cli_lists_the_valid_ontology_names_like_rest(client, go_settings):
    from search.cli.main import main

    rest = client.get("/v1/terms/search", params={"query": "x", "ontology": "fbdv"}).json()["error"]
    r = CliRunner().invoke(main, ["terms", "x", "--ontology", "fbdv", "--data-dir", str(go_settings.data_dir)])
    assert r.exit_code == 2 and rest["details"]["valid"] == ["go"]
    assert rest["message"] in r.output and "(valid: go)" in r.output


def test_mcp_takes_url_like_eval_and_curate_and_api_still_works(monkeypatch):
    from search.cli.main import main

    monkeypatch.delenv("FLYSIFT_URL", raising=False)
    monkeypatch.delenv("FLYSIFT_API_URL", raising=False)
    r = CliRunner().invoke(main, ["mcp", "--url", "http://127.0.0.1:9", "--gene", "Dl"])
    assert r.exit_code == 1 and "127.0.0.1:9" in r.output and "deprecated" not in r.output
    r = CliRunner().invoke(main, ["mcp", "--api", "http://127.0.0.1:9", "--gene", "Dl"])
    assert r.exit_code == 1 and "127.0.0.1:9" in r.output and "deprecated" in r.output
    monkeypatch.setenv("FLYSIFT_URL", "http://127.0.0.1:9")
    r = CliRunner().invoke(main, ["mcp", "--gene", "Dl"])
    assert r.exit_code == 1 and "127.0.0.1:9" in r.output
