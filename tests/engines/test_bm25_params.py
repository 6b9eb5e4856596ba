"""BM25 parameters per collection (#16): field weights change ranking in both engines as configured (from the next
build: they are how many times each field is written into the papers' one ``text`` field), a cluster build's indices
carry the collection's k1/b, the embedded engine refuses k1/b it cannot apply, validation errors are one line, and
``explain`` and ``/v1/stats`` report the parameters in force."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from search.core.config import CollectionSettings, Settings, load_settings
from search.core.errors import FlysiftError
from search.core.models import Paper
from search.engines import Engine, open_engine
from search.retrieval.planner import plan
from search.retrieval.service import SearchService
from search.text.passages import split_passages

from helpers import ClusterNode

#: "wingless" in one paper's title, in the other's abstract: the title/abstract weights decide which comes first
IN_TITLE = Paper(pmcid="PMC200001", title="Wingless signalling", abstract="A study of cell growth in the embryo.")
IN_ABSTRACT = Paper(pmcid="PMC200002", title="Cell growth in the embryo", abstract="A study of wingless signalling.")
OTHER = Paper(pmcid="PMC200003", title="Eye disc patterning", abstract="Photoreceptor cells differentiate.")
PAPERS = [IN_TITLE, IN_ABSTRACT, OTHER]

TITLE_HEAVY = {"title": 5, "abstract": 1}
ABSTRACT_HEAVY = {"title": 1, "abstract": 5}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FLYSIFT_CONFIG", "FLYSIFT_COLLECTIONS", "FLYSIFT_CLUSTER_URL", "FLYSIFT_ENGINE"):
        monkeypatch.delenv(name, raising=False)


def _tables(**collections: dict) -> dict[str, CollectionSettings]:
    """``collections`` as validated settings objects (``model_copy`` of cluster settings does not validate)."""
    return {name: CollectionSettings.model_validate(c) for name, c in collections.items()}


def _first(engine: Engine, text: str = "wingless") -> str:
    return engine.search_papers(plan(text)).hits[0].pmcid


def _publish(engine: Engine, papers: list[Paper], fingerprint: str = "bm25") -> str:
    build = engine.open_build(fingerprint, resume=False)
    for p in papers:
        build.add(p, split_passages(p))
    build.commit({})
    build.publish()
    return build.id


# ---- configuration -------------------------------------------------------------------------------------------------
def test_a_collection_table_sets_its_parameters_and_the_rest_keep_the_defaults(tmp_path, monkeypatch):
    path = tmp_path / "flysift.toml"
    path.write_text("[collections.beir-med]\nfield_weights = {title = 1, abstract = 4}\n"
                    "[collections.default]\nbm25_k1 = 1.2\n")
    monkeypatch.setenv("FLYSIFT_CONFIG", str(path))
    s = load_settings()
    assert s.bm25("beir-med").field_weights == {"title": 1.0, "abstract": 4.0, "body": 1.0}
    assert s.bm25("default").model_dump() == {"k1": 1.2, "b": 0.75,
                                              "field_weights": {"title": 2.0, "abstract": 1.0, "body": 1.0}}
    assert s.bm25("beir-med").repeats() == {"title": 1, "abstract": 4, "body": 1}
    assert s.bm25("unconfigured") == s.bm25("default")


@pytest.mark.parametrize(("table", "expected"), [
    ({"m": {"field_weights": {"titel": 2}}},
     "unknown key collections.m.field_weights.titel; valid: abstract, body, title"),
    ({"m": {"k1": 0.9}}, "unknown key collections.m.k1; valid: bm25_b, bm25_k1, field_weights"),
    ({"m": {"bm25_k1": 11}}, "collections.m.bm25_k1=11: Input should be less than or equal to 10"),
    ({"m": {"bm25_b": -0.1}}, "collections.m.bm25_b=-0.1: Input should be greater than or equal to 0"),
    ({"m": {"bm25_b": float("nan")}}, "collections.m.bm25_b=nan: Input should be a finite number"),
    ({"m": {"field_weights": {"title": 0}}},
     "collections.m.field_weights.title=0: Input should be greater than or equal to 1"),
    ({"m": {"field_weights": {"title": 6}}},
     "collections.m.field_weights.title=6: Input should be less than or equal to 5"),
    ({"m": {"field_weights": {"title": 1.5}}},    # a repetition count: whole numbers only
     "collections.m.field_weights.title=1.5: Input should be a valid integer"),
    ({"m": {"field_weights": {"body": float("inf")}}}, "collections.m.field_weights.body=inf: Input should be a"),
    ({"m": {"field_weights": {"title": True}}}, "collections.m.field_weights.title=True: Input should be a valid"),
    ({"m": {"field_weights": {"title": "3"}}},
     "collections.m.field_weights.title='3': Input should be a valid integer"),
    ({"../etc": {}}, "collection name '../etc' is not"),
])
def test_refused_parameters_are_one_line_naming_the_key(table, expected):
    with pytest.raises(FlysiftError) as e:
        load_settings(collections=table, cluster_url="http://127.0.0.1:1")
    assert e.value.code == "config_error" and "\n" not in e.value.message
    assert expected in e.value.message, e.value.message


def test_an_unknown_key_in_the_file_names_the_file(tmp_path, monkeypatch):
    path = tmp_path / "flysift.toml"
    path.write_text("[collections.med]\nfield_weight = {title = 2}\n")
    monkeypatch.setenv("FLYSIFT_CONFIG", str(path))
    with pytest.raises(FlysiftError) as e:
        load_settings()
    assert f"unknown key collections.med.field_weight (in {path}); valid: bm25_b, bm25_k1, field_weights" \
        in e.value.message


@pytest.mark.parametrize("table", [{"bm25_k1": 0.9}, {"bm25_b": 0.4}, {"bm25_k1": 0.9, "bm25_b": 0.4}])
def test_the_embedded_engine_refuses_k1_b_it_cannot_apply_at_startup(tmp_path, monkeypatch, table):
    from search.cli.main import main

    monkeypatch.setenv("FLYSIFT_COLLECTIONS", json.dumps({"beir-med": table}))
    result = CliRunner().invoke(main, ["stats", "--data-dir", str(tmp_path)])   # serve loads settings alike
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and "Traceback" not in result.output and len(lines) == 1, result.output
    assert lines[0].startswith("error [config_error]: invalid setting collections.beir-med: ")
    assert "embedded engine (tantivy) fixes BM25 at k1=1.2, b=0.75" in lines[0]
    assert "Remove bm25_k1/bm25_b" in lines[0] and "cluster engine" in lines[0]
    # tantivy's own values are not a change; the cluster engine takes any
    load_settings(collections={"beir-med": {"bm25_k1": 1.2, "bm25_b": 0.75}})
    assert load_settings(collections={"beir-med": table}, cluster_url="http://127.0.0.1:1").bm25("beir-med").k1 \
        == table.get("bm25_k1", 1.2)


# ---- embedded engine -----------------------------------------------------------------------------------------------
def _embedded(data_dir: Path, collection: str = "w", **tables: dict) -> Engine:
    return open_engine(Settings(data_dir=data_dir, collections=_tables(**tables)), collection=collection)


def test_embedded_field_weights_change_ranking_as_configured(tmp_path):
    title = _embedded(tmp_path / "t", w={"field_weights": TITLE_HEAVY})
    abstract = _embedded(tmp_path / "a", w={"field_weights": ABSTRACT_HEAVY})
    other = _embedded(tmp_path / "o", other={"field_weights": ABSTRACT_HEAVY})
    for engine in (title, abstract, other):
        _publish(engine, PAPERS)
    assert _first(title) == IN_TITLE.pmcid and _first(abstract) == IN_ABSTRACT.pmcid
    assert _first(other) == IN_TITLE.pmcid          # another collection's table does not apply (default: title 2)


def test_embedded_weights_apply_from_the_next_build_and_are_reported_as_written(tmp_path):
    """The weights are in the index: a configuration change alone neither changes the ranking nor what is
    reported; the next build writes the new weights."""
    _publish(_embedded(tmp_path, w={"field_weights": TITLE_HEAVY}), PAPERS)
    changed = _embedded(tmp_path, w={"field_weights": ABSTRACT_HEAVY})
    assert _first(changed) == IN_TITLE.pmcid
    assert changed.bm25_parameters()["field_weights"] == {"title": 5.0, "abstract": 1.0, "body": 1.0}
    # stats say that the configuration is not in force yet, and what the next build will write
    assert changed.stats().bm25 == {"k1": 1.2, "b": 0.75, "field_weights": {"title": 5.0, "abstract": 1.0, "body": 1.0},
                                    "next_build": {"field_weights": {"title": 1.0, "abstract": 5.0, "body": 1.0}}}
    _publish(changed, PAPERS, fingerprint="again")
    assert _first(changed) == IN_ABSTRACT.pmcid
    assert changed.bm25_parameters()["field_weights"] == {"title": 1.0, "abstract": 5.0, "body": 1.0}
    assert "next_build" not in changed.stats().bm25


def test_an_embedded_build_is_not_resumed_under_other_weights(tmp_path):
    first = _embedded(tmp_path, w={"field_weights": TITLE_HEAVY}).open_build("same-input")
    first.add(IN_TITLE, split_passages(IN_TITLE))
    first.commit({"consumed": 1})
    first.abort()
    again = _embedded(tmp_path, w={"field_weights": TITLE_HEAVY}).open_build("same-input")
    assert again.id == first.id and again.state == {"consumed": 1}     # same weights: resumed
    again.abort()
    other = _embedded(tmp_path, w={"field_weights": ABSTRACT_HEAVY}).open_build("same-input")
    assert other.id != first.id and other.state == {}                   # papers of two weightings never mix
    other.abort(discard=True)


def test_explain_and_stats_report_the_parameters_in_force(tmp_path):
    settings = Settings(data_dir=tmp_path, collections=_tables(w={"field_weights": ABSTRACT_HEAVY}))
    _publish(open_engine(settings, collection="w"), PAPERS)
    svc = SearchService(settings)
    papers = svc.search_papers("wingless", collection="w", explain_plan=True)
    assert papers.hits[0].pmcid == IN_ABSTRACT.pmcid
    assert papers.query["explain"]["bm25"] == {"k1": 1.2, "b": 0.75,
                                               "field_weights": {"title": 1.0, "abstract": 5.0, "body": 1.0}}
    passages = svc.search_passages("wingless", collection="w", explain_plan=True)
    assert passages.query["explain"]["bm25"] == {"k1": 1.2, "b": 0.75, "field_weights": {"text": 1.0}}
    from search.api.app import create_app

    with TestClient(create_app(settings)) as http:
        stats = http.get("/v1/stats", params={"collection": "w"}).json()
        default = http.get("/v1/stats").json()
    assert stats["bm25"] == papers.query["explain"]["bm25"] and stats["papers"] == 3
    assert default["bm25"]["field_weights"] == {"title": 2.0, "abstract": 1.0, "body": 1.0}


# ---- cluster engine ------------------------------------------------------------------------------------------------
def _cluster(settings: Settings, **collections: dict) -> Engine:
    return open_engine(settings.model_copy(update={"collections": _tables(**collections)}))


@pytest.mark.cluster
def test_cluster_field_weights_change_ranking_as_configured(cluster_settings):
    title = _cluster(cluster_settings, default={"field_weights": TITLE_HEAVY})
    _publish(title, PAPERS)
    assert _first(title) == IN_TITLE.pmcid
    assert title.bm25_parameters()["field_weights"] == {"title": 5.0, "abstract": 1.0, "body": 1.0}
    # from the next build: the published index keeps the weights it was written with
    abstract = _cluster(cluster_settings, default={"field_weights": ABSTRACT_HEAVY})
    assert _first(abstract) == IN_TITLE.pmcid and abstract.bm25_parameters() == title.bm25_parameters()
    _publish(abstract, PAPERS, fingerprint="again")
    assert _first(abstract) == IN_ABSTRACT.pmcid
    assert abstract.bm25_parameters()["field_weights"] == {"title": 1.0, "abstract": 5.0, "body": 1.0}
    # snippets still come from the fields that hold the words, though the query searches ``text``
    hit = abstract.search_papers(plan("wingless"), snippets=True).hits[0]
    assert [s.field for s in hit.snippets] == ["abstract", "PMC200002:0:0"] and hit.snippets[0].highlights


@pytest.mark.cluster
def test_cluster_build_is_not_resumed_under_other_weights(cluster_settings):
    first = _cluster(cluster_settings, default={"field_weights": TITLE_HEAVY}).open_build("same-input")
    first.add(IN_TITLE, split_passages(IN_TITLE))
    first.commit({"consumed": 1})
    again = _cluster(cluster_settings, default={"field_weights": TITLE_HEAVY}).open_build("same-input")
    assert again.id == first.id
    other = _cluster(cluster_settings, default={"field_weights": ABSTRACT_HEAVY}).open_build("same-input")
    assert other.id != first.id


@pytest.mark.cluster
def test_cluster_build_indices_carry_the_collections_k1_b(cluster_settings, cluster_node: ClusterNode):
    engine = _cluster(cluster_settings, default={"bm25_k1": 0.9, "bm25_b": 0.4})
    build = _publish(engine, PAPERS)
    prefix = cluster_settings.cluster_index_prefix
    for kind in ("papers", "passages"):
        index = f"{prefix}-{kind}-{build}"
        sim = cluster_node.call("GET", f"/{index}/_settings")[index]["settings"]["index"]["similarity"]["default"]
        assert (sim["type"], float(sim["k1"]), float(sim["b"])) == ("BM25", 0.9, 0.4)
    report = {"k1": 0.9, "b": 0.4, "field_weights": {"title": 2.0, "abstract": 1.0, "body": 1.0}}
    assert engine.bm25_parameters() == report and engine.stats().bm25 == report
    # the published index keeps its k1/b until a new build: what is in force, not what is configured now
    later = _cluster(cluster_settings, default={"bm25_k1": 2.0, "bm25_b": 1.0})
    assert later.bm25_parameters("passages") == {"k1": 0.9, "b": 0.4, "field_weights": {"text": 1.0}}
    assert later.stats().bm25 == {**report, "next_build": {"k1": 2.0, "b": 1.0}}
    _publish(later, PAPERS, fingerprint="again")
    assert later.bm25_parameters()["k1"] == 2.0 and later.bm25_parameters()["b"] == 1.0


@pytest.mark.cluster
def test_cluster_b_changes_ranking(cluster_settings):
    """b = 1 normalises by length (the short abstract wins), b = 0 does not (two mentions beat one)."""
    short = Paper(pmcid="PMC300001", title="A", abstract="wingless in wing")
    long = Paper(pmcid="PMC300002", title="B", abstract="wingless wingless " + "cell " * 60)
    for b, first in ((1.0, short.pmcid), (0.0, long.pmcid)):
        engine = _cluster(cluster_settings, default={"bm25_b": b})
        _publish(engine, [short, long, OTHER], fingerprint=f"b{b}")
        assert _first(engine) == first, b


@pytest.mark.cluster
def test_cluster_build_is_not_resumed_under_other_k1_b(cluster_settings):
    first = _cluster(cluster_settings, default={"bm25_k1": 0.9}).open_build("same-input")
    first.add(IN_TITLE, split_passages(IN_TITLE))
    first.commit({"consumed": 1})
    again = _cluster(cluster_settings, default={"bm25_k1": 0.9}).open_build("same-input")
    assert again.id == first.id                                   # same parameters: resumed
    other = _cluster(cluster_settings, default={"bm25_k1": 1.5}).open_build("same-input")
    assert other.id != first.id                                   # k1 cannot change on an open index: a new build


def test_engines_take_only_their_collections_weights(tmp_path: Path):
    """The factory hands each collection its own table (a name, never a path, picks it)."""
    settings = Settings(data_dir=tmp_path, collections=_tables(a={"field_weights": {"body": 5}}))
    assert open_engine(settings, collection="a").bm25_parameters()["field_weights"]["body"] == 5.0
    assert open_engine(settings, collection="b").bm25_parameters()["field_weights"]["body"] == 1.0
