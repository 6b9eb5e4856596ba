"""The dense term index (issue #15): built from a tiny ontology with the real packaged MiniLM, loaded and checked,
paraphrases that only the dense side finds, fused with the lexical ranking, stale or damaged files ignored, bounded
inputs, and 409 dense_unavailable where there is no index."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from search.core.errors import InvalidRequest
from search.core.models import Synonym
from search.engines.dense import DenseUnavailable
from search.engines.embedded.terms import TermIndex
from search.ontology import dense_terms
from search.ontology.model import Ontology
from search.ontology.service import TermService

from helpers import term_service

FIX = Path(__file__).parents[1] / "fixtures"
DENSE_EXTRA = dense_terms.extra_installed()
needs_dense = pytest.mark.skipif(not DENSE_EXTRA, reason="the optional 'dense' extra is not installed (pip install "
                                                         "-e '.[dense]': sentence-transformers and the packaged model)")


def _index(d: Path, ont: Ontology, dense: bool = True) -> TermService:
    svc = term_service(d)
    svc.index_ontology(ont, TermIndex(d).write)
    if dense:
        dense_terms.build(d, ont)
    return term_service(d)   # reads the saved files, as a served instance does


@pytest.fixture(scope="module")
def ont(tmp_path_factory) -> Ontology:
    return Ontology.load(FIX / "dense_terms.obo", "go", cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def built(tmp_path_factory, ont) -> Path:
    """One data dir with the fixture's lexical and dense indexes (embedding is the slow part: built once)."""
    if not DENSE_EXTRA:
        pytest.skip("the optional 'dense' extra is not installed (pip install -e '.[dense]')")
    d = tmp_path_factory.mktemp("dense-terms")
    _index(d, ont)
    return d


def _copy(built: Path, dest: Path) -> Path:
    shutil.copytree(built, dest, symlinks=True)
    return dest


def ids(res) -> list[str]:
    return [h.id for h in res.hits]


def test_mode_is_checked_before_anything_is_loaded(tmp_path, ont):
    svc = _index(tmp_path, ont, dense=False)
    with pytest.raises(InvalidRequest) as e:
        svc.search("go", "walking", mode="semantic")
    assert e.value.details["field"] == "mode" and e.value.details["valid"] == ["bm25", "dense", "hybrid"]
    assert svc.search("go", "locomotion").mode == "bm25"   # the default is the lexical ranking, as before


