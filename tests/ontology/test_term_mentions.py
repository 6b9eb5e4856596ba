"""Mentions as curators meet them in papers resolve to their term (issue #15): one real example per class of miss,
on small fixtures copied from GO 2022-07-01 and FBbt 2013 (tests/fixtures/mentions_*.obo) holding each mention's
term and the terms that outranked it before."""

from __future__ import annotations

from pathlib import Path

import pytest

from search.engines.embedded.terms import TermIndex
from search.ontology import rewrites
from search.ontology.model import Ontology
from search.ontology.rerank_model import RerankModel
from search.ontology.rewrites import expansions, initial_rows, spell_greek
from search.ontology.service import TermService
from search.text.morphology import Morphology
from search.text.spelling import Speller

from helpers import term_service

FIX = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def svc(tmp_path_factory) -> TermService:
    d = tmp_path_factory.mktemp("mentions")
    cache = tmp_path_factory.mktemp("cache")
    service = term_service(d)
    for file, name in (("mentions_go.obo", "go"), ("mentions_fbbt.obo", "fbbt")):
        service.index_ontology(Ontology.load(FIX / file, name, cache_dir=cache), TermIndex(d).write)
    return term_service(d)   # a fresh service: reads the saved re-ranker model, morphology included


def top(svc: TermService, ontology: str, query: str) -> str:
    return svc.search(ontology, query, limit=5).hits[0].id


@pytest.mark.parametrize("mention, ontology, want", [
    # derived adjectives: the process noun is the term
    ("secretory", "go", "GO:0046903"),            # secretion, not secretory granule
    ("hematopoietic", "go", "GO:0030097"),        # hemopoiesis (synonym hematopoiesis)
    # irregular and Latin/Greek plurals
    ("nuclei", "go", "GO:0005634"),               # nucleus, not nuclear division
    ("cilia", "go", "GO:0005929"),                # cilium, not motile cilium
    ("testes", "fbbt", "FBbt:00004928"),          # testis (nothing was found before)
    # an exact synonym ranked below a longer term that contains it
    ("intracellular", "go", "GO:0005622"),        # not intracellular transport or cellularization
    # abbreviations and Greek letters
    ("TGFβ signaling", "go", "GO:0007179"),       # not signaling
    ("IκB kinase complex", "go", "GO:0008385"),   # IkappaB kinase complex, not protein kinase complex
    # an abbreviation the labels also use as a word ("PNS glial cell") still stands for the phrase the names use
    # more often; its letters may skip function words ("and")
    ("adult PNS", "fbbt", "FBbt:00005892"),       # adult peripheral nervous system, not PNS glial cell
    ("AMMC", "fbbt", "FBbt:00003982"),            # antennal mechanosensory and motor center, not AMMC commissures
    # a bare modifier stands for its process
    ("mitotic", "go", "GO:0000278"),              # mitotic cell cycle, not mitotic spindle
    # split words
    ("hind gut", "fbbt", "FBbt:00005384"),        # hindgut, not adult hindgut or gut
    # a bare word for the process that holds it
    ("proliferation", "go", "GO:0008283"),        # cell population proliferation, not membrane fission
    # typos: the nearest word of the terms' names (nothing was found before)
    ("poliferation", "go", "GO:0008283"),         # proliferation: one letter left out
    ("cell poliferation", "go", "GO:0008283"),
    ("nucleous", "go", "GO:0005634"),             # nucleus: one letter too many
])
def test_mention_resolves_to_its_term(svc, mention, ontology, want):
    assert top(svc, ontology, mention) == want


def test_exact_name_or_exact_synonym_of_a_live_term_ranks_first(svc):
    assert top(svc, "go", "cilium") == "GO:0005929"
    assert top(svc, "go", "hematopoiesis") == "GO:0030097"
    assert top(svc, "go", "mitotic spindle") == "GO:0072686"


def test_abbreviation_letters_may_skip_function_words(svc):
    model = svc.rerank_model("fbbt")
    assert expansions(model, "AMMC")[:1] == [("antennal", "mechanosensory", "and", "motor", "center")]
    assert expansions(model, "PNS")[:1] == [("peripheral", "nervous", "system")]
    assert model.label_df("PNS") == 2 and model.label_df("unheard") == 0   # PNS glial cell, PNS exit glial cell


