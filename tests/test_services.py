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
