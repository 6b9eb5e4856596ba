"""Term index, term service, REST endpoints and CLI on the hand-written fixtures (tests/fixtures/mini*.obo)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from search.core.errors import InputError, InvalidRequest, NotFound
from search.core.models import Synonym, Term
from search.engines.embedded.terms import TermIndex
from search.ontology.model import Ontology
from search.ontology.rerank_model import RerankModel
from search.ontology.rewrites import expansions, rule_rewrites
from search.ontology.service import TermService

from helpers import term_service

FIX = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("data")
    cache = tmp_path_factory.mktemp("cache")
    svc = term_service(d)
    for file, name in (("mini.obo", "go"), ("mini_fbbt.obo", "fbbt")):
        svc.index_ontology(Ontology.load(FIX / file, name, cache_dir=cache), TermIndex(d).write)
    return d


@pytest.fixture(scope="module")
def svc(data_dir) -> TermService:
    return term_service(data_dir)


def ids(res) -> list[str]:
    return [h.id for h in res.hits]


def test_search_names_synonyms_ids(svc):
    assert ids(svc.search("go", "nucleus"))[0] == "GO:0005634"
    hit = svc.search("go", "cell nucleus").hits[0]
    assert (hit.id, hit.matched_synonym, hit.aspect) == ("GO:0005634", "cell nucleus", "C")
    assert svc.search("go", "nucleus").hits[0].matched_synonym is None
    assert ids(svc.search("go", "GO:0005634")) == ["GO:0005634"]
    assert ids(svc.search("go", "GO:0042051")) == ["GO:0001745"]          # an alt id finds its term
    assert ids(svc.search("go", "ommatidial array morphogenesis"))[0] == "GO:0001745"
    assert ids(svc.search("fbbt", "CNS"))[0] == "FBbt:00005095"


def test_aspect_filter_is_inside_the_query(svc):
    res = svc.search("go", "transcription", aspect="C", limit=1)
    assert ids(res) == ["GO:0005667"]
    assert all(h.aspect == "F" for h in svc.search("go", "transcription", aspect="molecular_function").hits)
    with pytest.raises(InvalidRequest) as e:
        svc.search("go", "transcription", aspect="X")
    assert "P" in e.value.details["valid"]


def test_obsolete_excluded_by_default(svc):
    assert "GO:0000005" not in ids(svc.search("go", "ribosomal chaperone"))
    res = svc.search("go", "ribosomal chaperone", include_obsolete=True)
    assert res.hits[0].id == "GO:0000005" and res.hits[0].obsolete


def test_synonym_scope_weights(tmp_path):
    index = TermIndex(tmp_path)
    terms = [Term(id="X:1", ontology="x", name="alpha structure",
                  synonyms=[Synonym(text="zeta body", scope="RELATED")]),
             Term(id="X:2", ontology="x", name="beta structure", synonyms=[Synonym(text="zeta body", scope="EXACT")]),
             Term(id="X:3", ontology="x", name="gamma structure", synonyms=[Synonym(text="zeta body", scope="NARROW")])]
    assert index.write("x", terms) == 3
    assert [h.id for h in index.search("x", "zeta body")] == ["X:2", "X:3", "X:1"]
    assert index.count("x") == 3 and index.counts() == {"x": 3}


def test_rewrite_replaces_the_index(tmp_path):
    index = TermIndex(tmp_path)
    index.write("x", [Term(id="X:1", ontology="x", name="first")])
    assert [h.id for h in index.search("x", "first")] == ["X:1"]
    index.write("x", [Term(id="X:2", ontology="x", name="second")])
    assert index.search("x", "first") == [] and index.count("x") == 1
    assert len(list((tmp_path / "terms" / "versions").iterdir())) == 1


def test_hidden_terms_never_appear_but_ancestors_do(svc):
    base = ids(svc.search("go", "compound eye morphogenesis", limit=10))
    assert base[0] == "GO:0001745" and "GO:0016330" in base
    res = svc.search("go", "compound eye morphogenesis", limit=10, hidden="flyaoc", hidden_descendants=True)
    assert "GO:0001745" not in ids(res) and "GO:0016330" not in ids(res)
    assert "GO:0048749" in ids(res) and res.hidden > 120                  # its ancestor stays visible
    shallow = ids(svc.search("go", "compound eye morphogenesis", limit=10, hidden="flyaoc"))
    assert "GO:0001745" not in shallow and "GO:0016330" in shallow
    # filtered inside the query: limit=1 still returns the best visible term
    top = ids(svc.search("go", "organelle", limit=1))
    assert top == ["GO:0043226"] and len(ids(svc.search("go", "organelle", limit=1, hidden="GO:0043226"))) == 1
    assert ids(svc.search("go", "GO:0001745", hidden="flyaoc")) == []
    with pytest.raises(NotFound) as e:
        svc.lookup("GO:0042051", hidden="flyaoc")                            # alt id of a hidden term
    assert e.value.code == "term_hidden"
    assert svc.lookup("GO:0048749", hidden="flyaoc", hidden_descendants=True).id == "GO:0048749"
    desc = svc.related("GO:0032502", "descendants", hidden="GO:0001745", hidden_descendants="true")
    assert {"GO:0001745", "GO:0016330"}.isdisjoint(t.id for t in desc.terms) and desc.total == 2
    kids = svc.flyaoc_children("GO:0032502", hidden="GO:0001745")
    assert [c["go_id"] for c in kids["children"]] == ["GO:0001654", "GO:0016330"]


def test_lookup_alt_obsolete_unknown_malformed(svc):
    alt = svc.lookup("GO:0042051")
    assert alt.id == "GO:0001745" and alt.requested_id == "GO:0042051" and "alternative id" in alt.note
    old = svc.lookup("GO:0000005")
    assert old.term.obsolete and [r.id for r in old.replacements] == ["GO:0003700", "GO:0140110"]
    assert "obsolete" in old.note
    with pytest.raises(NotFound):
        svc.lookup("GO:0999999")
    with pytest.raises(InvalidRequest) as e:
        svc.lookup("GO:12")
    assert any("GO:" in v for v in e.value.details["valid"])
    with pytest.raises(NotFound) as e:                                      # well-formed, unknown: 404
        svc.search("nosuch", "x")
    assert e.value.details["valid"] == ["fbbt", "go"]                       # what can be searched here
    with pytest.raises(InvalidRequest):                                     # malformed: 422
        svc.search("No Such", "x")
    with pytest.raises(NotFound):
        svc.search("fbdv", "embryo")                                       # known, but not indexed here


def test_related_by_relations(svc):
    anc = svc.related("GO:0031981", "ancestors")
    assert "GO:0005634" in [t.id for t in anc.terms] and anc.relations == ["is_a", "part_of", "substage_of"]
    assert "GO:0005634" not in [t.id for t in svc.related("GO:0031981", "ancestors", relations="is_a").terms]
    assert [t.id for t in svc.related("GO:0043231", "parents").terms] == ["GO:0043227", "GO:0043229"]
    page = svc.related("GO:0005575", "descendants", limit=2)
    assert page.truncated and len(page.terms) == 2 and page.total > 2
    with pytest.raises(InvalidRequest):
        svc.related("GO:0005575", "descendants", relations="nonsense_rel")


def test_flyaoc_records(svc):
    rec = svc.flyaoc_search("go", "nucleus", aspect="C", limit=3)[0]
    assert rec["go_id"] == "GO:0005634" and rec["namespace"] == "cellular_component"
    assert rec["synonyms"] == ["cell nucleus", "horsetail nucleus"]
    assert rec["parents"] == ["GO:0043231 (intracellular membrane-bounded organelle)"]
    assert "children_count" not in rec                                     # omitted when 0 (part_of child only)
    org = svc.flyaoc_search("go", "organelle", limit=5)
    assert next(r for r in org if r["go_id"] == "GO:0043226")["children_count"] == 2
    ana = svc.flyaoc_search("fbbt", "ventral nerve cord", limit=1)[0]
    assert ana["fbbt_id"] == "FBbt:00001036" and "namespace" not in ana
    kids = svc.flyaoc_children("GO:0043226")
    assert kids["children_count"] == 2 and not kids["truncated"] and kids["term_name"] == "organelle"
    assert kids["children"][0] == {"go_id": "GO:0043227", "name": "membrane-bounded organelle", "children_count": 1}
    with pytest.raises(InvalidRequest) as e:
        svc.flyaoc_children("XYZ:1")
    assert e.value.details["flyaoc"]["error"].startswith("Unknown ontology prefix")


def test_resolver_prefers_the_named_term(svc):
    got = svc.resolve_description("compound eye morphogenesis")
    assert (got.ontology, got.text, got.hidden) == ("go", "compound eye morphogenesis", 0)
    assert got.results[0].id == "GO:0001745" and got.results[0].matched == "compound eye morphogenesis"
    assert svc.resolve_description("regulation of the expression of genes").results[0].id == "GO:0010468"
    hidden = svc.resolve_description("compound eye morphogenesis", hidden="flyaoc")
    assert "GO:0001745" not in [r.id for r in hidden.results] and hidden.hidden > 0


def test_api_endpoints(data_dir):
    from search.api.app import create_app
    from search.core.config import Settings
    from search.core.models import Gene
    from search.text.lexicon import Lexicon

    Lexicon([Gene(id="FBgn0000490", symbol="dpp", fullname="decapentaplegic")]).save(data_dir / "lexicon.tsv")
    c = TestClient(create_app(Settings(data_dir=data_dir)))
    r = c.get("/v1/terms/search", params={"ontology": "go", "q": "nucleus", "aspect": "C", "limit": 2})
    assert r.status_code == 200 and r.json()["hits"][0]["id"] == "GO:0005634"
    assert c.get("/v1/terms/GO:0042051").json()["id"] == "GO:0001745"
    assert c.get("/v1/terms/GO:0999999").status_code == 404
    bad = c.get("/v1/terms/GO:12")
    assert bad.status_code == 422 and bad.json()["error"]["details"]["valid"]
    assert c.get("/v1/terms/search", params={"ontology": "nope", "q": "x"}).status_code == 404
    assert c.get("/v1/terms/search", params={"ontology": "go\x00", "q": "x"}).status_code == 422
    hidden = c.get("/v1/terms/GO:0001745", params={"hidden": "flyaoc"})
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "term_hidden"
    anc = c.get("/v1/terms/GO:0031981/ancestors").json()
    assert "GO:0005634" in [t["id"] for t in anc["terms"]]
    assert c.get("/v1/terms/GO:0005634/descendants", params={"relations": "is_a"}).json()["total"] == 0
    assert c.get("/v1/flyaoc/search_go_terms", params={"query": "nucleus"}).json()[0]["go_id"] == "GO:0005634"
    assert c.get("/v1/flyaoc/search_anatomy_terms", params={"query": "CNS"}).json()[0]["fbbt_id"] == "FBbt:00005095"
    assert c.get("/v1/flyaoc/get_term_children", params={"term_id": "GO:0043226"}).json()["children_count"] == 2
    resolved = c.get("/v1/terms/resolve", params={"text": "compound eye morphogenesis"}).json()   # an object
    assert resolved["ontology"] == "go" and resolved["results"][0]["id"] == "GO:0001745"
    # inside a session its hidden terms apply without any request parameter, and the call is traced
    hidden = {"set": "flyaoc", "descendants": True}
    sid = c.post("/v1/sessions", json={"gene": "dpp", "hidden_terms": hidden}).json()["id"]
    in_session = {"X-Session-Id": sid}
    found = c.get("/v1/flyaoc/search_go_terms", params={"query": "compound eye morphogenesis"},
                  headers=in_session).json()
    assert "GO:0001745" not in [t["go_id"] for t in found] and "GO:0048749" in [t["go_id"] for t in found]
    assert c.get("/v1/terms/GO:0001745", headers=in_session).json()["error"]["code"] == "term_hidden"
    assert [e["tool"] for e in c.get(f"/v1/sessions/{sid}/trace").json()["events"]][-2:] == \
        ["search_go_terms", "get_term"]


def test_cli_index_and_terms(tmp_path, monkeypatch):
    from indexer.ontologies import ontology
    from search.cli.terms import terms

    monkeypatch.setenv("FLYSIFT_ONTOLOGY_CACHE", str(tmp_path / "cache"))
    runner = CliRunner()
    r = runner.invoke(ontology, [str(FIX / "mini.obo"), "--name", "go", "--data-dir", str(tmp_path / "d")])
    assert r.exit_code == 0, r.output
    assert "25 terms" in r.output
    r = runner.invoke(terms, ["nucleus", "--ontology", "go", "--aspect", "C", "--json",
                              "--data-dir", str(tmp_path / "d")])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["hits"][0]["id"] == "GO:0005634"
    r = runner.invoke(ontology, [str(FIX / "malformed.obo"), "--name", "go", "--data-dir", str(tmp_path / "d")])
    assert isinstance(r.exception, InputError) and "line 12" in str(r.exception)
    assert runner.invoke(ontology, [str(FIX / "mini.obo"), "--name", "Bad Name"]).exit_code == 2


def _held_out_service(tmp_path: Path, terms: list[Term]) -> TermService:
    svc = term_service(tmp_path)
    svc.index_ontology(Ontology.from_terms("go", terms), TermIndex(tmp_path).write)
    return svc


def test_rewrites_learned_from_the_ontology(tmp_path):
    """Name/synonym pairs teach "IL" → "interleukin"; a synonym inside a longer query becomes its term's name; the
    regulation frame must agree. The targets themselves have no synonyms (the strict hold-out)."""
    def t(i, name, *syns):
        return Term(id=f"GO:{i:07d}", ontology="go", name=name, synonyms=[Synonym(text=s) for s in syns])
    svc = _held_out_service(tmp_path, [
        t(1, "interleukin-21 production", "IL-21 production"), t(2, "interleukin-5 production", "IL-5 production"),
        t(3, "response to interleukin-21"), t(4, "Mre11 complex", "Rad50 complex"), t(5, "Mre11 complex assembly"),
        t(6, "regulation of cilium assembly", "cilium assembly regulation", "inhibition of cilium assembly process"),
        t(7, "negative regulation of cilium assembly"), t(8, "cilium assembly"), t(9, "ventral double row"),
        t(10, "accessory pharyngeal nerve")])
    model = svc.rerank_model(svc.ontology("go"))
    assert ("interleukin",) in [r for r, _ in model.rule(("il",))]
    assert ["response", "to", "interleukin", "21"] in rule_rewrites(model, ["response", "to", "il", "21"])
    assert ids(svc.search("go", "response to IL-21"))[0] == "GO:0000003"
    assert ids(svc.search("go", "Rad50 complex assembly"))[0] == "GO:0000005"
    assert ids(svc.search("go", "downregulation of cilium assembly"))[0] == "GO:0000007"
    assert ids(svc.search("go", "cilium assembly"))[0] == "GO:0000008"
    assert expansions(model, "APhN") == [("accessory", "pharyngeal", "nerve")] and expansions(model, "AhN") == []
    assert ids(svc.search("go", "vDR"))[:1] == ["GO:0000009"]               # no word in common: an abbreviation
    hit = svc.search("go", "IL-21 production").hits[0]
    assert (hit.id, hit.matched_synonym) == ("GO:0000001", "IL-21 production")


def test_rerank_model_saved_at_indexing(data_dir):
    fresh = term_service(data_dir)
    ont = fresh.ontology("go")
    assert fresh.model_path("go").is_file()
    model = fresh._load_model("go")
    assert model is not None and model.index == ont.row_of
    learned = RerankModel.learn(ont)                                        # what was saved reads back the same
    assert model.meta == learned.meta and set(model.arrays) == set(learned.arrays)
    for name, column in learned.arrays.items():
        assert model.arrays[name].dtype == column.dtype and (model.arrays[name] == column).all(), name
    for i in range(len(ont)):
        assert model.term(i) == learned.term(i) and model.definition(i) == learned.definition(i)
        assert model.generality(i) == learned.generality(i) and model.name_words(i) == learned.name_words(i)
        assert [model.synonym(i, k) for k in range(len(model.term(i)) - 1)] == [
            s for s, _ in ont.columns["synonyms"][i]]
    assert model.rule(("cell", "nucleus")) == learned.rule(("cell", "nucleus")) and model.max_lhs == learned.max_lhs
    assert ids(fresh.search("go", "cell nucleus"))[0] == "GO:0005634"