def test_a_word_many_labels_use_is_not_expanded(svc, monkeypatch):
    """Past ``ABBREV_USED_MAX`` labels a word stands for itself ("ATP", "CoA", "II" in GO): its expansions, which
    would have to be commoner still, are not looked for (scanning them cost GO searches up to 60 ms)."""
    monkeypatch.setattr(rewrites, "ABBREV_USED_MAX", 1)   # PNS is in 2 labels of the fixture
    assert top(svc, "fbbt", "adult PNS") != "FBbt:00005892"


def test_a_query_full_of_abbreviations_scans_a_bounded_number_of_names(svc, monkeypatch):
    """Each distinct abbreviation is expanded once, and all of a query's together scan at most
    ``ABBREV_ROWS_BUDGET`` names: 160 abbreviations of GO's commonest initials cost 12 s CPU before."""
    model = svc.rerank_model("fbbt")
    scanned: list[str] = []
    real = rewrites.expansion_counts
    monkeypatch.setattr(rewrites, "expansion_counts",
                        lambda vocab, token: scanned.append(token) or real(vocab, token))
    svc.search("fbbt", "adult PNS " * 40)
    assert scanned == ["PNS"]
    scanned.clear()
    monkeypatch.setattr(rewrites, "ABBREV_ROWS_BUDGET", len(initial_rows(model, "PNS")[1]))
    svc.search("fbbt", "PNS AMMC")   # PNS's names use up the budget: AMMC stays as written
    assert scanned == ["PNS"] and len(initial_rows(model, "AMMC")[1]) > 0


def test_greek_letters_are_spelled_as_the_ontologies_write_them():
    assert spell_greek("TGFβ") == "TGF beta"
    assert spell_greek("IκB kinase") == "IkappaB kinase"
    assert spell_greek("β-catenin binding") == "beta-catenin binding"
    assert spell_greek("plain ascii") == "plain ascii"


def test_morphology_points_only_at_vocabulary_words():
    m = Morphology.learn(["nucleus", "cilium", "mitochondrion", "secretion", "apoptosis", "splicing", "hemopoiesis"])
    assert m.alternatives("nuclei") == ["nucleus"]               # lemminflect's dictionary
    assert m.alternatives("mitochondria") == ["mitochondrion"]   # the classical plural endings
    assert m.alternatives("secretory") == ["secretion"]          # derivation
    assert m.alternatives("apoptotic") == ["apoptosis"]
    assert m.alternatives("spliced") == ["splicing"]
    assert m.alternatives("unrelated") == []
    assert all(w in {"nucleus", "cilium", "mitochondrion", "secretion", "apoptosis", "splicing", "hemopoiesis"}
               for ws in m.forms.values() for w in ws)
    assert Morphology.from_state(m.state()).forms == m.forms
    with pytest.raises(ValueError):
        Morphology.from_state({"forms": ["a"], "sizes": [2], "words": ["b"]})


def test_a_loaded_morphology_looks_words_up_without_building_its_map():
    """A loaded map answers from its sorted columns by bisection (a ``flysift terms`` call looks up a few words of
    ~100,000 forms); the answers are the learned map's, and columns out of order are refused."""
    m = Morphology.learn(["nucleus", "cilium", "mitochondrion", "secretion", "apoptosis", "splicing", "hemopoiesis"])
    loaded = Morphology.from_state(m.state())
    for form in [*m.forms, "nucleus", "zzz", ""]:
        assert loaded.alternatives(form) == m.alternatives(form), form
    assert loaded.variants(["nuclei", "of", "cilia"]) == m.variants(["nuclei", "of", "cilia"])
    state = m.state()
    state["forms"] = state["forms"][::-1]
    with pytest.raises(ValueError):
        Morphology.from_state(state)


def test_saved_model_keeps_the_morphology(svc):
    ont = svc.ontology("go")
    assert svc.rerank_model(ont).morph.forms == RerankModel.learn(ont).morph.forms


def test_a_misspelt_word_is_corrected_to_the_nearest_name_word_and_only_then():
    common = {"proliferation": 3.0, "polarization": 1.0, "ration": 1.0, "ligation": 2.0, "location": 1.0}
    s = Speller(common, lambda w: common.get(w, 0.0))
    assert s.correct("poliferation") == "proliferation"     # one edit
    assert s.correct("prolfieration") == "proliferation"    # two edits from 8 letters
    assert s.correct("lication") == "ligation"              # one edit from both: the commoner word
    assert s.correct("proliferation") is None               # a name word is not a typo
    assert s.correct("potatoes") is None                    # nothing near enough
    assert s.correct("ratn") is None                        # fewer than 5 letters: never
    assert s.correct("Cdc42") is None                       # digits: a symbol, never
