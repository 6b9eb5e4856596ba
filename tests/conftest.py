"""Every shared fixture, in one place: tests use them by name and never import one.

The data and helpers they are built from (the fixture corpus, the loopback server, the cluster node) are in
``helpers.py``; ``cluster_settings`` gives each cluster test an index prefix of its own (deleted afterwards), so the
tests share one node.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from search.core.config import Settings

from helpers import ClusterNode, LiveServer, build_index, cluster_flavours, find_cluster_node


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    build_index(d)
    return d


@pytest.fixture
def settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir)


@pytest.fixture
def live_server(settings: Settings) -> Iterator[LiveServer]:
    from search.api.app import create_app

    with LiveServer(create_app(settings)) as srv:
        yield srv


@pytest.fixture(scope="session", params=cluster_flavours())
def cluster_node(request: pytest.FixtureRequest) -> ClusterNode:
    """A real Elasticsearch/OpenSearch node (tests marked ``cluster``); see ``helpers.find_cluster_node``."""
    return find_cluster_node(request.param)


@pytest.fixture
def cluster_settings(cluster_node: ClusterNode, tmp_path: Path) -> Iterator[Settings]:
    """Settings for a ``ClusterEngine`` on the test node, with an index prefix of its own (cleaned up after)."""
    prefix = f"fst-{uuid.uuid4().hex[:10]}"
    yield Settings(data_dir=tmp_path / "data", cluster_url=cluster_node.urls, cluster_flavour=cluster_node.flavour,
                   cluster_index_prefix=prefix)
    cluster_node.cleanup(prefix)
