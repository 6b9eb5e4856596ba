"""Issue #15 (speed): a term search asks the engine once for ids and scores and builds hits only for what it returns,
from the re-ranker's saved columns, without the ontology or its OBO file; the answers are those of the full path."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from search.engines.embedded.engine import EmbeddedEngine
from search.engines.embedded.terms import IDS_FILE, TermIndex
from search.ontology import model as ontology_model
from search.ontology import rerank
from search.ontology.model import Ontology
from search.ontology.rerank_model import RerankModel
from search.ontology.rerank_model import frame as frame_of
from search.ontology.rewrites import stems, words

from helpers import term_service

FIX = Path(__file__).parents[1] / "fixtures"
QUERIES = ["nucleus", "cell nucleus", "transcription", "compound eye morphogenesis", "regulation of gene expression",
           "signaling", "nuclei", "ommatidial array morphogenesis", "CNS", "ventral nerve cord", "-- ;", "GO:0042051"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("data")
    obo = tmp_path_factory.mktemp("obo")
    svc = term_service(d)
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


def test_obsolete_terms_are_left_out_of_candidates_as_the_query_filter_would(data_dir):
    """Candidates drop obsolete terms by row after the search (cheaper than a MustNot clause), asking for more hits
    when too many were obsolete: the answers are the filtered search's at every depth."""
    engine = EmbeddedEngine(data_dir)
    qs = ["ribosomal chaperone", "obsolete ribosomal chaperone activity", "chaperone", "activity", "ribosome"]
    for limit in (1, 2, 5, 50):
        got = engine.term_candidates("go", [(q, limit) for q in qs])
        assert got == [[(h.id, h.score) for h in engine.search_terms("go", q, limit=limit)] for q in qs]
        assert all(i != "GO:0000005" for found in got for i, _ in found)
    assert engine.term_candidates("go", [("ribosomal chaperone", 1)], include_obsolete=True)[0][0][0] == "GO:0000005"


