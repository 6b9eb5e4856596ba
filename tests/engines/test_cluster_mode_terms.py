"""Cluster mode end to end for ontology terms: the indexer writes terms through the configured engine, and the API
searches them there (it once read a local tantivy term index that only the embedded engine writes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from indexer.ontologies import ontology as index_ontology
from search.api.app import create_app
from search.core.config import Settings
from search.engines import open_engine

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.cluster
def test_api_term_search_reads_the_cluster_the_indexer_wrote(cluster_settings: Settings):
    s = cluster_settings
    env = {"FLYSIFT_CLUSTER_URL": s.cluster_url, "FLYSIFT_CLUSTER_FLAVOUR": s.cluster_flavour,
           "FLYSIFT_CLUSTER_INDEX_PREFIX": s.cluster_index_prefix, "FLYSIFT_ENGINE": None}
    res = CliRunner().invoke(index_ontology, [str(FIXTURES / "mini.obo"), "--name", "go", "--data-dir",
                                              str(s.data_dir), "--no-cache"], env=env)
    assert res.exit_code == 0, res.output
    assert not (s.data_dir / "terms").exists()   # nothing local to fall back on: the terms are on the cluster
    assert open_engine(s).stats().terms["go"] > 10

    with TestClient(create_app(s)) as client:
        r = client.get("/v1/terms/search", params={"q": "nucleus", "ontology": "go"})
        assert r.status_code == 200, r.text
        assert r.json()["hits"][0]["id"] == "GO:0005634"
        r = client.get("/v1/terms/search", params={"q": "up-regulation of gene expression", "ontology": "go"})
        assert r.json()["hits"][0]["name"] == "positive regulation of gene expression"
        r = client.get("/v1/terms/search", params={"q": "nucleus", "ontology": "go", "hidden": "GO:0005634"})
        assert r.status_code == 200 and "GO:0005634" not in [h["id"] for h in r.json()["hits"]]
        assert r.json()["hidden"] == 1
