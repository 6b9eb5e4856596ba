"""Gene lexicon: the three source formats, merging, case-sensitive lookups, ambiguity and the save/load round trip."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from search.core.errors import InputError, InvalidRequest, NotFound
from search.core.models import Gene
from search.text.lexicon import Lexicon, fullname_from_summary

FB_SYNONYM = """## FlyBase synonym table
##primary_FBid\torganism_abbreviation\tcurrent_symbol\tcurrent_fullname\tfullname_synonym(s)\tsymbol_synonym(s)
FBgn0000014\tDmel\tabd-A\tabdominal A\tAbdominal-A|infra-abdominal 4\tAbd-A|iab-4|BX-C
FBgn0000463\tDmel\tDl\tDelta\t\tDelta|Dl-1
FBgn0000499\tDmel\tdl\tdorsal\t\tDorsal|BX-C
FBgn9999999\tDsim\tDsim\\abd-A\tabdominal A\t\t
FBal0000001\tDmel\tabd-A[1]\t\t\t
"""

GENES_CSV = """FBgn_ID,Gene_Symbol,Summary
FBgn0000014,abd-A,"abdominal A (abd-A) encodes a homeobox-containing transcription factor, part of the BX-C."
FBgn0004647,N,Notch (N) encodes a transmembrane receptor.
FBgn0000001,xyz,A summary that does not start with the name.
"""


def _ground_truth(path: Path) -> Path:
    row = {"gene_id": "FBgn0000014", "gene_symbol": "abd-A", "task1_function": [], "task2_expression": [],
           "task3_synonyms": {"current_fullname": "abdominal A",
                              "fullname_synonyms": [{"synonym": "Ultraabdominal", "in_corpus": False}],
                              "symbol_synonyms": [{"synonym": "iab-2", "in_corpus": True}]}}
    path.write_text(json.dumps(row) + "\n")
    return path


@pytest.fixture
def fb(tmp_path: Path) -> Path:
    p = tmp_path / "fb_synonym_fb_2025_04.tsv.gz"
    with gzip.open(p, "wt", encoding="utf-8") as fh:
        fh.write(FB_SYNONYM)
    return p


def test_fb_synonym_keeps_dmel_genes_and_splits_synonyms(fb: Path):
    lex = Lexicon.load([fb])
    assert len(lex) == 3  # the Dsim gene and the allele row are dropped
    g = lex.get("FBgn0000014")
    assert g.symbol == "abd-A" and g.fullname == "abdominal A"
    assert g.symbol_synonyms == ["Abd-A", "iab-4", "BX-C"]
    assert g.fullname_synonyms == ["Abdominal-A", "infra-abdominal 4"]


def test_lookup_is_case_sensitive_and_flags_shared_names(fb: Path):
    lex = Lexicon.load([fb])
    assert lex.by_symbol("Dl").id == "FBgn0000463"
    assert lex.by_symbol("dl").id == "FBgn0000499"
    assert lex.by_symbol("DL") is None
    shared = lex.lookup("BX-C")
    assert shared.ambiguous and set(shared.gene_ids) == {"FBgn0000014", "FBgn0000499"}
    one = lex.lookup("iab-4")
    assert not one.ambiguous and one.gene_ids == ("FBgn0000014",)
    assert lex.lookup("nothing").gene_ids == ()


def test_resolve_by_id_or_symbol_and_helpful_errors(fb: Path):
    lex = Lexicon.load([fb])
    assert lex.resolve("FBgn0000463").symbol == "Dl"
    assert lex.resolve(" dl ").id == "FBgn0000499"
    with pytest.raises(NotFound) as e:
        lex.resolve("iab-4")
    assert "abd-A (FBgn0000014)" in e.value.message and e.value.code == "gene_not_found"
    with pytest.raises(NotFound) as e:
        lex.resolve("Xyz")
    assert "not in the lexicon" in e.value.message and e.value.details["candidates"] == []


def test_genes_csv_takes_fullname_from_summary(tmp_path: Path):
    p = tmp_path / "genes.csv"
    p.write_text(GENES_CSV)
    lex = Lexicon.load([p])
    assert lex.get("FBgn0000014").fullname == "abdominal A"
    assert lex.get("FBgn0004647").fullname == "Notch"
    assert lex.get("FBgn0000001").fullname is None
    assert lex.get("FBgn0004647").summary.startswith("Notch (N)")
    assert fullname_from_summary("N", "(N) starts with the symbol") is None


def test_sources_merge_by_gene(fb: Path, tmp_path: Path):
    csv = tmp_path / "genes.csv"
    csv.write_text(GENES_CSV)
    lex = Lexicon.load([fb, csv, _ground_truth(tmp_path / "ground_truth_top100.jsonl")])
    g = lex.get("FBgn0000014")
    assert g.summary.startswith("abdominal A")  # from genes.csv
    assert g.symbol_synonyms == ["Abd-A", "iab-4", "BX-C", "iab-2"]  # FlyBase first, then ground truth
    assert "Ultraabdominal" in g.fullname_synonyms
    assert lex.lookup("iab-2").gene_ids == ("FBgn0000014",)


def test_conflicting_symbols_are_refused():
    lex = Lexicon([Gene(id="FBgn0000001", symbol="a")])
    with pytest.raises(InputError):
        lex.add(Gene(id="FBgn0000001", symbol="b"))


def test_save_round_trip(fb: Path, tmp_path: Path):
    lex = Lexicon.load([fb])
    out = tmp_path / "lexicon.tsv"
    lex.save(out)
    again = Lexicon.load([out])
    assert [g.model_dump() for g in again] == [g.model_dump() for g in lex]


def test_bad_sources(tmp_path: Path):
    with pytest.raises(InputError):
        Lexicon.load([tmp_path / "missing.tsv"])
    odd = tmp_path / "genes.xml"
    odd.write_text("<x/>")
    with pytest.raises(InputError):
        Lexicon.load([odd])
    bad = tmp_path / "ground_truth.jsonl"
    bad.write_text('{"no": "gene"}\n')
    with pytest.raises(InputError) as e:
        Lexicon.load([bad])
    assert ":1:" in e.value.message


# ---- issue #14 item 6: a lexicon out of the box, case-insensitive candidates, empty names refused ---------------

def test_the_bundled_flybase_table_is_a_lexicon_without_configuration() -> None:
    lex = Lexicon.bundled()
    assert len(lex) == 3446
    assert lex.resolve("hh").id == "FBgn0004644" and lex.resolve("FBgn0004644").symbol == "hh"
    assert lex.resolve("dl").symbol == "dl"
    # FlyAOC's genes.csv leaves nan's symbol cell empty: the summary's "nanchung (nan)" names it
    assert lex.get("FBgn0036414").symbol == "nan" and lex.resolve("nan").fullname == "nanchung"


def test_a_name_in_another_case_offers_the_gene_as_a_candidate() -> None:
    lex = Lexicon.bundled()
    with pytest.raises(NotFound) as err:
        lex.resolve("HH")
    assert [c["symbol"] for c in err.value.details["candidates"]] == ["hh"]
    assert "hh (FBgn0004644)" in err.value.message
    both = Lexicon([Gene(id="FBgn0000463", symbol="Dl", fullname="Delta"),
                    Gene(id="FBgn0000499", symbol="dl", fullname="dorsal")])
    with pytest.raises(NotFound) as err:
        both.resolve("DL")  # never guessed: Dl is Delta, dl is dorsal
    assert {c["symbol"] for c in err.value.details["candidates"]} == {"Dl", "dl"}
    assert lex.lookup("HH").gene_ids == () and lex.lookup_any_case("HH").gene_ids == ("FBgn0004644",)


@pytest.mark.parametrize("name", ["", "   ", "\t"])
def test_an_empty_gene_name_is_refused(name: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        Lexicon.bundled().resolve(name)
    assert err.value.status == 422


def test_genes_without_a_symbol_never_enter_a_lexicon(tmp_path: Path) -> None:
    path = tmp_path / "genes.csv"
    path.write_text("FBgn_ID,Gene_Symbol,Summary\nFBgn0000002,,A summary without a name first.\n"
                    "FBgn0036414,,nanchung (nan) encodes a TRP channel.\n", encoding="utf-8")
    lex = Lexicon.load([path])
    assert [g.symbol for g in lex] == ["nan"]
    with pytest.raises(InputError):
        Lexicon([Gene(id="FBgn0000003", symbol="")])


def test_sessions_work_without_a_configured_lexicon(data_dir: Path) -> None:
    from fastapi.testclient import TestClient

    from search.api.app import create_app
    from search.core.config import Settings

    http = TestClient(create_app(Settings(data_dir=data_dir)))
    made = http.post("/v1/sessions", json={"gene": "hh", "max_papers": 2})
    assert made.status_code in (200, 201), made.text
    assert made.json()["gene"]["symbol"] == "hh"
    wrong_case = http.post("/v1/sessions", json={"gene": "HH"})
    assert wrong_case.status_code == 404 and wrong_case.json()["error"]["code"] == "gene_not_found"
    assert "hh" in [c["symbol"] for c in wrong_case.json()["error"]["details"]["candidates"]]
    assert http.post("/v1/sessions", json={"gene": ""}).status_code == 422
