"""Issue #25: ``flysift index ontology`` reads OWL RDF/XML and OBO Graphs JSON through pronto (the ``owl`` extra), which
fastobo cannot: the same six hand-written terms in three formats (tests/fixtures/formats) load to the same ontology,
index and answer alike; a file the formats cannot read, or one whose imports point elsewhere, is one line and never a
fetch; without pronto an OWL or JSON file is one line naming the extra, and OBO needs no pronto at all."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from search.cli.main import main
from search.core.errors import InputError
from search.core.extras import ExtraMissing
from search.ontology.formats import sniff
from search.ontology.model import Ontology

from helpers import needs_extra, term_service

FORMATS = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
FILES = {"obo": FORMATS / "wing.obo", "owl": FORMATS / "wing.owl", "obographs": FORMATS / "wing.json"}


def _content(ont: Ontology) -> dict:
    """Every term's fields and parents, by id, lists sorted (OWL and OBO Graphs hold sets, OBO keeps file order)."""
    def normal(value):
        if isinstance(value, dict):
            return {k: normal(v) for k, v in value.items()}
        return sorted(map(str, map(normal, value))) if isinstance(value, list) else value
    return {t.id: normal(t.model_dump()) for t in ont.terms()} | {"data_version": ont.data_version}


def test_the_format_is_read_from_the_first_bytes(tmp_path):
    assert {fmt: sniff(path) for fmt, path in FILES.items()} == {fmt: fmt for fmt in FILES}
    renamed = tmp_path / "wing.obo"
    renamed.write_bytes(b"\xef\xbb\xbf\n  " + FILES["obographs"].read_bytes())   # a BOM, white space, a wrong name
    assert sniff(renamed) == "obographs"


@needs_extra("owl")
@pytest.mark.parametrize("fmt", ["owl", "obographs"])
def test_owl_and_obo_graphs_load_to_the_same_ontology_as_obo(tmp_path, fmt):
    want = Ontology.load(FILES["obo"], "go", cache_dir=tmp_path)
    got = Ontology.load(FILES[fmt], "go", cache_dir=tmp_path)
    assert _content(got) == _content(want) and len(got) == 6
    assert got.resolve("GO:0007476") == "GO:0035220"                         # alt id
    assert "GO:0008587" in got.descendants("GO:0035220", "hierarchy")       # part_of, named from its label
    assert got.get("GO:0007449").replaced_by == ["GO:0035220"] and got.get("GO:0007449").consider == ["GO:0008587"]


@needs_extra("owl")
@pytest.mark.parametrize("fmt", ["owl", "obographs"])
def test_index_ontology_reads_owl_and_obo_graphs_json(tmp_path, fmt):
    data = tmp_path / "data"
    r = CliRunner().invoke(main, ["index", "ontology", str(FILES[fmt]), "--name", "go", "--data-dir", str(data),
                                  "--no-cache"])
    assert r.exit_code == 0, r.output
    assert "go: 6 terms (1 obsolete, 1 alt ids, 5 synonyms)" in r.output and "wing/2024-05-01" in r.output
    svc = term_service(data)
    assert svc.search("go", "wing imaginal disc development", limit=3).hits[0].id == "GO:0035220"
    assert svc.lookup("GO:0007476").id == "GO:0035220"
    assert [t.id for t in svc.related("GO:0035220", "children", relations="hierarchy").terms] == [
        "GO:0008587", "GO:0048190"]


@needs_extra("owl")
def test_an_owl_import_is_never_fetched(tmp_path):
    ont = Ontology.load(FORMATS / "imports.owl", "go", cache_dir=tmp_path)   # port 9: a fetch would fail
    assert ont.ids == ["GO:0008150"]


@needs_extra("owl")
@pytest.mark.parametrize(("suffix", "text"), [
    (".owl", '<?xml version="1.0"?>\n<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">\n<owl:Cl'),
    (".json", '{"graphs": [{"nodes": [{"id": 5'),
    (".json", '{"graphs": []}'),
])
def test_a_file_the_format_cannot_read_is_one_line_naming_it(tmp_path, suffix, text):
    bad = tmp_path / f"bad{suffix}"
    bad.write_text(text)
    with pytest.raises(InputError) as e:
        Ontology.load(bad, "go", cache_dir=tmp_path)
    assert str(bad) in e.value.message and "\n" not in e.value.message
    r = CliRunner().invoke(main, ["index", "ontology", str(bad), "--name", "go", "--data-dir", str(tmp_path / "data")])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output


def test_without_pronto_owl_is_one_line_naming_the_extra_and_obo_still_loads(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pronto", None)   # what an uninstalled package looks like to `import`
    for fmt in ("owl", "obographs"):
        with pytest.raises(ExtraMissing) as e:
            Ontology.load(FILES[fmt], "go", cache_dir=tmp_path)
        assert e.value.message.endswith("needs the optional package pronto (not installed): pip install 'flysift[owl]'")
        assert FILES[fmt].name in e.value.message
    assert len(Ontology.load(FILES["obo"], "go", cache_dir=tmp_path)) == 6
    r = CliRunner().invoke(main, ["index", "ontology", str(FILES["owl"]), "--name", "go", "--data-dir",
                                  str(tmp_path / "data"), "--no-cache"])
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and "pip install 'flysift[owl]'" in lines[-1] and "Traceback" not in r.output
