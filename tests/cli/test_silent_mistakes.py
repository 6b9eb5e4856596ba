"""Issue #14 item 2: validation instead of silent wrong results (ontology names against the file's ids, typos in
nested filters, aspect filters on ontologies without aspects, inverted year ranges)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from search.api.app import create_app
from search.core.config import Settings
from search.ontology.model import Ontology

from helpers import term_service

FIX = Path(__file__).resolve().parents[1] / "fixtures"

FBDV = """format-version: 1.2
ontology: fbdv

[Term]
id: FBdv:00005289
name: embryonic stage

[Term]
id: FBdv:00005291
name: blastoderm stage
is_a: FBdv:00005289 ! embryonic stage
"""


@pytest.fixture
def fbdv_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLYSIFT_ONTOLOGY_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "fbdv.obo"
    path.write_text(FBDV)
    return path


def test_ontology_named_after_another_ontologys_ids_is_refused(tmp_path, fbdv_file):
    from indexer.ontologies import ontology

    data = tmp_path / "d"
    runner = CliRunner()
    r = runner.invoke(ontology, [str(FIX / "mini.obo"), "--name", "go", "--no-dense", "--data-dir", str(data)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(ontology, [str(fbdv_file), "--name", "go", "--data-dir", str(data)])
    assert r.exit_code == 2
    assert "FBdv" in r.output and "--name fbdv" in r.output and "--allow-name-mismatch" in r.output
    assert term_service(data).ontology("go").get("GO:0005634") is not None   # GO was not replaced
    # a name no known ontology uses, on a known ontology's ids: also refused (it would hide FBdv's id prefix)
    assert runner.invoke(ontology, [str(fbdv_file), "--name", "stages", "--data-dir", str(data)]).exit_code == 2
    r = runner.invoke(ontology, [str(fbdv_file), "--name", "fbdv", "--data-dir", str(data)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(ontology, [str(fbdv_file), "--name", "stages", "--allow-name-mismatch", "--data-dir", str(data)])
    assert r.exit_code == 0, r.output


def test_name_mismatch_rules():
    from indexer.ontologies import name_mismatch

    assert name_mismatch("go", ["GO:0000001", "GO:0000002", "CHEBI:1"]) is None
    assert name_mismatch("mine", ["MY:1", "MY:2"]) is None
    assert name_mismatch("go", []) is None
    assert "did you mean --name fbbt" in (name_mismatch("go", ["FBbt:00000001"]) or "")


@pytest.fixture
def client(tmp_path: Path, settings: Settings, fbdv_file: Path) -> TestClient:
    svc = term_service(settings.data_dir)
    svc.index_ontology(Ontology.load(FIX / "mini.obo", "go"))
    svc.index_ontology(Ontology.load(fbdv_file, "fbdv"))
    return TestClient(create_app(settings))


def test_aspect_filter_on_an_ontology_without_aspects_is_422(client):
    assert client.get("/v1/terms/search", params={"q": "nucleus", "ontology": "go", "aspect": "C"}).status_code == 200
    r = client.get("/v1/terms/search", params={"q": "stage", "ontology": "fbdv", "aspect": "P"})
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "aspect"
    assert "fbdv" in r.json()["error"]["message"]
    assert client.get("/v1/terms/search", params={"q": "stage", "ontology": "fbdv"}).status_code == 200


def test_inverted_year_range_and_filter_typos_are_422(client):
    for filters in ({"year_from": 2010, "year_to": 2000}, {"year_form": 2000}):
        r = client.post("/v1/papers/search", json={"query": "wing", "filters": filters})
        assert r.status_code == 422, (filters, r.text)
    r = client.post("/v1/papers/search", json={"query": "wing", "filters": {"year_from": 2000, "year_to": 2000}})
    assert r.status_code == 200


def test_cli_inverted_year_range_is_one_line(settings):
    from search.cli.main import main

    r = CliRunner().invoke(main, ["search", "wing", "--year-from", "2010", "--year-to", "2000",
                                  "--data-dir", str(settings.data_dir)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "year_from (2010) is after year_to (2000)" in lines[0]