def test_an_index_written_before_rows_answers_alike(data_dir, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(data_dir, d, symlinks=True)
    before = EmbeddedEngine(d).term_candidates("go", [(q, 10) for q in QUERIES])
    (d / "terms" / "go").resolve().joinpath(IDS_FILE).write_text('["planted"]')   # read stored ids instead
    assert EmbeddedEngine(d).term_candidates("go", [(q, 10) for q in QUERIES]) == before


def test_search_reads_no_ontology(data_dir, monkeypatch):
    """The service answers from the saved model and the term index; hidden terms still need the ontology."""
    full = {q: term_service(data_dir).search("go", q, limit=10) for q in QUERIES}

    def refuse(*_a, **_k):
        raise AssertionError("a search read the ontology")
    monkeypatch.setattr(Ontology, "read", refuse)
    monkeypatch.setattr(ontology_model, "parse", refuse)
    svc = term_service(data_dir)
    for q in QUERIES:
        assert svc.search("go", q, limit=10) == full[q], q
    assert svc.search("fbbt", "CNS").hits[0].id == "FBbt:00005095"
    with pytest.raises(AssertionError, match="read the ontology"):
        svc.search("go", "nucleus", hidden="GO:0005634")


def test_a_learned_model_ranks_as_the_saved_one(data_dir, tmp_path):
    """The saved columns read back into the model that was learned: the same answers, score for score."""
    saved = term_service(data_dir)
    d = tmp_path / "data"
    shutil.copytree(data_dir, d, symlinks=True)
    learned = term_service(d)   # no model file: learned from the ontology on the first search
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
    svc = term_service(d)
    svc.model_path("go").write_bytes(planted)
    assert svc._load_model("go") is None
    assert svc.search("go", "cell nucleus").hits[0].id == "GO:0005634"


def test_a_model_learned_at_search_time_is_saved_for_the_next_process(data_dir, tmp_path, monkeypatch):
    """A data dir indexed before the .npz model (or one whose model file broke) learns the model once: the next
    service — the next `flysift terms` call — loads it instead of learning it again on every call."""
    d = tmp_path / "data"
    shutil.copytree(data_dir, d, symlinks=True)
    first = term_service(d)
    first.model_path("go").unlink()
    want = first.search("go", "cell nucleus", limit=5)
    assert first.model_path("go").exists() and first._load_model("go") is not None

    def refuse(*_a, **_k):
        raise AssertionError("the model was learned again")

    monkeypatch.setattr(RerankModel, "learn", refuse)
    assert term_service(d).search("go", "cell nucleus", limit=5) == want


def test_a_data_dir_that_cannot_be_written_still_answers_with_a_learned_model(data_dir, tmp_path, monkeypatch):
    d = tmp_path / "data"
    shutil.copytree(data_dir, d, symlinks=True)
    svc = term_service(d)
    svc.model_path("go").unlink()

    def read_only(*_a, **_k):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(RerankModel, "save", read_only)
    assert svc.search("go", "cell nucleus").hits[0].id == "GO:0005634"
    assert not svc.model_path("go").exists()


def _reference_rerank(lex: RerankModel, variants: list[tuple[str, float]], candidates: list[str],
                      engine: dict[str, float]) -> list[tuple[str, float, int | None]]:
    """The re-ranker's definition written label by label (what ``rerank`` computes over arrays): best discounted
    IDF-weighted Dice of a label against a form, the exact-label bonus, definition coverage, engine score and, for
    one-word queries, generality."""
    forms = []
    for text, discount in variants:
        toks = stems(words(text))
        if toks:
            idf = {t: lex.idf.get(t, lex.unknown_idf) for t in toks}
            forms.append((toks, idf, sum(idf.values()), frame_of(toks), discount))
    out = []
    for order, cid in enumerate(candidates):
        i = lex.index.get(cid)
        if i is None:
            out.append((-rerank.W_ENGINE * engine.get(cid, 0.0), order, cid, None))
            continue
        best = direct = exact = 0.0
        best_k = 0
        for k, (lab, weight, scope, frame) in enumerate(lex.term(i)):
            for toks, idf, w, fr, discount in forms:
                s = 2 * sum(idf[t] for t in toks & lab) / (w + weight)
                if discount == 1.0 and s > direct:
                    direct, best_k = s, k
                if toks == lab and discount >= rerank.MENTION_DISCOUNT:
                    exact = max(exact, discount * rerank.EXACT_BONUS[scope])
                label_discount = rerank.SYNONYM_DISCOUNT[scope] if k else 1.0
                best = max(best, s * discount * (rerank.FRAME_PENALTY if fr != frame else 1.0) * label_discount)
        cover = max(sum(idf[t] for t in toks & lex.definition(i)) / w for toks, idf, w, *_ in forms)
        score = best + exact + rerank.W_DEF * cover + rerank.W_ENGINE * engine.get(cid, 0.0)
        if len(forms[0][0]) == 1 and best > 0:
            score += rerank.W_GENERAL * lex.generality(i)
        out.append((-score, order, cid, best_k))
    return [(cid, -neg, k) for neg, _, cid, k in sorted(out)]


@pytest.mark.parametrize("ontology", ["go", "fbbt", "mentions"])
def test_the_vectorised_rerank_computes_the_label_by_label_definition(data_dir, ontology):
    """Every candidate of every test query, plus an id the model does not know, scored both ways: same order, same
    scores, same best label."""
    svc = term_service(data_dir)
    lex = svc.rerank_model(ontology)
    queries = [*QUERIES[:-2], "regulation of nucleus", "positive regulation of transcription", "nucleus nuclei",
               "eye", "mitotic", "wing disc"]
    for q in queries:
        variants = [(q, 1.0), (q + " nucleus", rerank.MENTION_DISCOUNT), ("nuclear " + q, rerank.RAW_DISCOUNT)]
        candidates = [*lex.ids[::-1], "GO:9999999"]
        engine = {c: (n % 7) / 7 for n, c in enumerate(candidates)}
        got = rerank.rerank(lex, variants, candidates, engine)
        want = _reference_rerank(lex, variants, candidates, engine)
        assert got is not None and [r.id for r in got] == [w[0] for w in want], q
        assert [r.score for r in got] == pytest.approx([w[1] for w in want], abs=1e-12), q
        assert [r.label for r in got] == [w[2] for w in want], q
    assert rerank.rerank(lex, [("-- ;", 1.0)], list(lex.ids), {}) is None


def test_a_settled_listing_is_reused_until_an_ontology_is_added(data_dir, tmp_path):
    """The service and the term index keep their directory listings between searches, and see a new ontology."""
    d = tmp_path / "data"
    shutil.copytree(data_dir, d, symlinks=True)
    old = time.time() - 60
    for sub in ("ontologies", "terms"):
        os.utime(d / sub, (old, old))
    svc, index = term_service(d), TermIndex(d)
    assert svc.names() == index.names() == ["fbbt", "go", "mentions"]
    assert svc._listed is not None and index._names is not None   # settled: kept
    assert svc.search("go", "cell nucleus").hits[0].id == "GO:0005634"
    svc.index_ontology(Ontology.from_terms("extra", svc.ontology("go").terms()), index.write)
    assert index.names() == ["extra", "fbbt", "go", "mentions"]
    assert "extra" in svc.names()
    assert svc.search("extra", "cell nucleus").hits[0].id == "GO:0005634"


def test_the_best_rewrites_are_one_engine_search(data_dir, monkeypatch):
    """A query with several mention forms costs two engine searches, the query and its best rewrites' words
    together (with room for each rewrite's candidates), in one engine call."""
    svc = term_service(data_dir)
    calls: list[list[tuple[str, int]]] = []
    real = svc.engine.term_candidates

    def spy(ontology, searches, **kw):
        calls.append(list(searches))
        return real(ontology, searches, **kw)

    monkeypatch.setattr(svc.engine, "term_candidates", spy)
    hits = svc.search("mentions", "hematopoietic nuclei", limit=5).hits
    assert len(calls) == 1 and len(calls[0]) == 2
    (query, pool), (rewrites, rewrite_pool) = calls[0]
    assert (query, pool) == ("hematopoietic nuclei", rerank.RERANK_POOL)
    assert {"hematopoiesis", "nucleus"} <= set(rewrites.split()) and rewrite_pool == 2 * rerank.REWRITE_POOL
    assert hits
