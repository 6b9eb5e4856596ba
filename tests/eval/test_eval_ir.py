"""IR evaluation end to end: a tiny BEIR collection indexed and searched through a real service on loopback,
scored with ranx; values computed by hand from the unambiguous rankings."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest

from eval.ir import (
    evaluate_collection,
    load_beir,
    read_trec_run,
    score_runs,
    search_run,
    service_collection_name,
    to_paper,
    write_trec_run,
)
from eval.report import write_ir_report
from search.client import Client
from search.core.errors import InputError

from helpers import DOCS, QRELS, write_beir


def test_load_beir_checks_references(tmp_path):
    coll = load_beir(write_beir(tmp_path / "Tiny Set"))
    assert coll.judged_queries == ["q1", "q2", "q3"] and coll.qrels["q1"] == {"d2": 2}
    assert service_collection_name(coll.name) == "beir-tiny-set"
    assert to_paper(DOCS[1]).model_dump()["abstract"] == DOCS[1]["text"]
    bad = write_beir(tmp_path / "bad", QRELS + [("q2", "d9", 1)])
    with pytest.raises(InputError) as e:
        load_beir(bad)
    assert e.value.record == 5 and e.value.field == "corpus-id" and e.value.source.endswith("qrels.tsv")


def test_trec_run_round_trip(tmp_path):
    run = {"q1": {"d2": 3.5, "d1": 1.0}, "q2": {"d3": 2.0}}
    write_trec_run(run, tmp_path / "r.trec", "tag")
    lines = (tmp_path / "r.trec").read_text().splitlines()
    assert lines[0].split() == ["q1", "Q0", "d2", "1", "3.500000000", "tag"]
    assert read_trec_run(tmp_path / "r.trec") == run


@pytest.mark.slow  # ranx's first call in a process compiles numba typed containers (tens of seconds here)
def test_collection_through_live_service(live_server, tmp_path):
    coll_dir = write_beir(tmp_path / "tiny")
    baseline = tmp_path / "perfect.trec"
    write_trec_run({"q1": {"d2": 1.0}, "q2": {"d3": 1.0}, "q3": {"d4": 1.0}}, baseline, "perfect")
    out = tmp_path / "out"
    with Client(live_server.url) as client:
        result = evaluate_collection(client, coll_dir, ("bm25", "dense"), out_dir=out,
                                     baselines={"perfect": baseline},
                                     published=[{"source": "made up", "ndcg@10": 0.5}])
        run = search_run(client, load_beir(coll_dir), "beir-tiny")
    # q1: d2 first; q2: d1 (both words) before the judged d3; q3: no document matches
    assert list(run["q1"])[0] == "d2" and list(run["q2"])[:2] == ["d1", "d3"] and run["q3"] == {}
    bm25 = result["runs"]["flysift-bm25"]
    assert bm25["n_queries"] == 3
    assert bm25["ndcg@10"] == pytest.approx((1 + 1 / math.log2(3) + 0) / 3)
    assert bm25["mrr"] == pytest.approx((1 + 0.5) / 3) and bm25["map"] == pytest.approx((1 + 0.5) / 3)
    assert bm25["recall@100"] == pytest.approx(2 / 3)
    assert result["ndcg@10"] == bm25["ndcg@10"] and result["n_queries"] == 3
    dense_installed = bool(importlib.util.find_spec("faiss") and importlib.util.find_spec("sentence_transformers"))
    if dense_installed:
        assert "ndcg@10" in result["runs"]["flysift-dense"]
    else:
        assert "dense" in result["runs"]["flysift-dense"]["error"]       # no dense results are faked
    assert result["runs"]["perfect"]["ndcg@10"] == pytest.approx(1.0)
    sig = {(s["b"], s["metric"]): s for s in result["significance"]}
    assert sig[("perfect", "mrr")]["delta"] == pytest.approx(1 - 0.5)
    assert 0.0 <= sig[("perfect", "mrr")]["p_value"] <= 1.0
    assert (out / "flysift-bm25.trec").exists()
    write_ir_report(result, out)
    metrics = json.loads((out / "metrics.json").read_text())
    assert {"ndcg@10", "recall@100", "map", "mrr", "n_queries"} <= set(metrics)
    assert (out / "per_query_delta.png").read_bytes()[:4] == b"\x89PNG"
    md = (out / "report.md").read_text()
    if not dense_installed:                                                 # the failed run is reported as such
        assert "error" in md and "made up" in md


@pytest.mark.slow
def test_score_runs_paired_test_detects_difference():
    qrels = {f"q{i}": {"d1": 1} for i in range(12)}
    good = {q: {"d1": 3.0, "d2": 2.0, "d3": 1.0} for q in qrels}
    # the relevant document drops to rank 2 on even queries, rank 3 on odd ones
    bad = {q: {"d2": 3.0, "d1": 2.0 if i % 2 == 0 else 0.5, "d3": 1.0} for i, q in enumerate(qrels)}
    res = score_runs(qrels, {"good": good, "bad": bad})
    mrr = next(s for s in res["significance"] if s["metric"] == "mrr")
    assert mrr["delta"] == pytest.approx(-(0.5 + 2 / 3) / 2) and mrr["p_value"] < 0.01
    assert res["per_query"]["bad"]["q0"]["mrr"] == pytest.approx(0.5)
    assert res["per_query"]["bad"]["q1"]["mrr"] == pytest.approx(1 / 3)


# ---- issue #16, item 3: one bad query never fails a whole evaluation -------------------------------------------------

class _OneQueryTooLong:
    """A client that answers like the service: a query over the limit is refused (LimitExceeded), others hit d1."""

    def __init__(self, limit: int = 1000):
        self.limit = limit

    def search_papers(self, text, *, limit, offset, collection):
        from search.core.errors import LimitExceeded

        if len(text) > self.limit:
            raise LimitExceeded(f"query is {len(text)} characters; the limit is {self.limit}.")
        return {"hits": [{"pmcid": "d1", "score": 1.0}], "query": {}}


def test_a_too_long_query_is_a_per_query_error_and_the_rest_run(tmp_path):
    coll = load_beir(write_beir(tmp_path / "tiny"))
    coll.queries["q2"] = "heating " * 200                                    # 1,600 characters, like an abstract
    errors: dict[str, str] = {}
    run = search_run(_OneQueryTooLong(), coll, "beir-tiny", errors=errors)
    assert set(run) == {"q1", "q3"} and list(errors) == ["q2"] and "1600 characters" in errors["q2"]
    with pytest.raises(Exception, match="limit"):                            # without an errors dict: raised
        search_run(_OneQueryTooLong(), coll, "beir-tiny")


@pytest.mark.slow  # ranx compiles on first use
def test_a_run_without_any_hit_is_reported_not_crashed():
    res = score_runs(dict(QRELS_BY_QUERY), {"empty": {"q1": {}, "q2": {}, "q3": {}}})
    assert "no query returned any hit" in res["runs"]["empty"]["error"]


QRELS_BY_QUERY = {q: {d: s} for q, d, s in QRELS}


@pytest.mark.slow  # ranx compiles on first use
def test_evaluation_reports_failed_queries(live_server, tmp_path):
    coll_dir = write_beir(tmp_path / "tiny")
    queries = [json.loads(line) for line in (coll_dir / "queries.jsonl").read_text().splitlines()]
    queries[1]["text"] = "aerodynamic heating " * 60                          # over FLYSIFT_MAX_QUERY_CHARS
    (coll_dir / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    with Client(live_server.url) as client:
        result = evaluate_collection(client, coll_dir, ("bm25",))
    bm25 = result["runs"]["flysift-bm25"]
    assert bm25["n_failed"] == 1 and list(result["query_errors"]["flysift-bm25"]) == ["q2"]
    assert bm25["ndcg@10"] == pytest.approx(1 / 3)                          # q1 found, q2 failed, q3 no match
    write_ir_report(result, tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "1 failed" in md and "- q2:" in md


def test_eval_ir_writes_only_into_a_collection_the_user_named(live_server, tmp_path, monkeypatch):
    """No --into: refused before anything is written. A missing scorer: refused before indexing. An unreachable
    service: one line naming the URL and how to start it."""
    import sys

    from click.testing import CliRunner

    from search.cli.main import main

    coll_dir = write_beir(tmp_path / "tiny")
    base = ["eval", "ir", "--collection", str(coll_dir), "--out", str(tmp_path / "out"), "--url", live_server.url]
    unnamed = CliRunner().invoke(main, base)
    assert unnamed.exit_code == 2 and "--into beir-tiny" in unnamed.output
    monkeypatch.setitem(sys.modules, "ranx", None)  # as if the eval extra were not installed
    no_ranx = CliRunner().invoke(main, [*base, "--into", "scratch-tiny"])
    assert no_ranx.exit_code == 2 and "pip install 'flysift[eval]'" in no_ranx.output
    with Client(live_server.url) as client, pytest.raises(Exception, match="scratch-tiny"):
        client.stats(collection="scratch-tiny")   # nothing was indexed
    monkeypatch.delitem(sys.modules, "ranx")
    down = CliRunner().invoke(main, ["eval", "ir", "--collection", str(coll_dir), "--out", str(tmp_path / "o"),
                                     "--url", "http://127.0.0.1:9", "--into", "scratch-tiny"])
    assert down.exit_code == 1 and len(down.output.strip().splitlines()) == 1
    assert "http://127.0.0.1:9" in down.output and "flysift serve" in down.output
