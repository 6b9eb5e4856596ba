"""The term recogniser in process (``search.ontology.recognise``), on hand-made terms: longest match, abbreviations,
names before synonyms, word forms, one-word synonyms, ontology acronyms, per-task resolution of same-named terms,
hidden terms, sentence boundaries and the molecular-function activity rule."""

from __future__ import annotations

from search.core.models import Synonym, Term
from search.ontology.recognise import TermRecogniser, sentences, states_activity, tokens


def _terms(*rows: tuple, ontology: str = "go") -> list[Term]:
    """Hand-made terms: (id, name, aspect, synonyms[, depth])."""
    return [Term(id=r[0], ontology=ontology, name=r[1], aspect=r[2],
                 synonyms=[Synonym(text=s, scope="RELATED") for s in r[3]],
                 depth=r[4] if len(r) > 4 else 3) for r in rows]


def _rec(*rows: tuple) -> TermRecogniser:
    return TermRecogniser.build(_terms(*rows))


def test_tokens_fold_plurals():
    assert [t for t, _, _ in tokens("Nuclei, cells and bodies of mitochondria-like glass")] == \
        ["nucleus", "cell", "and", "body", "of", "mitochondria", "like", "glass"]


def test_abbreviation_defined_in_the_document():
    r = TermRecogniser.build([Term(id="GO:0005783", ontology="go", name="endoplasmic reticulum", aspect="C",
                                   synonyms=[Synonym(text="reticulum of the cell", scope="RELATED")])])
    text = "It sits in the endoplasmic reticulum (EnR). The EnR swells."
    abbrevs = r.abbreviations(text)
    assert abbrevs == {"EnR": "GO:0005783"}
    assert [(m.text, m.via) for m in r.find(text, abbrevs)] == [("endoplasmic reticulum", "name"),
                                                                ("EnR", "abbreviation"), ("EnR", "abbreviation")]
    # a later paragraph of the same document uses it too
    assert [(m.text, m.via) for m in r.recognise([text, "The EnR is large."])[1]] == [("EnR", "abbreviation")]


def test_a_name_comes_before_another_terms_synonym():
    r = _rec(("GO:0000747", "conjugation with cellular fusion", "P", ["mating"]), ("GO:0007618", "mating", "P", []))
    assert [(m.term.id, m.via) for m in r.find("after mating")] == [("GO:0007618", "name")]


def test_inflected_and_derived_words_match_their_label_words():
    r = _rec(("GO:0006412", "translation", "P", []), ("GO:0005634", "nucleus", "C", []),
             ("GO:0005737", "cytoplasm", "C", []), ("GO:0023052", "signaling", "P", []),
             ("GO:0031965", "nuclear membrane", "C", []))
    found = [(m.text, m.term.id, m.inflected) for m in r.find("It is translated in nuclear and cytoplasmic pools.")]
    assert found == [("translated", "GO:0006412", True), ("nuclear", "GO:0005634", True),
                     ("cytoplasmic", "GO:0005737", True)]
    assert [m.term.id for m in r.find("the nuclear membrane")] == ["GO:0031965"]
    assert r.find("a strong signal") == [] and [m.term.id for m in r.find("it signaled")] == ["GO:0023052"]


def test_one_word_synonyms_count_only_as_rewordings_of_the_name():
    r = _rec(("GO:0019013", "viral nucleocapsid", "C", ["core", "nucleocapsid core"]),
             ("GO:0006915", "apoptotic process", "P", ["apoptosis"]))
    assert r.find("the core of the argument") == []
    assert [m.term.id for m in r.find("apoptosis in the nucleocapsid core")] == ["GO:0006915", "GO:0019013"]


def test_an_ontology_acronym_counts_only_where_the_document_names_its_term():
    r = _rec(("GO:0031469", "bacterial microcompartment", "C", ["BMC"]))
    assert [m.text for m in r.find("a BMC clone")] == ["BMC"]           # the raw matcher finds it
    assert r.recognise(["We sequenced a BMC clone."]) == [[]]            # a document that never names the term
    named = r.recognise(["Bacterial microcompartments enclose enzymes.", "The BMC shell is thin."])
    assert [[(m.text, m.term.id) for m in ms] for ms in named] == [
        [("Bacterial microcompartments", "GO:0031469")], [("BMC", "GO:0031469")]]


