"""Issue #26 on every engine (embedded on a temp folder, cluster on the test node), through the protocol and the
search service: the query language's trees, title:/abstract:, filters inside a query, highlight fragments, facets,
exports, paper heads, document frequencies, more-like-this and the list of collections. The same answers from both
engines, checked against what the fixture corpus holds."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from search.core.config import Settings
from search.core.models import Paper, Section
from search.core.query import HighlightSpec
from search.engines import Engine, collection_names
from search.retrieval.service import SearchService
from search.text.passages import split_passages

from helpers import PAPERS, cluster_flavours, find_cluster_node

CORPUS = [
    Paper(pmcid="PMC200001", pmid="1001", doi="10.1/a", year=2005, journal="Dev Biol",
          title="Sonic hedgehog Shh patterns the vertebrate limb",
          abstract="Shh from the zone of polarizing activity patterns the limb bud.",
          sections=[Section(type="INTRO", paragraphs=["The limb bud grows out under Shh control."]),
                    Section(type="RESULTS", paragraphs=["Shh mutant limbs lose their digits."])]),
    Paper(pmcid="PMC200002", year=2008, journal="Neuron", title="Shh signalling in the neural tube",
          abstract="Shh specifies ventral neurons.",
          sections=[Section(type="RESULTS", paragraphs=["A Shh gradient patterns the neural tube."]),
                    Section(type="METHODS", paragraphs=["Embryos were electroporated."])]),
    Paper(pmcid="PMC200003", year=2010, journal="Development", title="Outgrowth of the chick wing",
          abstract="Fgf signalling drives limb outgrowth; Shh is expressed posteriorly.",
          sections=[Section(type="DISCUSS", paragraphs=["Limb outgrowth needs Fgf and Shh."])]),
    Paper(pmcid="PMC200004", pmid="1004", year=2003, journal="Cell", title="BRCA2 and the repair of DNA breaks",
          abstract="Homologous recombination needs RAD51.",
          sections=[Section(type="RESULTS", paragraphs=["RAD51 foci form after damage."])]),
    Paper(pmcid="PMC200005", year=2012, journal="Nature", title="Repair of double-strand breaks",
          abstract="BRCA2 loads RAD51 onto single-stranded DNA.",
          sections=[Section(type="RESULTS", paragraphs=["Cells without BRCA2 are sensitive to damage."])]),
    Paper(pmcid="PMC200006", year=2015, journal="Cell", title="Wnt/β-catenin signaling in the gut",
          abstract="Wnt/β-catenin signaling maintains intestinal stem cells.",
          sections=[Section(type="RESULTS", paragraphs=["Loss of the pathway depletes crypts."])]),
    Paper(pmcid="PMC200007", year=2015, journal="Cell", title="Stability of β-catenin",
          abstract="Wnt ligands stabilise β-catenin in the cytoplasm.",
          sections=[Section(type="RESULTS", paragraphs=["β-catenin accumulates when Wnt is present."])]),
]
ALL = CORPUS + PAPERS

EngineFactory = Callable[..., Engine]


@pytest.fixture(params=["embedded", *(pytest.param(f"cluster:{f}", marks=pytest.mark.cluster)
                                     for f in cluster_flavours())])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    node = None
    if request.param.startswith("cluster:"):
        node = find_cluster_node(request.param.partition(":")[2])
        prefix = f"fst-{uuid.uuid4().hex[:10]}"
        yield Settings(data_dir=tmp_path / "data", cluster_url=node.url, cluster_flavour=node.flavour,
                       cluster_index_prefix=prefix)
        node.cleanup(prefix)
    else:
        yield Settings(data_dir=tmp_path / "data", engine="embedded")


def publish(engine: Engine, papers: list[Paper]) -> None:
    build = engine.open_build("fixture", resume=False)
    for p in papers:
        build.add(p, split_passages(p))
    build.commit({})
    build.publish()


@pytest.fixture
def svc(settings: Settings) -> Iterator[SearchService]:
    service = SearchService(settings)
    publish(service.engine(), ALL)
    yield service
    for eng in service._engines.values():
        eng.close()


def ids(res) -> set[str]:
    return {h.pmcid for h in res.hits}


def papers(svc: SearchService, text: str, **kw) -> set[str]:
    return ids(svc.search_papers(text, syntax="query", limit=100, **kw))


# ---- item 1: the query language --------------------------------------------------------------------------------

def test_minus_and_AND_split_what_the_word_alone_finds(svc):
    shh = papers(svc, "Shh")
    assert shh == {"PMC200001", "PMC200002", "PMC200003"}
    without, both = papers(svc, "Shh -limb"), papers(svc, "Shh AND limb")
    assert without == {"PMC200002"} and both == {"PMC200001", "PMC200003"}
    assert without | both == shh and not without & both
    assert papers(svc, "Shh NOT limb") == without and papers(svc, "+Shh +limb") == both
    # plain text reads the same characters as words: the - is dropped, AND is a stop word
    assert ids(svc.search_papers("Shh -limb", syntax="plain", limit=100)) >= shh


def test_groups_and_precedence(svc):
    # Wnt is a symbol: the symbol view holds PMC200006's Wnt/β-catenin whole, so it does not match there
    assert papers(svc, "(BRCA2 OR Wnt) AND NOT title:BRCA2") == {"PMC200005", "PMC200007"}
    assert papers(svc, "RAD51 AND (BRCA2 -title:double)") == {"PMC200004"}
    assert papers(svc, "RAD51 BRCA2 AND damage") == {"PMC200004", "PMC200005"}   # AND binds tighter


def test_title_and_abstract_search_one_field(svc):
    assert papers(svc, "title:BRCA2") == {"PMC200004"}
    assert papers(svc, "BRCA2") == {"PMC200004", "PMC200005"}
    assert papers(svc, "abstract:BRCA2") == {"PMC200005"}
    assert papers(svc, 'title:"neural tube"') == {"PMC200002"}
    hits = svc.search_passages("abstract:Shh", syntax="query", limit=100).hits
    assert hits and all(h.section_type == "ABSTRACT" for h in hits)


def test_filters_in_the_query_restrict_or_exclude(svc):
    assert papers(svc, "Shh year:2006..") == {"PMC200002", "PMC200003"}
    assert papers(svc, "Shh year:..2005") == {"PMC200001"}
    assert papers(svc, "Shh section:methods") == {"PMC200002"}
    assert papers(svc, "Shh -section:methods") == {"PMC200001", "PMC200003"}
    assert papers(svc, "Shh pmcid:(PMC200001 OR PMC200003)") == {"PMC200001", "PMC200003"}
    assert papers(svc, "(Shh OR year:2003) AND -limb") == {"PMC200002", "PMC200004"}
    browse = svc.search_papers("year:2015 section:results", syntax="query", limit=100)
    assert ids(browse) == {"PMC100004", "PMC200006", "PMC200007"} and browse.total == 3


def test_the_gene_hazards_keep_their_reading_in_the_query_language(svc):
    assert papers(svc, "Dl") == {"PMC100001"}
    assert "PMC100001" not in papers(svc, "dl -Dl") and papers(svc, "dl -Dl") == {"PMC100002"}
    assert papers(svc, "Su(H) AND abd-A") == {"PMC100003"}
    assert papers(svc, "l(2)gl OR E(spl)m8-HLH") == {"PMC100001", "PMC100003"}
    assert papers(svc, "α-Cat") == {"PMC100003"}


def test_compounds_find_papers_that_name_the_parts(svc):
    found = [h.pmcid for h in svc.search_papers("Wnt/β-catenin", limit=10).hits]
    # the paper that writes the compound and the one that names Wnt and β-catenin apart (one symbol token before)
    assert set(found[:2]) == {"PMC200006", "PMC200007"}


# ---- item 3: highlight ------------------------------------------------------------------------------------------

def test_highlight_fragments_of_title_abstract_and_best_passage(svc):
    spec = HighlightSpec(pre_tag="[", post_tag="]", fragment_size=60)
    hit = {h.pmcid: h for h in svc.search_papers("Shh limb", syntax="query", highlight=spec).hits}["PMC200001"]
    assert hit.highlight["title"] == ["Sonic hedgehog [Shh] patterns the vertebrate [limb]"]
    assert hit.highlight["abstract"][0].startswith("[Shh] from the zone")
    assert hit.best_passage and hit.best_passage.startswith("PMC200001:") and "[Shh]" in hit.highlight["passage"][0]
    # a field-restricted word lights up its field only; the case-sensitive view stays case-sensitive
    only_title = svc.search_papers("title:BRCA2", syntax="query", highlight=True and HighlightSpec()).hits[0]
    assert set(only_title.highlight) == {"title"}
    dl = svc.search_passages("Dl", syntax="query", highlight=HighlightSpec()).hits
    assert all("<em>Dl</em>" in h.highlight["text"][0] and "<em>dl</em>" not in h.highlight["text"][0] for h in dl)


def test_highlight_html_encoder_escapes_the_text_not_the_tags(settings):
    service = SearchService(settings)
    publish(service.engine(), [Paper(pmcid="PMC300001", title="Dl <b>bold</b> & more", abstract="x")])
    hit = service.search_papers("Dl", highlight=HighlightSpec(encoder="html")).hits[0]
    assert hit.highlight["title"] == ["<em>Dl</em> &lt;b&gt;bold&lt;/b&gt; &amp; more"]


# ---- item 4: facets, collections, more-like-this ----------------------------------------------------------------

def test_facets_count_every_match_by_year_and_section(svc):
    res = svc.search_papers("Shh", syntax="query", limit=1, facets=["year", "section"])
    assert res.total == 3 and len(res.hits) == 1
    assert res.facets == {"year": {"2005": 1, "2008": 1, "2010": 1},
                          "section": {"INTRO": 1, "METHODS": 1, "RESULTS": 2, "DISCUSS": 1}}
    res = svc.search_passages("Shh", syntax="query", limit=1, facets=["section"])
    assert res.facets == {"section": {"ABSTRACT": 3, "INTRO": 1, "RESULTS": 2, "DISCUSS": 1}}
    assert sum(res.facets["section"].values()) == res.total


def test_collections_list_every_published_collection(svc, settings):
    publish(svc.engine("ir-test"), CORPUS[:3])
    names = collection_names(settings)
    assert names == ["default", "ir-test"]
    info = {c.name: c for c in svc.collections()}
    assert (info["default"].papers, info["ir-test"].papers) == (len(ALL), 3)
    assert info["ir-test"].passages > 0 and info["default"].build


def test_more_like_this_finds_papers_sharing_significant_words(svc):
    terms = [t["term"] for t in svc.significant_terms("PMC200001")]
    assert "limb" in terms and "shh" in terms
    res = svc.more_like_this("PMC200001", limit=5)
    assert "PMC200001" not in ids(res) and [h.pmcid for h in res.hits][0] == "PMC200003"
    n, df = svc.engine().doc_freqs(["limb", "shh", "absent"])
    assert n == len(ALL) and df == {"limb": 2, "shh": 3, "absent": 0}


# ---- item 5: exports --------------------------------------------------------------------------------------------

def test_exports_are_every_hit_in_rank_order(svc):
    query = svc.build_query("Shh OR BRCA2 OR β-catenin", None, syntax="query")
    eng = svc.engine()
    exported = [h.pmcid for h in eng.export_papers(query, 100)]
    page = [h.pmcid for h in eng.search_papers(query, limit=100).hits]
    assert sorted(exported) == sorted(page) and len(exported) == 7
    assert [h.pmcid for h in eng.export_papers(query, 3)] == exported[:3]
    passages = list(eng.export_passages(svc.build_query("Shh", None), 100))
    assert {p.passage_id for p in passages} == {h.passage_id for h in
                                                eng.search_passages(svc.build_query("Shh", None), limit=100).hits}
    csv = "".join(svc.export("papers", "title:BRCA2", "csv", syntax="query"))
    assert csv.splitlines()[1].startswith("1,PMC200004,1004,,2003,Cell,BRCA2 and the repair of DNA breaks,")
    ris = "".join(svc.export("passages", "BRCA2", "ris"))
    assert "TI  - Repair of double-strand breaks" in ris and "N1  - passage PMC200005:" in ris


def test_paper_heads_read_titles_and_ids(svc):
    heads = svc.engine().paper_heads(["PMC200004", "PMC999999"])
    assert list(heads) == ["PMC200004"]
    assert (heads["PMC200004"].title, heads["PMC200004"].pmid, heads["PMC200004"].year) == (
        "BRCA2 and the repair of DNA breaks", "1004", 2003)
    res = svc.search_passages("BRCA2", titles=True)
    assert all(h.title for h in res.hits)


def test_a_build_from_before_the_title_field_says_to_rebuild(svc, settings):
    """A build from before the title and abstract fields (embedded layout 5/6, cluster papers layout 5): title: is
    409 rebuild_needed, never a silent 0 hits."""
    from search.core.errors import FlysiftError

    eng = svc.engine()
    if settings.engine_kind == "cluster":
        index = eng._live_index("papers")  # type: ignore[attr-defined]
        eng.t.request("PUT", f"/{index}/_mapping", {"_meta": {"layout": 5, "field_weights": {  # type: ignore
            "title": 2, "abstract": 1, "body": 1}}})
        eng._layout = None  # type: ignore[attr-defined]
    else:
        import json

        meta_file = eng._read().path / "build.json"  # type: ignore[attr-defined]
        meta = json.loads(meta_file.read_text())
        meta_file.write_text(json.dumps({**meta, "layout": 5}))
        eng._reader = None  # type: ignore[attr-defined]
    with pytest.raises(FlysiftError) as err:
        svc.search_papers("title:BRCA2", syntax="query")
    assert (err.value.status, err.value.code, err.value.details["field"]) == (409, "rebuild_needed", "title")
    assert papers(svc, "BRCA2 -limb") == {"PMC200004", "PMC200005"}   # everything else still answers


# ---- item 8: concept search -------------------------------------------------------------------------------------

CONCEPT_PAPERS = [
    Paper(pmcid="PMC400001", year=2012, title="Eyes", abstract="We study compound eye morphogenesis in flies.",
          sections=[Section(type="RESULTS", paragraphs=["The nuclear lumen fills with protein.",
                                                        "Compound eye morphogenesis fails without Dl."])]),
    Paper(pmcid="PMC400002", year=2014, title="Nuclei", abstract="Su(H) enters the nucleus.",
          sections=[Section(type="RESULTS", paragraphs=["The nucleus swells; Dl is not needed."])]),
    Paper(pmcid="PMC400003", year=2016, title="Wings", abstract="Wing disc growth.",
          sections=[Section(type="RESULTS", paragraphs=["Nothing about organelles here."])]),
]


def _with_concepts(settings: Settings) -> SearchService:
    from indexer.concepts import index_concepts
    from search.engines.embedded.terms import TermIndex
    from search.ontology.model import Ontology
    from search.ontology.service import TermService

    svc = SearchService(settings)
    publish(svc.engine(), CONCEPT_PAPERS)
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    ont = Ontology.load(fixtures / "mini.obo", "go", cache_dir=settings.data_dir / "obo-cache")
    TermService(settings.data_dir, svc.engine()).index_ontology(ont, TermIndex(settings.data_dir).write)
    meta = index_concepts(settings, workers=1)
    # nuclear lumen, compound eye morphogenesis ×2, nucleus ×2, organelle
    assert (meta["papers"], meta["ontologies"]) == (3, ["go"]) and meta["mentions"] == 6
    return svc


def test_term_finds_mentions_of_the_term_and_its_descendants(settings):
    svc = _with_concepts(settings)
    res = svc.search_papers("term:GO:0005634", syntax="query")   # nucleus; nuclear lumen is part_of it
    assert {h.pmcid for h in res.hits} == {"PMC400001", "PMC400002"}
    by = {h.pmcid: h for h in res.hits}
    assert [(m.term_id, m.text, m.matched) for m in by["PMC400001"].mentions] == [
        ("GO:0031981", "nuclear lumen", "GO:0005634")]
    assert by["PMC400002"].score > by["PMC400001"].score   # two mentions against one
    eye = svc.search_papers("term:GO:0001654", syntax="query")     # eye development: compound eye morphogenesis
    assert [h.pmcid for h in eye.hits] == ["PMC400001"] and len(eye.hits[0].mentions) == 2
    passages = svc.search_passages("term:go:0031981", syntax="query")
    assert [h.passage_id for h in passages.hits] == ["PMC400001:1:0"]
    assert passages.hits[0].mentions[0].model_dump() == {"term_id": "GO:0031981", "matched": "GO:0031981",
                                                         "passage_id": "PMC400001:1:0", "start": 4, "end": 17,
                                                         "text": "nuclear lumen", "via": "name"}
    # with words and operators, as any leaf
    assert {h.pmcid for h in svc.search_papers("term:GO:0005634 -Dl", syntax="query").hits} == set()
    assert {h.pmcid for h in svc.search_papers("term:GO:0005634 AND Su(H)", syntax="query").hits} == {"PMC400002"}
    assert svc.search_papers("term:GO:0005634", syntax="query", facets=["year"]).facets == {
        "year": {"2012": 1, "2014": 1}}
    info = {c.name: c.concepts for c in svc.collections()}["default"]
    assert info is not None and info["mentions"] == 6 and info["ontologies"] == ["go"]


def test_term_without_a_concept_index_says_how_to_make_one(svc):
    from search.core.errors import FlysiftError

    with pytest.raises(FlysiftError) as err:
        svc.search_papers("term:GO:0005634", syntax="query")
    assert (err.value.status, err.value.code) == (409, "concepts_missing")
    assert "flysift index concepts" in err.value.message


def test_a_new_build_has_no_concept_index_until_it_is_indexed_again(settings):
    from search.core.errors import FlysiftError

    svc = _with_concepts(settings)
    publish(svc.engine(), CONCEPT_PAPERS)   # a new corpus build
    with pytest.raises(FlysiftError) as err:
        svc.search_papers("term:GO:0005634", syntax="query")
    assert err.value.code == "concepts_missing"


def test_concept_indexing_resumes_where_it_stopped(settings, monkeypatch):
    import indexer.concepts as concepts

    svc = _with_concepts(settings)   # the full run, for comparison
    want = svc.engine().concept_counts("papers", ["GO:0005575"])
    publish(svc.engine(), CONCEPT_PAPERS)   # a new build: its concept index starts again
    monkeypatch.setattr(concepts, "COMMIT_EVERY", 1)
    monkeypatch.setattr(concepts, "CHUNK", 1)
    seen: list[int] = []

    def stop(done: int, total: int | None) -> None:
        seen.append(done)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        concepts.index_concepts(settings, workers=1, progress=stop)
    writer, _ = svc.engine().open_concepts(resume=True)
    assert len(writer.done) == 2   # two papers committed before the interruption
    writer.abort()
    meta = concepts.index_concepts(settings, workers=1)
    assert meta["papers"] == 3 and meta["mentions"] == 6 and meta["passages_read"] < 3 * 3
    assert svc.engine().concept_counts("papers", ["GO:0005575"]) == want