def test_no_dense_index_is_409_dense_unavailable(tmp_path, ont):
    svc = _index(tmp_path, ont, dense=False)
    for mode in ("dense", "hybrid"):
        with pytest.raises(DenseUnavailable) as e:
            svc.search("go", "walking", mode=mode)
        assert e.value.status == 409 and "flysift index ontology" in e.value.message
    from search.api.app import create_app
    from search.core.config import Settings

    c = TestClient(create_app(Settings(data_dir=tmp_path)))
    r = c.get("/v1/terms/search", params={"ontology": "go", "query": "walking", "mode": "hybrid"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "dense_unavailable"
    assert c.get("/v1/terms/search", params={"query": "walking", "mode": "nope"}).status_code == 422
    assert c.get("/v1/terms/search", params={"query": "locomotion"}).json()["mode"] == "bm25"


@needs_dense
def test_build_writes_checked_arrays_and_a_manifest(built, ont):
    vec_path, lab_path, man_path = dense_terms.paths(built, "go")
    m = json.loads(man_path.read_text())
    assert m["terms"] == 9 and m["ids"][0] == "GO:0008150" and "GO:0000001" not in m["ids"]   # live terms only
    # names, synonyms other than the name (case aside), definitions; scopes kept
    assert m["counts"] == {"name": 9, "synonym": 5, "definition": 9} and m["vectors"] == 23
    assert m["dim"] == 384 and m["store"] == "float16" and m["backend"] in ("onnx-int8", "torch")
    assert m["version"] == dense_terms.labels_digest(ont)
    vectors = np.load(vec_path, allow_pickle=False)
    labels = np.load(lab_path, allow_pickle=False)
    assert vectors.dtype == np.float16 and vectors.shape == (23, 384)
    assert np.allclose(np.linalg.norm(vectors.astype(np.float32), axis=1), 1, atol=2e-3)
    apoptosis = m["ids"].index("GO:0006915")
    rows = labels[labels[:, 0] == apoptosis].tolist()
    assert rows == [[apoptosis, 0, 0], [apoptosis, 1, dense_terms.SCOPES.index("EXACT")],
                    [apoptosis, dense_terms.DEFINITION, dense_terms.SCOPES.index("DEFINITION")]]


@needs_dense
def test_a_paraphrase_found_only_by_the_dense_side(built):
    svc = term_service(built)
    for query, want in (("walking", "GO:0040011"), ("cardiogenesis", "GO:0007507"), ("slumber", "GO:0030431")):
        assert want not in ids(svc.search("go", query, limit=5))   # no shared word: the lexical ranking misses it
        dense = svc.search("go", query, limit=3, mode="dense")
        assert dense.mode == "dense" and ids(dense)[0] == want and 0 < dense.hits[0].score <= 1
        hybrid = svc.search("go", query, limit=3, mode="hybrid")
        assert ids(hybrid)[0] == want and hybrid.hits[0].name and hybrid.hits[0].definition


@needs_dense
def test_hybrid_keeps_the_lexical_answer_and_filters_apply_to_the_dense_side(built):
    svc = term_service(built)
    assert ids(svc.search("go", "mitochondria", limit=1, mode="hybrid")) == ["GO:0005739"]
    assert ids(svc.search("go", "GO:0005634", mode="hybrid")) == ["GO:0005634"]   # an id stays a lookup
    hidden = svc.search("go", "walking", limit=5, mode="dense", hidden="GO:0040011")
    assert "GO:0040011" not in ids(hidden) and hidden.hidden == 1
    aspect = svc.search("go", "walking", limit=5, mode="hybrid", aspect="C")
    assert aspect.hits and all(h.aspect == "C" for h in aspect.hits)


@needs_dense
def test_query_length_is_bounded(built):
    svc = term_service(built)
    assert svc.search("go", "walk " * 200, limit=2, mode="hybrid").hits   # 1,000 characters: answered
    with pytest.raises(InvalidRequest):
        svc.search("go", "walk " * 201, mode="dense")


@needs_dense
def test_a_stale_or_mismatched_index_is_ignored_with_one_log_line(built, ont, tmp_path, caplog):
    # the ontology re-indexed (a synonym added) without its dense index: another labels digest
    d = _copy(built, tmp_path / "stale")
    changed = [t.model_copy(update={"synonyms": [*t.synonyms, Synonym(text="ambulation", scope="EXACT")]})
               if t.id == "GO:0040011" else t for t in ont.terms()]
    _index(d, Ontology.from_terms("go", changed), dense=False)
    svc = term_service(d)
    with caplog.at_level(logging.WARNING, logger="search.ontology.dense_terms"):
        for _ in range(3):
            with pytest.raises(DenseUnavailable, match="another version of the ontology"):
                svc.search("go", "walking", mode="hybrid")
    assert len([r for r in caplog.records if "ignored" in r.getMessage()]) == 1   # once, not per request
    assert ids(svc.search("go", "locomotion", limit=1)) == ["GO:0040011"]        # bm25 is unaffected

    # another model named in the manifest
    d = _copy(built, tmp_path / "model")
    _, _, man_path = dense_terms.paths(d, "go")
    m = json.loads(man_path.read_text())
    man_path.write_text(json.dumps(m | {"model": "/elsewhere/another-model"}))
    with pytest.raises(DenseUnavailable, match="another-model"):
        term_service(d).search("go", "walking", mode="dense")


@needs_dense
@pytest.mark.parametrize("damage", ["truncated vectors", "wrong dim", "label out of range", "pickle", "manifest"])
def test_damaged_files_are_refused_never_loaded(built, tmp_path, damage):
    d = _copy(built, tmp_path / "d")
    vec_path, lab_path, man_path = dense_terms.paths(d, "go")
    if damage == "truncated vectors":
        vec_path.write_bytes(vec_path.read_bytes()[:500])
    elif damage == "wrong dim":
        np.save(vec_path, np.zeros((23, 16), np.float16))
    elif damage == "label out of range":
        labels = np.load(lab_path)
        labels[0, 0] = 10_000
        np.save(lab_path, labels)
    elif damage == "pickle":
        np.save(vec_path, np.array([{"x": 1}] * 23, dtype=object), allow_pickle=True)
    else:
        man_path.write_text('{"format": 1, "ids": "not a list"}')
    with pytest.raises(DenseUnavailable) as e:
        term_service(d).search("go", "walking", mode="hybrid")
    assert e.value.status == 409 and len(e.value.message) < 600


@needs_dense
def test_cli_index_ontology_dense_switch(built, tmp_path, monkeypatch):
    from search.cli.main import main

    monkeypatch.setenv("FLYSIFT_ONTOLOGY_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "d"
    shutil.copytree(built / "dense-models", d / "dense-models")   # the ONNX export, reused (it takes seconds)
    r = CliRunner().invoke(main, ["index", "ontology", str(FIX / "dense_terms.obo"), "--name", "go", "--no-dense",
                                  "--json", "--data-dir", str(d)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["dense"] is None and not dense_terms.paths(d, "go")[2].exists()
    r = CliRunner().invoke(main, ["index", "ontology", str(FIX / "dense_terms.obo"), "--name", "go",
                                  "--data-dir", str(d)])   # the default: not built, even with the extra installed
    assert r.exit_code == 0, r.output
    assert "dense term index" not in r.stderr and not dense_terms.paths(d, "go")[2].exists()
    r = CliRunner().invoke(main, ["index", "ontology", str(FIX / "dense_terms.obo"), "--name", "go", "--dense",
                                  "--data-dir", str(d)])
    assert r.exit_code == 0, r.output
    assert "dense term index: 23 vectors" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = CliRunner().invoke(main, ["terms", "walking", "--mode", "hybrid", "--json", "--data-dir", str(d)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["hits"][0]["id"] == "GO:0040011"
