"""Papers are scored as one field (#15): a word has one document frequency and one saturation over title, abstract and
body, so a word common in bodies does not score as rare because few titles hold it; repeating the title for its
weight creates no phrase across the repetitions. Both engines."""

from __future__ import annotations

import pytest

from search.core.config import Settings
from search.core.models import Paper, Section
from search.engines import Engine, open_engine
from search.engines.cluster.mappings import _text_field, paper_doc, paper_mapping
from search.retrieval.planner import plan
from search.text.passages import split_passages

from helpers import ClusterNode, build_index

_FILLER = "Cells were imaged and the protein levels quantified in each disc. "


def _paper(n: int, title: str, body: str) -> Paper:
    return Paper(pmcid=f"PMC7000{n:02d}", title=title, abstract="Imaginal disc growth was measured.",
                 sections=[Section(type="RESULTS", paragraphs=[body])])


#: "protein" is in every body but one title; the older name "decapentaplegic protein" is in one body. Scored per
#: field, the title's rare "protein" (weight 3) outranked the body's "decapentaplegic": the kinase paper came first.
TARGET = _paper(1, "Growth of the wing disc", _FILLER * 6 + "The decapentaplegic protein spreads from the stripe.")
KINASE = _paper(2, "Atypical protein kinase C in epithelia", "Cells were imaged and junctions were scored.")
OTHERS = [_paper(n, f"Disc study {n}", _FILLER * 8) for n in range(3, 12)]
REPEATED = _paper(20, "Notch signalling", "Lateral inhibition in the notum.")
CORPUS = [TARGET, KINASE, *OTHERS, REPEATED]


def _check(engine: Engine) -> None:
    hits = engine.search_papers(plan("decapentaplegic protein"), limit=3).hits
    assert hits[0].pmcid == TARGET.pmcid, [h.pmcid for h in hits]
    # the title is written twice (weight 2): as two values, so no phrase runs from its end into its start
    assert engine.search_papers(plan('"signalling notch"')).total == 0
    assert engine.search_papers(plan('"notch signalling"')).hits[0].pmcid == REPEATED.pmcid


def test_embedded_scores_a_paper_as_one_field(tmp_path):
    _check(build_index(tmp_path, CORPUS))


@pytest.mark.cluster
def test_cluster_scores_a_paper_as_one_field(cluster_settings: Settings):
    engine = open_engine(cluster_settings)
    build = engine.open_build("one-field", resume=False)
    for p in CORPUS:
        build.add(p, split_passages(p))
    build.commit({})
    build.publish()
    _check(engine)


@pytest.mark.cluster
def test_cluster_serves_a_per_field_index_then_the_one_field_build_that_replaces_it(cluster_settings: Settings,
                                                                                      cluster_node: ClusterNode):
    """After an upgrade the published per-field index keeps serving (the configured weights as boosts); a process
    that read that layout and meets the one-field build published since searches it at once (read again, retried)."""
    engine = open_engine(cluster_settings)
    legacy = f"{engine.base}-papers-20200101-000000-legacy"   # the papers mapping before ``text``
    props = {**paper_mapping({"title": 1, "abstract": 1, "body": 1})["properties"],
             **{f: _text_field() for f in ("title", "abstract", "body")}}
    del props["text"]
    cluster_node.call("PUT", f"/{legacy}", {"settings": engine._index_settings(),
                                            "mappings": {"dynamic": "strict", "properties": props}})
    for p in CORPUS:
        cluster_node.call("PUT", f"/{legacy}/_doc/{p.pmcid}", paper_doc(p))
    cluster_node.call("POST", f"/{legacy}/_refresh")
    cluster_node.call("POST", "/_aliases", {"actions": [{"add": {"index": legacy, "alias": engine.alias("papers")}}]})

    assert engine.search_papers(plan("decapentaplegic protein")).hits[0].pmcid == KINASE.pmcid   # per field
    # the per-field layout's own defaults while the collection keeps the defaults: its ranking does not change
    assert engine.bm25_parameters()["field_weights"] == {"title": 3.0, "abstract": 2.0, "body": 1.0}
    build = engine.open_build("one-field", resume=False)
    for p in CORPUS:
        build.add(p, split_passages(p))
    build.commit({})
    build.publish()
    _check(engine)   # within the layout's lifetime: the refused per-field query was read again and retried
    assert engine.bm25_parameters()["field_weights"] == {"title": 2.0, "abstract": 1.0, "body": 1.0}


@pytest.mark.cluster
def test_cluster_papers_written_more_than_once_come_back_as_they_went_in(cluster_settings: Settings):
    """Repetitions beyond the first travel in the document's ``text`` (copy_to writes the first): a fetched paper is
    the paper, without them, and the weights it was written with are reported."""
    from search.core.config import CollectionSettings

    table = CollectionSettings.model_validate({"field_weights": {"title": 3, "body": 2}})
    engine = open_engine(cluster_settings.model_copy(update={"collections": {"default": table}}))
    build = engine.open_build("repeated", resume=False)
    for p in CORPUS:
        build.add(p, split_passages(p))
    build.commit({})
    build.publish()
    assert engine.get_paper(TARGET.pmcid) == TARGET
    assert engine.bm25_parameters()["field_weights"] == {"title": 3.0, "abstract": 1.0, "body": 2.0}
    assert engine.search_papers(plan("decapentaplegic protein")).hits[0].pmcid == TARGET.pmcid
