"""The FlyAOC output validator: §3.3 errors exactly, flysift's warnings beside them."""

from __future__ import annotations

import copy

import pytest

from search.core.models import Term
from search.flyaoc.validation import lookup_in, validate_output


def _valid() -> dict:
    return {
        "gene_id": "FBgn0000014", "gene_symbol": "abd-A",
        "task1_function": [
            {"go_id": "GO:0005634", "qualifier": "located_in", "aspect": "C", "is_negated": False,
             "evidence": {"pmcid": "PMC2345678", "text": "abd-A localized to nuclei"}},
            {"description": "compound eye morphogenesis", "qualifier": "involved_in", "aspect": "P"},
        ],
        "task2_expression": [
            {"expression_type": "polypeptide", "anatomy_id": "FBbt:00000146", "stage_id": "FBdv:00005327"},
            {"expression_type": "transcript", "anatomy_id": None, "stage_id": None},
        ],
        "task3_synonyms": {"fullname_synonyms": ["Abdominal A"], "symbol_synonyms": ["Abd-A", "iab-2"]},
    }


TERMS = {
    "GO:0005634": Term(id="GO:0005634", ontology="go", name="nucleus", aspect="C", alt_ids=["GO:0005635"]),
    "GO:0000001": Term(id="GO:0000001", ontology="go", name="old thing", obsolete=True, replaced_by=["GO:0005634"]),
    "GO:0000002": Term(id="GO:0000002", ontology="go", name="vague", obsolete=True, consider=["GO:0008150"]),
    "GO:0008150": Term(id="GO:0008150", ontology="go", name="biological_process", aspect="P"),
    "FBbt:00000146": Term(id="FBbt:00000146", ontology="fbbt", name="parasegment 8"),
    "FBdv:00005327": Term(id="FBdv:00005327", ontology="fbdv", name="embryonic stage 12"),
}


def lookup(term_id: str) -> Term | None:
    if term_id == "GO:0005635":  # an alternative id
        return TERMS["GO:0005634"]
    return TERMS.get(term_id)


def test_valid_object_and_counts():
    rep = validate_output(_valid())
    assert rep.valid and rep.errors == [] and rep.warnings == []
    assert rep.annotation_count.model_dump() == {"task1_go_terms": 2, "task2_expression": 2, "task3_synonyms": 3}


