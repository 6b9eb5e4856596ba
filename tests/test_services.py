"""Issue #25: one composition root. ``Services`` makes each service once and wires them to each other: the term
service searches the configured engine (never an embedded one it built itself), the session service checks ids with
that term service, the app serves exactly these objects, and the builds of the REST API and the indexer go through
one build service."""

from __future__ import annotations

from pathlib import Path

from search.api.app import create_app
from search.core.config import Settings
from search.services import Services

from helpers import PAPERS


def test_each_service_is_made_once_and_wired_to_the_others(tmp_path: Path):
    services = Services.open(Settings(data_dir=tmp_path))
    assert services.search is services.search and services.terms is services.terms
    assert services.terms.engine is services.engine() is services.search.engine("default")
    assert services.sessions.terms is services.terms and services.sessions.store is services.store
    app = create_app(services=services)
    assert (app.state.search, app.state.terms, app.state.sessions, app.state.builds) == (
        services.search, services.terms, services.sessions, services.builds)


def test_in_cluster_mode_terms_go_to_the_cluster_and_nothing_embedded_is_made(tmp_path: Path):
    """The CLI used to build an embedded engine for the term service in cluster mode; now the term service gets the
    configured engine, and opening it writes nothing into the data directory."""
    services = Services.open(Settings(data_dir=tmp_path, cluster_url="http://127.0.0.1:1"))
    assert services.terms.engine.name == "cluster"
    assert list(tmp_path.iterdir()) == []


def test_one_build_service_writes_for_both_paths(tmp_path: Path):
    """The REST adapter's calls and the indexer's writer are the same service: a build opened for the API is
    filled, publishes, and the engine of the composition root serves it."""
    services = Services.open(Settings(data_dir=tmp_path))
    builds = services.builds
    build_id = builds.create("default")
    added = builds.add_papers("default", build_id, PAPERS)
    assert added["indexed"] == len(PAPERS) and added["passages"] > 0 and added["rejected"] == []
    builds.publish("default", build_id)
    assert services.engine().stats().papers == len(PAPERS)
    writer = builds.open("default", "fingerprint-1", resume=False)
    assert writer.collection == "default" and writer.id != build_id
    writer.abort(discard=True)


def test_term_limits_come_from_the_settings(tmp_path: Path):
    """The term routes have no limits of their own: a term search, a resolve and the FlyAOC term tools answer at
    most ``max_page_size`` hits and take queries of at most ``max_query_chars``, as paper search does, and the
    OpenAPI document says so."""
    from fastapi.testclient import TestClient

    from search.ontology.model import Ontology

    settings = Settings(data_dir=tmp_path, max_page_size=3, max_query_chars=20)
    services = Services.open(settings)
    services.terms.index_ontology(Ontology.load(Path(__file__).parent / "fixtures" / "mini.obo", "go",
                                                cache_dir=tmp_path / "cache"))
    with TestClient(create_app(services=services)) as client:
        assert len(client.get("/v1/terms/search", params={"query": "activity", "limit": 3}).json()["hits"]) == 3
        for path, params in (("/v1/terms/search", {"query": "activity", "limit": 4}),
                             ("/v1/terms/resolve", {"text": "activity", "limit": 4}),
                             ("/v1/flyaoc/search_go_terms", {"query": "activity", "limit": 4})):
            r = client.get(path, params=params)
            assert r.status_code == 422 and "between 1 and 3" in r.json()["error"]["message"], (path, r.text)
        r = client.get("/v1/terms/search", params={"query": "a" * 21})
        assert r.status_code == 422 and "longer than 20" in r.json()["error"]["message"]
        doc = client.get("/openapi.json").json()
        limit = next(p for p in doc["paths"]["/v1/terms/search"]["get"]["parameters"] if p["name"] == "limit")
        assert limit["schema"]["maximum"] == 3
