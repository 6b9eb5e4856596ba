"""The indexing run against a real cluster node: every paper the cluster refuses reaches the rejects report, also
when the refusal comes back from the last bulk request of the run (sent by the final commit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexer.pipeline import index_corpus
from search.core.config import Settings
from search.services import Services

pytestmark = pytest.mark.cluster


def test_a_refusal_in_the_last_bulk_reaches_the_rejects_report(cluster_settings: Settings, tmp_path: Path):
    records = [{"pmcid": f"PMC3{i:05d}", "title": f"Paper {i}", "abstract": "Wingless signalling in discs.",
                "sections": {"RESULTS": [f"Paragraph {i} about wg and dpp."]}} for i in range(6)]
    # a keyword longer than Lucene's 32,766-byte term limit: the node refuses this one document, not the request
    records[-1]["journal"] = "J" * 40_000
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = index_corpus([corpus], Services.open(cluster_settings), workers=1)
    assert (summary.read, summary.indexed, summary.rejected) == (6, 5, 1)
    rejects = [json.loads(line) for line in Path(summary.rejects_file).read_text().splitlines()]
    assert [r["pmcid"] for r in rejects] == ["PMC300005"]
    assert "journal" in (rejects[0].get("field") or "") + rejects[0]["reason"]


def test_an_api_build_names_the_paper_the_cluster_refused(cluster_settings: Settings):
    import httpx

    from search.api.app import create_app

    from helpers import LiveServer

    docs = [{"pmcid": "d1", "title": "", "abstract": "aerodynamic heating of wings"},
            {"pmcid": "d2", "title": "", "abstract": "boundary layer transition", "journal": "J" * 40_000}]
    with LiveServer(create_app(cluster_settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as http:
        bid = http.post("/v1/collections/ir-test/builds").json()["build_id"]
        body = http.post(f"/v1/collections/ir-test/builds/{bid}/papers", json={"papers": docs}).json()
        assert body["indexed"] == 1 and [r["pmcid"] for r in body["rejected"]] == ["d2"]
        http.delete(f"/v1/collections/ir-test/builds/{bid}")