@pytest.mark.parametrize("mutate, error", [
    (lambda o: o.pop("gene_id"), "gene_id: Required field missing"),
    (lambda o: o.update(gene_id="FBgn123"), "gene_id: Invalid format: 'FBgn123'"),
    (lambda o: o.update(gene_id="FBgn0000014\n"), "gene_id: Invalid format: 'FBgn0000014\\n'"),
    (lambda o: o.update(gene_symbol=7), "gene_symbol: Expected a string, got number"),
    (lambda o: o.update(task1_function={}), "task1_function: Expected an array, got object"),
    (lambda o: o["task1_function"].append("GO:0005634"), "task1_function[2]: Expected an object, got string"),
    (lambda o: o["task1_function"][0].update(go_id="GO:123"), "task1_function[0].go_id: Invalid format: 'GO:123'"),
    (lambda o: o["task1_function"][1].update(go_id=None),
     "task1_function[1]: Give exactly one of go_id or description, not both"),
    (lambda o: o["task1_function"][0].pop("go_id"), "task1_function[0]: Give exactly one of go_id or description"),
    (lambda o: o["task1_function"][1].update(description="x" * 101),
     "task1_function[1].description: Too long: 101 characters (at most 100)"),
    (lambda o: o["task1_function"][0].pop("qualifier"), "task1_function[0].qualifier: Required field missing"),
    (lambda o: o["task1_function"][0].update(qualifier="regulates"),
     "task1_function[0].qualifier: Invalid value 'regulates': expected one of located_in, part_of, "
     "is_active_in, colocalizes_with, enables, contributes_to, involved_in, acts_upstream_of, "
     "acts_upstream_of_positive_effect, acts_upstream_of_negative_effect, acts_upstream_of_or_within, "
     "acts_upstream_of_or_within_positive_effect, acts_upstream_of_or_within_negative_effect"),
    (lambda o: o["task1_function"][0].update(aspect="X"),
     "task1_function[0].aspect: Invalid value 'X': expected one of P, F, C"),
    (lambda o: o["task1_function"][0].update(is_negated=0),
     "task1_function[0].is_negated: Expected a boolean, got number"),
    (lambda o: o["task1_function"][0].update(evidence="PMC1"),
     "task1_function[0].evidence: Expected an object, got string"),
    (lambda o: o["task1_function"][0]["evidence"].update(pmcid="12345"),
     "task1_function[0].evidence.pmcid: Invalid format: '12345'"),
    (lambda o: o["task1_function"][0]["evidence"].update(text="y" * 501),
     "task1_function[0].evidence.text: Too long: 501 characters (at most 500)"),
    (lambda o: o["task2_expression"][0].pop("expression_type"),
     "task2_expression[0].expression_type: Required field missing"),
    (lambda o: o["task2_expression"][0].update(expression_type="RNA"),
     "task2_expression[0].expression_type: Invalid value 'RNA': expected one of polypeptide, transcript"),
    (lambda o: o["task2_expression"][0].update(anatomy_id="FBbt:0000146"),
     "task2_expression[0].anatomy_id: Invalid format: 'FBbt:0000146'"),
    (lambda o: o["task2_expression"][0].update(stage_id="FBbt:00005327"),
     "task2_expression[0].stage_id: Invalid format: 'FBbt:00005327'"),
    (lambda o: o.update(task3_synonyms=[]), "task3_synonyms: Expected an object, got array"),
    (lambda o: o["task3_synonyms"].pop("symbol_synonyms"), "task3_synonyms.symbol_synonyms: Required field missing"),
    (lambda o: o["task3_synonyms"]["fullname_synonyms"].append(None),
     "task3_synonyms.fullname_synonyms[1]: Expected a string, got null"),
])
def test_format_errors(mutate, error):
    obj = _valid()
    mutate(obj)
    rep = validate_output(obj)
    assert not rep.valid
    assert rep.errors == [error]


def test_not_an_object():
    rep = validate_output(["x"])
    assert rep.errors == ["(root): Expected an object, got array"]
    assert rep.annotation_count.task1_go_terms == 0


def test_extra_keys_and_empty_lists_are_accepted():
    obj = _valid()
    obj["notes"] = "anything"
    obj["task1_function"][0]["confidence"] = 0.9
    assert validate_output(obj).valid
    empty = {"gene_id": "FBgn0000014", "gene_symbol": "abd-A", "task1_function": [], "task2_expression": [],
             "task3_synonyms": {"fullname_synonyms": [], "symbol_synonyms": []}}
    assert validate_output(empty).valid


def test_term_warnings_with_lookup():
    obj = _valid()
    obj["task1_function"] += [
        {"go_id": "GO:0000001", "qualifier": "located_in", "aspect": "C"},
        {"go_id": "GO:0000002", "qualifier": "involved_in", "aspect": "P"},
        {"go_id": "GO:9999999", "qualifier": "enables", "aspect": "F"},
        {"go_id": "GO:0005635", "qualifier": "located_in", "aspect": "C"},
        {"go_id": "GO:0008150", "qualifier": "enables", "aspect": "C"},
    ]
    obj["task2_expression"].append({"expression_type": "transcript", "anatomy_id": "FBbt:99999999"})
    rep = validate_output(obj, lookup=lookup, gene_id="FBgn0000015")
    assert rep.valid, rep.errors
    assert [i.suggestions for i in rep.issues if i.code == "obsolete_term"] == [["GO:0005634"], ["GO:0008150"]]
    assert "task1_function[2].go_id: GO:0000001 (old thing) is obsolete and scores nothing; replaced by GO:0005634" \
        in rep.warnings
    assert "task1_function[3].go_id: GO:0000002 (vague) is obsolete and scores nothing; consider GO:0008150" \
        in rep.warnings
    assert "task1_function[4].go_id: GO:9999999 is not a known GO term; it can only match exactly" in rep.warnings
    assert "task1_function[5].go_id: GO:0005635 is an alternative id of GO:0005634 (nucleus)" in rep.warnings
    assert "task1_function[6].go_id: GO:0008150 (biological_process) has aspect P, not C" in rep.warnings
    assert "task1_function[6].qualifier: enables is a qualifier for aspect F, not C" in rep.warnings
    assert "task2_expression[2].anatomy_id: FBbt:99999999 is not a known FBbt term; it can only match exactly" \
        in rep.warnings
    assert "gene_id: FBgn0000014 is not this session's gene FBgn0000015" in rep.warnings


