"""Issue #26 item 8 from the command line and over HTTP: `flysift index concepts` (progress, summary, a second
model of recognition never needed), `term:` through the API, refused in a session that hides terms."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from click.testing import CliRunner

from search.api.app import create_app
from search.cli.main import main
from search.core.config import Settings
from search.engines.embedded.terms import TermIndex
from search.ontology.model import Ontology

from helpers import PAPERS, LiveServer, build_index, term_service

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def _data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    build_index(data)
    ont = Ontology.load(FIX / "mini.obo", "go", cache_dir=tmp_path / "cache")
    term_service(data).index_ontology(ont, TermIndex(data).write)
    return data


def test_index_concepts_shows_progress_and_a_summary(tmp_path):
    data = _data(tmp_path)
    res = CliRunner().invoke(main, ["index", "concepts", "--data-dir", str(data), "--workers", "1", "--json"])
    assert res.exit_code == 0, res.output
    meta = json.loads(res.stdout.strip().splitlines()[-1])
    assert meta["papers"] == len(PAPERS) and meta["ontologies"] == ["go"] and meta["mentions"] >= 1
    assert '"stage"' in res.stderr and "concept index of 'default'" in res.stderr
    out = CliRunner().invoke(main, ["search", "term:GO:0005634", "--data-dir", str(data)])
    assert out.exit_code == 0 and "PMC100001" in out.output


def test_term_over_http_and_in_sessions(tmp_path):
    data = _data(tmp_path)
    with LiveServer(create_app(Settings(data_dir=data))) as srv, httpx.Client(base_url=srv.url) as http:
        r = http.post("/v1/papers/search", json={"query": "term:GO:0005634"})
        assert r.status_code == 409 and r.json()["error"]["code"] == "concepts_missing"
        res = CliRunner().invoke(main, ["index", "concepts", "--data-dir", str(data), "--workers", "1"])
        assert res.exit_code == 0, res.output
        r = http.get("/v1/papers/search", params={"query": "term:GO:0005634"})
        assert r.status_code == 200 and r.json()["hits"][0]["mentions"][0]["text"] == "nucleus"
        sid = http.post("/v1/sessions", json={"gene": "FBgn0000463", "max_papers": 3,
                                              "hidden_terms": {"ids": ["GO:0005634"]}}).json()["id"]
        r = http.post("/v1/papers/search", json={"query": "term:GO:0005634", "syntax": "query"},
                      headers={"X-Session-Id": sid})
        assert r.status_code == 422 and r.json()["error"]["details"]["rule"] == "term_in_session"
        assert http.get("/v1/collections").json()["collections"][0]["concepts"]["ontologies"] == ["go"]
