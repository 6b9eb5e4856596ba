"""The engine contract: the same tests against every ``Engine`` (embedded on a temp folder, cluster on the real node),
through the protocol only. Papers, passages, terms, filters, builds (publish, refused publish, abort), health.

What the service, the indexer and the API rely on is here; what one implementation does beyond it (aliases, bulk
retries, tantivy's on-disk layout) stays in ``test_embedded_engine.py`` / ``test_cluster_engine.py``."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from search.core.config import Settings
from search.core.errors import IndexMissing
from search.core.models import Paper, Synonym, Term
from search.core.query import EngineQuery, Filters
from search.engines import BuildRefused, Capabilities, Engine, capabilities_of, open_engine
from search.retrieval.planner import plan
from search.text.passages import split_passages

from helpers import PAPERS, cluster_flavours, find_cluster_node

#: a fresh engine of one kind, for one collection (each call: an engine over the same store)
EngineFactory = Callable[..., Engine]


@pytest.fixture(params=["embedded", *(pytest.param(f"cluster:{f}", marks=pytest.mark.cluster)
                                     for f in cluster_flavours())])
def new_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EngineFactory]:
    """Engines of one kind: embedded on a temp folder, or cluster on the test node with an index prefix of its own."""
    node = None
    if request.param.startswith("cluster:"):
        node = find_cluster_node(request.param.partition(":")[2])
        prefix = f"fst-{uuid.uuid4().hex[:10]}"
        settings = Settings(data_dir=tmp_path / "data", cluster_url=node.url, cluster_flavour=node.flavour,
                            cluster_index_prefix=prefix)
    else:
        settings = Settings(data_dir=tmp_path / "data", engine="embedded")
    opened: list[Engine] = []

    def make(collection: str = "default") -> Engine:
        opened.append(open_engine(settings, collection=collection))
        return opened[-1]

    yield make
    for eng in opened:
        eng.close()
    if node is not None:
        node.cleanup(prefix)


def publish(engine: Engine, papers: list[Paper], fingerprint: str = "fixture", *, allow_shrink: bool = False) -> str:
    build = engine.open_build(fingerprint, resume=False)
    for p in papers:
        build.add(p, split_passages(p))
    build.commit({"consumed": len(papers)})
    assert build.failures == []
    build.publish(allow_shrink=allow_shrink)
    return build.id


@pytest.fixture
def engine(new_engine: EngineFactory) -> Engine:
    eng = new_engine()
    publish(eng, PAPERS)
    return eng


def pmcids(res) -> list[str]:
    return [h.pmcid for h in res.hits]


# ---- capabilities and the published build's files -------------------------------------------------------------------
def test_capabilities_say_what_the_engine_can_do_and_its_files_follow_them(new_engine: EngineFactory):
    """Code above the engines chooses by ``capabilities``; an engine whose builds are local folders names the
    published one (a new folder with each publish, ``IndexMissing`` before the first); others refuse to."""
    eng = new_engine()
    caps = eng.capabilities
    assert isinstance(caps, Capabilities) and eng.collection == "default"
    assert caps == capabilities_of_kind(eng)
    if not caps.local_builds:
        with pytest.raises(NotImplementedError):
            eng.published_files()
        return
    with pytest.raises(IndexMissing):
        eng.published_files()
    first = publish(eng, PAPERS, "one")
    files = eng.published_files()
    assert files.build == first and files.path.is_dir() and first in files.path.parts
    second = publish(eng, PAPERS, "two")
    assert eng.published_files().build == second != first


def capabilities_of_kind(eng: Engine) -> Capabilities:
    """What the factory says of the engine kind, without opening one."""
    kind = "cluster" if eng.name == "cluster" else "embedded"
    return capabilities_of(Settings(engine=kind, cluster_url="http://127.0.0.1:1" if kind == "cluster" else None))


# ---- health and stats ------------------------------------------------------------------------------------------------
def test_has_index_and_stats_before_and_after_the_first_publish(new_engine: EngineFactory):
    eng = new_engine()
    assert eng.has_index() is False
    st = eng.stats()
    assert (st.papers, st.passages, st.build) == (0, 0, None)
    with pytest.raises(IndexMissing):
        eng.search_papers(plan("Dl"))
    build_id = publish(eng, PAPERS)
    assert eng.has_index() is True
    st = eng.stats()
    assert st.engine == eng.name and st.papers == len(PAPERS) and st.build == build_id
    assert st.passages == sum(len(split_passages(p)) for p in PAPERS)


# ---- papers and passages ---------------------------------------------------------------------------------------------
def test_symbols_are_case_sensitive_and_survive_punctuation(engine: Engine):
    assert pmcids(engine.search_papers(plan("Dl"))) == ["PMC100001"]
    assert "PMC100001" not in pmcids(engine.search_papers(plan("dl", known_symbols={"dl"})))
    assert "PMC100003" in pmcids(engine.search_papers(plan("Su(H)")))
    assert pmcids(engine.search_papers(plan("l(2)gl"))) == ["PMC100003"]


def test_paper_search_pages_counts_and_reports_matched_clauses(engine: Engine):
    res = engine.search_papers(plan("wing"), limit=1)
    assert res.total == 2 and len(res.hits) == 1 and res.limit == 1
    rest = engine.search_papers(plan("wing"), limit=1, offset=1)
    assert {res.hits[0].pmcid, rest.hits[0].pmcid} == {"PMC100001", "PMC100004"}
    q = plan("Dl", expansions=["Delta"])
    hit = engine.search_papers(q).hits[0]
    assert hit.pmcid == "PMC100001" and hit.matched


def test_get_paper_round_trips_and_unknown_is_none(engine: Engine):
    paper = engine.get_paper("PMC100003")
    assert paper == PAPERS[2]
    assert engine.get_paper("PMC999999") is None


def test_passages_keep_ids_offsets_and_snippets(engine: Engine):
    res = engine.search_passages(plan("Su(H)"), snippets=True)
    assert res.total >= 2 and {h.pmcid for h in res.hits} <= {"PMC100001", "PMC100003"}
    for h in res.hits:
        assert h.passage_id == f"{h.pmcid}:{h.section_index}:{h.paragraph_index}"
        assert "Su(H)" in h.text and h.end - h.start == len(h.text)
        assert h.snippet is not None and any(h.snippet.text[s:e] == "Su(H)" for s, e in h.snippet.highlights)


def test_filters_year_sections_and_pmcids(engine: Engine):
    assert engine.search_papers(plan("wing embryo targets")).total == 4
    late = engine.search_papers(plan("wing", filters=Filters(year_from=2006)))
    assert pmcids(late) == ["PMC100004"]
    early = engine.search_papers(plan("wing", filters=Filters(year_to=2006)))
    assert pmcids(early) == ["PMC100001"]
    methods = engine.search_passages(plan("embryos", filters=Filters(section_types=["METHODS"])))
    assert methods.hits and all(h.section_type == "METHODS" for h in methods.hits)
    only = engine.search_papers(plan("wing", filters=Filters(pmcids=["PMC100004"])))
    assert pmcids(only) == ["PMC100004"]
    assert engine.search_papers(EngineQuery(clauses=[])).total == 0


def test_scan_passages_gives_every_passage_with_its_title_in_a_stable_order(engine: Engine):
    first = list(engine.scan_passages())
    assert [p.id for p, _ in first] == [p.id for p, _ in engine.scan_passages()]
    assert len(first) == engine.stats().passages
    titles = {p.pmcid: p.title for p in PAPERS}
    assert all(title == titles[p.pmcid] for p, title in first)


# ---- builds ----------------------------------------------------------------------------------------------------------
def test_an_empty_build_is_refused_and_the_live_build_keeps_serving(engine: Engine):
    live = engine.stats().build
    build = engine.open_build("empty", resume=False)
    build.commit({})
    with pytest.raises(BuildRefused):
        build.publish()
    with pytest.raises(BuildRefused):
        build.publish(allow_shrink=True)  # an empty build is never published
    build.abort(discard=True)
    assert engine.stats().build == live and pmcids(engine.search_papers(plan("Dl"))) == ["PMC100001"]


def test_a_much_smaller_build_needs_allow_shrink(engine: Engine):
    build = engine.open_build("one paper", resume=False)
    build.add(PAPERS[0], split_passages(PAPERS[0]))
    build.commit({})
    with pytest.raises(BuildRefused):
        build.publish()
    assert engine.stats().papers == len(PAPERS)
    build.publish(allow_shrink=True)
    assert engine.stats().papers == 1 and engine.stats().build == build.id


def test_abort_keeps_the_live_build_and_a_new_build_can_start(engine: Engine):
    live = engine.stats().build
    build = engine.open_build("aborted", resume=False)
    build.add(PAPERS[3], split_passages(PAPERS[3]))
    build.commit({"consumed": 1})
    build.abort(discard=True)
    assert engine.stats().build == live and engine.has_index()
    assert publish(engine, PAPERS, "again") != live


def test_collections_are_independent(new_engine: EngineFactory):
    default, other = new_engine(), new_engine("other")
    publish(other, PAPERS[:1])
    assert other.has_index() and not default.has_index()
    assert other.stats().papers == 1


# ---- terms -----------------------------------------------------------------------------------------------------------
TERMS = [
    Term(id="GO:0007219", ontology="go", name="Notch signaling pathway", aspect="P", alt_ids=["GO:0007220"],
         synonyms=[Synonym(text="N signaling pathway", scope="EXACT")], definition="A series of molecular signals."),
    Term(id="GO:0045893", ontology="go", name="positive regulation of gene expression", aspect="P",
         synonyms=[Synonym(text="upregulation of gene expression", scope="EXACT")]),
    Term(id="GO:0010629", ontology="go", name="negative regulation of gene expression", aspect="P"),
    Term(id="GO:0005634", ontology="go", name="nucleus", aspect="C", synonyms=[Synonym(text="cell nucleus",
                                                                                          scope="EXACT")]),
    Term(id="GO:0000001", ontology="go", name="mitochondrion inheritance", aspect="P", obsolete=True),
    Term(id="GO:0003700", ontology="go", name="DNA-binding transcription factor activity", aspect="F",
         synonyms=[Synonym(text="transcription factor", scope="BROAD")]),
]


@pytest.fixture
def term_engine(new_engine: EngineFactory) -> Engine:
    eng = new_engine()
    assert eng.write_terms("go", TERMS) == len(TERMS)
    return eng


def ids(hits) -> list[str]:
    return [h.id for h in hits]


def test_terms_replace_as_a_whole_and_count(term_engine: Engine):
    assert term_engine.write_terms("go", TERMS[:3]) == 3
    assert term_engine.stats().terms == {"go": 3}
    assert ids(term_engine.search_terms("go", "nucleus")) == []


def test_term_search_by_name_synonym_and_id(term_engine: Engine):
    assert ids(term_engine.search_terms("go", "Notch signaling pathway"))[0] == "GO:0007219"
    hit = term_engine.search_terms("go", "cell nucleus")[0]
    assert hit.id == "GO:0005634" and hit.matched_synonym == "cell nucleus" and hit.aspect == "C"
    assert ids(term_engine.search_terms("go", "GO:0007220")) == ["GO:0007219"]   # an alt id finds its term
    assert term_engine.search_terms("go", "-- ;") == []   # no token: nothing can match


def test_term_search_reads_go_naming_conventions(term_engine: Engine):
    """'up-regulation of X' is searched as 'positive regulation of X' too, in every engine."""
    assert ids(term_engine.search_terms("go", "up-regulation of gene expression"))[0] == "GO:0045893"
    assert ids(term_engine.search_terms("go", "inhibition of gene expression"))[0] == "GO:0010629"
    assert ids(term_engine.search_terms("go", "Notch signalling"))[0] == "GO:0007219"


def test_term_search_filters_hidden_aspect_and_obsolete(term_engine: Engine):
    assert "GO:0007219" not in ids(term_engine.search_terms("go", "signaling", exclude_ids={"GO:0007219"}))
    assert all(h.aspect == "F" for h in term_engine.search_terms("go", "transcription factor", aspect="F"))
    assert ids(term_engine.search_terms("go", "mitochondrion inheritance")) == []
    hits = term_engine.search_terms("go", "mitochondrion inheritance", include_obsolete=True)
    assert ids(hits) == ["GO:0000001"] and hits[0].obsolete
    assert ids(term_engine.search_terms("go", "GO:0000001")) == ["GO:0000001"]  # an id query finds it, flagged
    hidden = term_engine.search_terms("go", "regulation of gene expression", limit=1, exclude_ids={"GO:0045893"})
    assert ids(hidden) == ["GO:0010629"]  # `limit` hits come back whatever is hidden