def test_lookup_in_resolves_alternative_ids(tmp_path):
    from search.ontology.model import Ontology

    ont = Ontology.from_terms("go", list(TERMS.values())[:4])
    find = lookup_in([ont])
    assert find("GO:0005635").id == "GO:0005634"
    assert find("GO:0000001").obsolete
    assert find("GO:7777777") is None


def test_hidden_ids_are_refused_with_advice():
    obj = _valid()
    obj["task1_function"].append({"go_id": "GO:0005635", "qualifier": "located_in", "aspect": "C"})
    rep = validate_output(obj, hidden={"GO:0005634"}, lookup=lookup)
    assert not rep.valid
    assert len(rep.errors) == 2  # the id itself and its alternative id
    assert rep.errors[0].startswith("task1_function[0].go_id: GO:0005634 is hidden in this session: describe the "
                                    "concept in 'description'")
    assert all(i.code == "hidden_term" for i in rep.issues if i.severity == "error")
    # without a lookup only the literal id can be recognised
    assert validate_output(_valid(), hidden={"GO:0005634"}).errors[0].startswith("task1_function[0].go_id: GO:0005634")


def test_evidence_not_read_in_session():
    obj = _valid()
    obj["task2_expression"][0]["evidence"] = {"pmcid": "PMC1", "text": "seen"}
    rep = validate_output(obj, read_pmcids={"PMC1"})
    assert rep.valid
    assert rep.warnings == ["task1_function[0].evidence.pmcid: PMC2345678 was not read in this session"]
    assert validate_output(obj).warnings == []  # no reading record: nothing to compare


def test_scored_rank_cut_offs_and_duplicates():
    obj = _valid()
    obj["task1_function"] = [{"go_id": f"GO:{i:07d}", "qualifier": "involved_in", "aspect": "P"} for i in range(31)]
    obj["task1_function"].insert(1, copy.deepcopy(obj["task1_function"][0]))
    obj["task2_expression"] = [{"expression_type": "polypeptide", "anatomy_id": f"FBbt:{i // 2:08d}"}
                               for i in range(24)]
    obj["task3_synonyms"] = {"fullname_synonyms": [f"name {i}" for i in range(5)],
                             "symbol_synonyms": ["Name 0 ", " NAME 1"] + [f"s{i}" for i in range(16)]}
    rep = validate_output(obj)
    assert rep.valid
    assert rep.annotation_count.task1_go_terms == 32
    assert rep.warnings == [
        "task1_function[31]: items from here on are beyond rank 30 and are not scored (GO@30); "
        "put the most confident first",
        "task1_function: 1 item(s) repeat earlier ones and score nothing: [1]",
        "task2_expression[20]: items from here on are beyond rank 10 and are not scored (anatomy@10); "
        "put the most confident first",
        "task3_synonyms.symbol_synonyms[17]: items from here on are beyond rank 20 and are not scored "
        "(synonyms@20); put the most confident first",
        "task3_synonyms: 2 item(s) repeat earlier ones (ignoring case and outer spaces) and score nothing: "
        "symbol_synonyms[0], symbol_synonyms[1]",
    ]


def test_memorization_evidence_without_a_paper_is_valid():
    """FlyAOC's memorization harness writes ``{"pmcid": null, "text": "Based on prior knowledge: …"}``; its validator
    accepts it and so must ours (a read-paper check has nothing to check)."""
    obj = _valid()
    obj["task1_function"][0]["evidence"] = {"pmcid": None, "text": "Based on prior knowledge: nuclear protein"}
    rep = validate_output(obj, read_pmcids=set())
    assert rep.valid and rep.errors == [] and rep.warnings == []
    obj["task1_function"][0]["evidence"]["pmcid"] = 7
    assert validate_output(obj).errors == ["task1_function[0].evidence.pmcid: Expected a string, got number"]
