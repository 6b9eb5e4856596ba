"""Issue #15 (speed): a term search asks the engine once for ids and scores and builds hits only for what it returns,
from the re-ranker's saved columns, without the ontology or its OBO file; the answers are those of the full path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from search.engines.embedded.engine import EmbeddedEngine
from search.engines.embedded.terms import IDS_FILE, TermIndex
from search.ontology import model as ontology_model
from search.ontology.model import Ontology
from search.ontology.service import RerankModel, TermService

FIX = Path(__file__).parents[1] / "fixtures"
QUERIES = ["nucleus", "cell nucleus", "transcription", "compound eye morphogenesis", "regulation of gene expression",
           "signaling", "nuclei", "ommatidial array morphogenesis", "CNS", "ventral nerve cord", "-- ;", "GO:0042051"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("data")
    obo = tmp_path_factory.mktemp("obo")
    svc = TermService(d)
    for file, name in (("mini.obo", "go"), ("mini_fbbt.obo", "fbbt"), ("mentions_go.obo", "mentions")):
        shutil.copy(FIX / file, obo / file)
        svc.index_ontology(Ontology.load(obo / file, name, cache_dir=obo / "cache"), TermIndex(d).write)
    shutil.rmtree(obo)   # the OBO files and their parse cache are gone: a search needs neither
    return d


def test_candidates_are_the_ids_and_scores_search_returns(data_dir):
    engine = EmbeddedEngine(data_dir)
    kinds = [{}, {"aspect": "P"}, {"exclude_ids": frozenset({"GO:0005634"})}, {"include_obsolete": True}]
    for kw in kinds:
        got = engine.term_candidates("go", [(q, 7) for q in QUERIES], **kw)
        want = [[(h.id, h.score) for h in engine.search_terms("go", q, limit=7, **kw)] for q in QUERIES]
        assert got == want and any(got)
    ids = ["GO:0001745", "GO:0005634", "GO:9999999", "GO:0001745"]
    hits = engine.term_hits("go", ids, {"nucleus"})
    assert [h.id for h in hits] == ["GO:0001745", "GO:0005634"] and {h.score for h in hits} == {0.0}
    assert hits[1] == engine.search_terms("go", "GO:0005634")[0].model_copy(update={"score": 0.0})


def test_an_index_written_before_rows_answers_alike(data_dir, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(data_dir, d, symlinks=True)
    before = EmbeddedEngine(d).term_candidates("go", [(q, 10) for q in QUERIES])
    (d / "terms" / "go").resolve().joinpath(IDS_FILE).write_text('["planted"]')   # read stored ids instead
    assert EmbeddedEngine(d).term_candidates("go", [(q, 10) for q in QUERIES]) == before


def test_search_reads_no_ontology(data_dir, monkeypatch):
    """The service answers from the saved model and the term index; hidden terms still need the ontology."""
    full = {q: TermService(data_dir).search("go", q, limit=10) for q in QUERIES}

    def refuse(*_a, **_k):
        raise AssertionError("a search read the ontology")
    monkeypatch.setattr(Ontology, "read", refuse)
    monkeypatch.setattr(ontology_model, "_parse_obo", refuse)
    svc = TermService(data_dir)
    for q in QUERIES:
        assert svc.search("go", q, limit=10) == full[q], q
    assert svc.search("fbbt", "CNS").hits[0].id == "FBbt:00005095"
    with pytest.raises(AssertionError, match="read the ontology"):
        svc.search("go", "nucleus", hidden="GO:0005634")


def test_a_learned_model_ranks_as_the_saved_one(data_dir, tmp_path):
    """The saved columns read back into the model that was learned: the same answers, score for score."""
    saved = TermService(data_dir)
    d = tmp_path / "data"
    shutil.copytree(data_dir, d, symlinks=True)
    learned = TermService(d)   # no model file: learned from the ontology on the first search
    learned.model_path("go").unlink()
    assert learned._load_model("go") is None
    for q in QUERIES:
        assert learned.search("go", q, limit=20) == saved.search("go", q, limit=20), q
    model = saved.rerank_model("go")
    assert model.meta == RerankModel.learn(saved.ontology("go")).meta


@pytest.mark.parametrize("planted", [b"", b"PK\x03\x04 not a zip", b"\x93NUMPY\x01\x00garbage"])
def test_a_model_file_that_does_not_load_is_learned_again(data_dir, tmp_path, planted):
    d = tmp_path / "data"
    shutil.copytree(data_dir, d, symlinks=True)
    svc = TermService(d)
    svc.model_path("go").write_bytes(planted)
    assert svc._load_model("go") is None
    assert svc.search("go", "cell nucleus").hits[0].id == "GO:0005634"


def test_a_model_learned_at_search_time_is_saved_for_the_next_process(data_dir, tmp_path, monkeypatch):
    """A data dir indexed before the .npz model (or one whose model file broke) learns the model once: the next
    service — the next `flysift terms` call — loads it instead of learning it again on every call."""
    d = tmp_path / "data"
    shutil.copytree(data_dir, d, symlinks=True)
    first = TermService(d)
    first.model_path("go").unlink()
    want = first.search("go", "cell nucleus", limit=5)
    assert first.model_path("go").exists() and first._load_model("go") is not None

    def refuse(*_a, **_k):
        raise AssertionError("the model was learned again")

    monkeypatch.setattr(RerankModel, "learn", refuse)
    assert TermService(d).search("go", "cell nucleus", limit=5) == want


def test_a_data_dir_that_cannot_be_written_still_answers_with_a_learned_model(data_dir, tmp_path, monkeypatch):
    d = tmp_path / "data"
    shutil.copytree(data_dir, d, symlinks=True)
    svc = TermService(d)
    svc.model_path("go").unlink()

    def read_only(*_a, **_k):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(RerankModel, "save", read_only)
    assert svc.search("go", "cell nucleus").hits[0].id == "GO:0005634"
    assert not svc.model_path("go").exists()
