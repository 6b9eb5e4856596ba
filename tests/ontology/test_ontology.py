"""Ontology loading, the cache, the DAG and Wang similarity, on the hand-written fixtures in tests/fixtures."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from search.core.errors import InputError, InvalidRequest
from search.ontology.hidden import expand
from search.ontology.model import Ontology, WangSimilarity
from search.schema.hidden import named_set, parse_hidden

FIX = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def go(tmp_path_factory) -> Ontology:
    return Ontology.load(FIX / "mini.obo", "go", cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def fbbt(tmp_path_factory) -> Ontology:
    return Ontology.load(FIX / "mini_fbbt.obo", "fbbt", cache_dir=tmp_path_factory.mktemp("cache"))


def test_terms_are_normalised(go):
    t = go.get("GO:0005634")
    assert (t.name, t.namespace, t.aspect) == ("nucleus", "cellular_component", "C")
    assert [(s.text, s.scope) for s in t.synonyms] == [("cell nucleus", "EXACT"), ("horsetail nucleus", "NARROW")]
    assert t.parents == {"is_a": ["GO:0043231"]}
    assert t.depth == 5  # longest is_a path: nucleus → 0043231 → 0043227 → 0043226 → 0110165 → 0005575
    assert go.get("GO:0031981").parents == {"is_a": ["GO:0043229"], "part_of": ["GO:0005634"]}
    assert go.get("GO:0010628").parents["positively_regulates"] == ["GO:0010467"]
    assert go.data_version == "mini/2024-01-01"
    assert go.stats()["terms"] == 25 and go.stats()["obsolete"] == 1


def test_alt_and_obsolete_ids(go):
    assert go.resolve("GO:0042051") == "GO:0001745"
    assert go.get("GO:0042051") is None and go.resolve("GO:9999999") is None
    old = go.get("GO:0000005")
    assert old.obsolete and old.replaced_by == ["GO:0003700"] and old.consider == ["GO:0140110"]


def test_ancestors_and_descendants_by_relation(go):
    assert "GO:0005634" in go.ancestors("GO:0031981")                  # hierarchy = is_a + part_of
    assert "GO:0005634" not in go.ancestors("GO:0031981", "is_a")
    assert set(go.descendants("GO:0005634")) == {"GO:0031981"}
    assert go.descendants("GO:0005634", ["is_a"]) == []
    assert "GO:0010467" in go.ancestors("GO:0010628", "regulates")
    assert "GO:0010467" not in go.ancestors("GO:0010628")
    assert go.children("GO:0043226") == ["GO:0043227", "GO:0043229"]
    assert go.parents("GO:0043231") == ["GO:0043227", "GO:0043229"]


def test_cache_is_used_and_keyed_by_content(tmp_path):
    obo = tmp_path / "x.obo"
    shutil.copy(FIX / "mini.obo", obo)
    cache = tmp_path / "cache"
    first = Ontology.load(obo, "go", cache_dir=cache)
    files = list(cache.glob("go-*.json.gz"))
    assert len(files) == 1
    again = Ontology.load(obo, "go", cache_dir=cache)
    assert again.sha256 == first.sha256 and list(again.ids) == list(first.ids)
    obo.write_text(obo.read_text().replace("name: nucleus\n", "name: cell nucleus proper\n"))
    changed = Ontology.load(obo, "go", cache_dir=cache)
    assert changed.get("GO:0005634").name == "cell nucleus proper"
    assert len(list(cache.glob("go-*.json.gz"))) == 2


def test_compact_form_is_json_and_reads_back_the_same(tmp_path):
    """The compact form is gzipped JSON (no pickle: a planted file cannot run code) and loses nothing."""
    fresh = Ontology.load(FIX / "mini.obo", "go", use_cache=False)
    fresh.save(tmp_path / "go.json.gz")
    assert json.loads(gzip.decompress((tmp_path / "go.json.gz").read_bytes()))["ids"] == list(fresh.ids)
    back = Ontology.read(tmp_path / "go.json.gz")
    assert back.sha256 == fresh.sha256 and back.columns == fresh.columns
    assert [t.model_dump() for t in back.terms()] == [t.model_dump() for t in fresh.terms()]
    with pytest.raises(ValueError, match="mini.obo"):                      # not ours: the error names the file
        Ontology.read(FIX / "mini.obo")


def test_gzipped_obo_loads(tmp_path):
    gz = tmp_path / "mini.obo.gz"
    gz.write_bytes(gzip.compress((FIX / "mini.obo").read_bytes()))
    assert len(Ontology.load(gz, "go", use_cache=False)) == 25


def test_malformed_obo_names_the_line(tmp_path):
    with pytest.raises(InputError) as e:
        Ontology.load(FIX / "malformed.obo", "go", use_cache=False)
    assert "line 12" in e.value.message and e.value.record == 12
    empty = tmp_path / "empty.obo"
    empty.write_text("format-version: 1.2\n")
    with pytest.raises(InputError, match="no \\[Term\\]"):
        Ontology.load(empty, "go", use_cache=False)


def test_wang_worked_examples(go):
    w = WangSimilarity(go)
    assert w.sim("GO:0000981", "GO:0003700") == pytest.approx(4.392 / (2.952 + 2.44))   # 0.81454
    assert w.sim("GO:0005634", "GO:0005667") == pytest.approx(0.135278, abs=1e-6)
    assert w.sim("GO:0005634", "GO:0000981") == 0.0                                  # C vs F


def test_wang_properties(go):
    w = WangSimilarity(go)
    assert w.sim("GO:0005634", "GO:0005634") == 1.0
    assert 0.0 < w.sim("GO:0005634", "GO:0043231") < 1.0
    for a, b in [("GO:0005634", "GO:0005667"), ("GO:0001745", "GO:0016330"), ("GO:0000981", "GO:0140110")]:
        assert w.sim(a, b) == pytest.approx(w.sim(b, a))
    assert w.sim("GO:0008150", "GO:0003674") == 0.0          # unrelated roots
    assert w.sim("GO:0042051", "GO:0001745") == 1.0          # alt id resolves (GO)
    assert w.sim("GO:0042051", "GO:0048749") == pytest.approx(w.sim("GO:0001745", "GO:0048749"))
    assert w.sim("GO:0000005", "GO:0003700") == 0.0          # obsolete: not in the DAG
    assert w.sim("GO:0000005", "GO:0000005") == 1.0          # identity first
    assert w.sim("GO:1234567", "GO:1234567") == 1.0 and w.sim("GO:1234567", "GO:0005634") == 0.0
    # part_of counts with weight 0.6: nuclear lumen → nucleus
    lumen_nucleus = w.sim("GO:0031981", "GO:0005634")
    assert 0.0 < lumen_nucleus < 1.0
    assert w.svalues(w._node["GO:0031981"])[w._node["GO:0005634"]] == pytest.approx(0.6)
    # regulates is not a Wang edge
    assert w._node["GO:0010467"] not in w.svalues(w._node["GO:0010468"])


def test_wang_fbbt_rules(fbbt):
    w = WangSimilarity(fbbt, "fbbt")
    # FBbt:00001040's qualified is_a to nervous system, its CARO parent and part_of are not edges
    expected = ((0.64 + 0.512) + (0.8 + 0.64)) / ((1 + 0.8 + 0.64 + 0.512) + (1 + 0.8 + 0.64))
    assert w.sim("FBbt:00001040", "FBbt:00005093") == pytest.approx(expected)
    assert 0 < w.sim("FBbt:00001040", "FBbt:00001036") < 1
    assert w.sim("FBbt:00099036", "FBbt:00001036") == 0.0    # alt ids are not resolved for FBbt
    assert w.sim("CARO:0000003", "FBbt:10000000") == 0.0      # only FBbt: terms are in the DAG
    with pytest.raises(InvalidRequest):
        WangSimilarity(fbbt, "fbdv")


def test_wang_matrix_matches_pairwise(go):
    w = WangSimilarity(go)
    preds = ["GO:0003700", "GO:0005634", "GO:0001745", "GO:0005634", "GO:9999999", "GO:0042051"]
    truths = ["GO:0005667", "GO:0000981", "GO:0005634", "GO:0016330", "GO:9999999", "GO:0000005"]
    m = w.matrix(preds, truths)
    expected = np.array([[w.sim(p, t) for t in truths] for p in preds])
    assert np.allclose(m, expected)
    assert w.best_match_sums(preds, truths) == pytest.approx(expected.max(axis=0).tolist())
    assert w.best_match_sums([], truths) == [0.0] * len(truths)
    assert WangSimilarity(FIX / "mini.obo", "go").sim("GO:0000981", "GO:0003700") == pytest.approx(0.8145400593)


def test_hidden_sets(go):
    assert len(named_set("flyaoc")) == 120 and "GO:0001745" in named_set("flyaoc")
    assert parse_hidden("GO:1, GO:2,GO:1") == ("GO:1", "GO:2")
    with pytest.raises(InvalidRequest) as e:
        parse_hidden("nosuchset")
    assert "flyaoc" in e.value.details["valid"]
    plain = expand(go, parse_hidden("flyaoc"))
    assert "GO:0001745" in plain and "GO:0016330" not in plain
    deep = expand(go, parse_hidden("flyaoc"), descendants=True)
    assert "GO:0016330" in deep and "GO:0048749" not in deep          # descendants hidden, ancestors not
    assert "GO:0016330" not in expand(go, ["GO:0001745"], descendants=True, relations="is_a")
    assert "GO:0001745" in expand(go, ["GO:0042051"])                   # alt ids hide their primary