def test_same_named_terms_resolve_per_task():
    """GO's "dendrite" and FBbt's "dendrite": whichever ontology was added first used to win everywhere; now the
    GO task gets the GO term, expression the FBbt term, and the order of the ontologies asked for decides."""
    r = TermRecogniser.build([*_terms(("FBbt:00047680", "dendrite", None, []), ontology="fbbt"),
                              *_terms(("GO:0030425", "dendrite", "C", []), ("GO:0007430", "terminal branching",
                                                                              "P", []))])
    text = ["Ey localises to the dendrite."]
    assert [m.term.id for m in r.recognise(text, ["go"])[0]] == ["GO:0030425"]
    assert [m.term.id for m in r.recognise(text, ["fbbt", "fbdv"])[0]] == ["FBbt:00047680"]
    assert [m.term.id for m in r.recognise(text, ["go", "fbbt"])[0]] == ["GO:0030425"]
    assert [m.term.id for m in r.recognise(text, ["fbbt", "go"])[0]] == ["FBbt:00047680"]
    assert r.recognise(text, ["fbdv"]) == [[]]


def test_hidden_terms_are_never_reported():
    r = _rec(("GO:0016330", "second mitotic wave", "P", []), ("GO:0000278", "mitotic wave", "P", []))
    assert [m.term.id for m in r.recognise(["the second mitotic wave"])[0]] == ["GO:0016330"]
    assert [m.term.id for m in r.recognise(["the second mitotic wave"], hidden={"GO:0016330"})[0]] == ["GO:0000278"]


def test_a_label_never_spans_two_sentences():
    r = _rec(("GO:0008219", "cell death", "P", []), ("GO:0005623", "cell", "C", []))
    ms = r.recognise(["Ey is found in every cell. Death of the eye follows."])[0]
    assert [(m.text, m.sentence_start, m.sentence_end) for m in ms] == [("cell", 0, 26)]
    assert list(sentences("A b. C d! (E) f")) == [(0, 4), (5, 9), (10, 15)]


def test_molecular_functions_only_where_an_activity_is_stated():
    r = _rec(("GO:0003677", "DNA binding", "F", []), ("GO:0004672", "protein kinase activity", "F", ["protein kinase"]),
             ("GO:0003823", "antigen binding", "F", ["antibody"]), ("GO:0005488", "binding", "F", []),
             ("GO:0046875", "ephrin receptor binding", "F", ["ephrin"]))
    def ids(text: str, rule: bool = True) -> list[str]:
        return [m.term.id for m in r.recognise([text], activity_rule=rule)[0]]

    assert ids("We stained with an antibody against Ey.") == []            # a reagent, no activity
    assert ids("We stained with an antibody against Ey.", rule=False) == ["GO:0003823"]
    assert ids("Ey binds to the ephrin ligand.") == ["GO:0046875"]          # the verb states it
    assert ids("Ephrin signalling was normal.") == []
    assert ids("Ey shows DNA binding in vitro.") == ["GO:0003677"]          # a named binding
    assert ids("Ey binds DNA.") == []                                        # bare "binds" is the verb, not a term
    assert ids("The protein kinase activity of Ey is high.") == ["GO:0004672"]
    assert ids("Ey acts as a protein kinase.") == ["GO:0004672"]
    assert ids("A protein kinase, unlike Ey, was used.") == []
    assert states_activity("Ey has kinase activity", 7, 13)
    # nouns, participles, names and far-away verbs state nothing about what follows them
    assert ids("It has been observed in ephrin mutant mice.") == []
    assert ids("We measured its phosphorylation with an antibody.") == []
    assert ids("Ey encodes a protein found in the nucleus and required for ephrin sorting.") == []


def test_in_process_over_many_texts_keeps_offsets():
    r = _rec(("GO:0005634", "nucleus", "C", []))
    texts = ["First para. The nucleus.", "", "Nuclei everywhere."]
    out = r.recognise(texts)
    assert [[(t[m.start:m.end], m.sentence_start) for m in ms] for t, ms in zip(texts, out, strict=True)] == [
        [("nucleus", 12)], [], [("Nuclei", 0)]]
