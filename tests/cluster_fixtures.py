"""Fixtures for tests against a real Elasticsearch/OpenSearch node (tests marked ``cluster``).

Where the node comes from, in order:

1. ``FLYSIFT_TEST_CLUSTER_URL`` (flavour from ``FLYSIFT_TEST_CLUSTER_FLAVOUR``, default ``opensearch``): a running
   node, e.g. the one-JVM OpenSearch of ``deploy/cluster-local/start.sh`` that ``.ci/run`` starts;
2. Docker: testcontainers starts OpenSearch 2 and Elasticsearch 8 (the tests run once per flavour), images from
   ``FLYSIFT_TEST_OPENSEARCH_IMAGE`` / ``FLYSIFT_TEST_ELASTICSEARCH_IMAGE``;
3. neither: the tests are skipped, except under CI (``CI`` set), where a missing node fails the run.

Every test gets its own index prefix (``cluster_settings``) and its indices are deleted afterwards, so tests can
share one node.
"""

from __future__ import annotations

import atexit
import json
import os
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from search.core.config import Settings

OPENSEARCH_IMAGE = os.environ.get("FLYSIFT_TEST_OPENSEARCH_IMAGE", "opensearchproject/opensearch:2.19.1")
ELASTICSEARCH_IMAGE = os.environ.get("FLYSIFT_TEST_ELASTICSEARCH_IMAGE",
                                     "docker.elastic.co/elasticsearch/elasticsearch:8.15.5")
JAVA_OPTS = "-Xms512m -Xmx1g"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _flavours() -> list[str]:
    if os.environ.get("FLYSIFT_TEST_CLUSTER_URL"):
        return [os.environ.get("FLYSIFT_TEST_CLUSTER_FLAVOUR", "opensearch")]
    return ["opensearch", "elasticsearch"]


@dataclass
class ClusterNode:
    url: str
    flavour: str
    container: Any = field(default=None, repr=False)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """A plain HTTP call for test set-up and inspection (the engine under test uses the official clients)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"null")

    def indices(self, pattern: str) -> list[str]:
        return sorted(self.call("GET", f"/{pattern}/_settings/index.creation_date?allow_no_indices=true") or {})

    def cleanup(self, prefix: str) -> None:
        """Delete the prefix's indices and templates by name (Elasticsearch 8 refuses wildcard deletes)."""
        names = self.indices(f"{prefix}-*")
        if names:
            self.call("DELETE", "/" + ",".join(names))
        templates = self.call("GET", "/_index_template").get("index_templates", [])
        for t in templates:
            if t["name"].startswith(prefix + "-"):
                self.call("DELETE", f"/_index_template/{t['name']}")


def _wait_ready(url: str, timeout_s: float) -> str | None:
    """None once the node answers with yellow or green health, else the last error."""
    deadline, last = time.monotonic() + timeout_s, "no answer"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_cluster/health?wait_for_status=yellow&timeout=5s", timeout=10) as r:
                status = json.loads(r.read())["status"]
                if status in ("green", "yellow"):
                    return None
                last = f"health {status}"
        except OSError as e:
            last = str(e)
        time.sleep(1)
    return last


def _docker_available() -> bool:
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:
        return False


_STARTED: dict[str, ClusterNode] = {}


def _start_container(flavour: str) -> ClusterNode:
    """One container per flavour for the whole run (also when the fixture is imported into several modules)."""
    if flavour in _STARTED:
        return _STARTED[flavour]
    if flavour == "elasticsearch":
        from testcontainers.community.elasticsearch import ElasticSearchContainer

        container = ElasticSearchContainer(ELASTICSEARCH_IMAGE, mem_limit="2g").with_env("ES_JAVA_OPTS", JAVA_OPTS)
    else:
        from testcontainers.community.opensearch import OpenSearchContainer

        container = OpenSearchContainer(OPENSEARCH_IMAGE).with_env("OPENSEARCH_JAVA_OPTS", JAVA_OPTS)
    container.start()
    atexit.register(container.stop)
    node = ClusterNode(f"http://{container.get_container_host_ip()}:{container.get_exposed_port(9200)}", flavour,
                       container)
    _STARTED[flavour] = node
    return node


@pytest.fixture(scope="session", params=_flavours())
def cluster_node(request: pytest.FixtureRequest) -> ClusterNode:
    flavour = request.param
    url = os.environ.get("FLYSIFT_TEST_CLUSTER_URL")
    if url:
        url = url.split(",")[0].rstrip("/")
        problem = _wait_ready(url, 120)
        if problem:
            pytest.fail(f"FLYSIFT_TEST_CLUSTER_URL={url} is set but the node is not ready: {problem}")
        return ClusterNode(url, flavour)
    if _docker_available():
        node = _start_container(flavour)
        problem = _wait_ready(node.url, 180)
        if problem:
            pytest.fail(f"the {flavour} container at {node.url} did not become ready: {problem}")
        return node
    msg = ("no search cluster for the cluster tests: start one with `URL=$(deploy/cluster-local/start.sh)` and set "
           "FLYSIFT_TEST_CLUSTER_URL=$URL, or install Docker (testcontainers)")
    if in_ci():
        pytest.fail(f"CI must run the cluster tests, but there is {msg}")
    pytest.skip(msg)


@pytest.fixture
def cluster_settings(cluster_node: ClusterNode, tmp_path: Path) -> Iterator[Settings]:
    """Settings for a ``ClusterEngine`` on the test node, with an index prefix of its own (cleaned up after)."""
    prefix = f"fst-{uuid.uuid4().hex[:10]}"
    yield Settings(data_dir=tmp_path / "data", cluster_url=cluster_node.url, cluster_flavour=cluster_node.flavour,
                   cluster_index_prefix=prefix)
    cluster_node.cleanup(prefix)
