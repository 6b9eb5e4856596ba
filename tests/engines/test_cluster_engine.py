"""The cluster engine against a real node: analysis equal to the embedded one, the same search behaviour,
versioned builds behind atomic aliases (also when a build is killed), resumable bulk loads, per-document rejects,
retries on 429, mapping conflicts that name the field, search_after exports and 503 when the cluster is down."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from search.core.config import Settings
from search.core.errors import FlysiftError, IndexMissing, LimitExceeded, Unavailable
from search.core.models import Paper, Section, Synonym, Term
from search.core.query import Filters
from search.engines import open_engine
from search.engines.cluster.engine import ClusterEngine, analysis_settings
from search.retrieval.planner import plan
from search.text import analysis
from search.text.analysis import analyze
from search.text.passages import split_passages

from helpers import PAPERS, ClusterNode, needs_extra

REPO = Path(__file__).resolve().parents[2]


def pmcids(res):
    return [h.pmcid for h in res.hits]


def publish(engine: ClusterEngine, papers: list[Paper], fingerprint: str = "fixture") -> str:
    build = engine.open_build(fingerprint, resume=False)
    for p in papers:
        build.add(p, split_passages(p))
    build.commit({"consumed": len(papers)})
    build.publish()
    return build.id


@pytest.fixture
def engine(cluster_settings: Settings) -> ClusterEngine:
    eng = ClusterEngine(cluster_settings)
    publish(eng, PAPERS)
    return eng


# ---- without a node ------------------------------------------------------------------------------------------------
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_extra("cluster")
@pytest.mark.parametrize("flavour", ["opensearch", "elasticsearch"])
def test_cluster_down_is_503_with_retry_after_and_a_clear_message(tmp_path: Path, flavour: str):
    settings = Settings(data_dir=tmp_path, cluster_url=f"http://127.0.0.1:{_closed_port()}", cluster_timeout_s=2,
                        cluster_flavour=flavour, cluster_username="u", cluster_password="p")
    engine = open_engine(settings)
    assert isinstance(engine, ClusterEngine)
    for call in (lambda: engine.search_papers(plan("Dl")), lambda: engine.get_paper("PMC1"), engine.stats,
                 lambda: engine.open_build("x")):
        with pytest.raises(Unavailable) as e:
            call()
        assert e.value.status == 503 and e.value.headers["Retry-After"].isdigit()
        assert "cannot be reached" in e.value.message and settings.cluster_url in e.value.message


@needs_extra("cluster")
def test_api_answers_503_with_retry_after_when_the_cluster_is_down(tmp_path: Path):
    from fastapi.testclient import TestClient

    from search.api.app import create_app

    settings = Settings(data_dir=tmp_path, cluster_url=f"http://127.0.0.1:{_closed_port()}", cluster_timeout_s=2)
    with TestClient(create_app(settings)) as client:
        r = client.post("/v1/papers/search", json={"query": "Dl"})
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"].isdigit() and r.json()["error"]["code"] == "unavailable"


# ---- analysis ------------------------------------------------------------------------------------------------------
TRICKY = ["(Su(H)), E(spl)m8-HLH; l(2)gl) abd-A. Df(3L)ED4543 α-Cat/alpha-Cat dl Dl N.",
          "GAL4/UAS-GFP: N+ 3.5 kb; x.y. end- [Dl] {wg}, dpp's Ubx-Gal4 so-called 'Notch' Mad:Med",
          "Running flies were mutated; ovaries OVARIES Ovarian " + "x" * 70 + " ß Straße naïve"]


@pytest.mark.cluster
def test_cluster_analyzers_give_the_embedded_tokens(cluster_node: ClusterNode, cluster_settings: Settings):
    index = f"{cluster_settings.cluster_index_prefix}-analysis"
    cluster_node.call("PUT", f"/{index}", {"settings": {"analysis": analysis_settings()}})
    for text in TRICKY:
        for view, analyzer in (("word", analysis.WORD_ANALYZER), ("symbol", analysis.SYMBOL_ANALYZER)):
            res = cluster_node.call("POST", f"/{index}/_analyze", {"analyzer": analyzer, "text": text})
            assert [t["token"] for t in res["tokens"]] == analyze(view, text), (view, text)
        sym = cluster_node.call("POST", f"/{index}/_analyze", {"tokenizer": "fs_symbol_tok", "text": text})
        assert [t["token"] for t in sym["tokens"]] == analysis.symbol_tokens(text)


# ---- search behaviour (the embedded engine's tests, on the cluster) ------------------------------------------------
@pytest.mark.cluster
def test_Dl_does_not_retrieve_papers_that_only_say_dl(engine: ClusterEngine):
    assert pmcids(engine.search_papers(plan("Dl"))) == ["PMC100001"]
    assert pmcids(engine.search_papers(plan("dl")))[0] == "PMC100002"
    assert set(pmcids(engine.search_papers(plan("dl")))) == {"PMC100001", "PMC100002"}


@pytest.mark.cluster
def test_symbols_found_when_followed_by_punctuation(engine: ClusterEngine):
    assert set(pmcids(engine.search_papers(plan("Su(H)")))) == {"PMC100001", "PMC100003"}
    for sym, pmcid in [("E(spl)m8-HLH", "PMC100001"), ("l(2)gl", "PMC100003"), ("abd-A", "PMC100003"),
                       ("Df(3L)ED4543", "PMC100003"), ("α-Cat", "PMC100003")]:
        assert pmcids(engine.search_papers(plan(sym))) == [pmcid], sym


@pytest.mark.cluster
def test_phrases_filters_and_field_boosts(engine: ClusterEngine):
    assert pmcids(engine.search_papers(plan("disc")))[0] == "PMC100004"
    assert pmcids(engine.search_papers(plan('"morphogen gradient"'))) == ["PMC100002"]
    assert pmcids(engine.search_papers(plan('"gradient morphogen"'))) == []
    assert pmcids(engine.search_papers(plan("wing", filters=Filters(year_from=2010)))) == ["PMC100004"]
    assert pmcids(engine.search_papers(plan("wing", filters=Filters(year_to=2001)))) == ["PMC100001"]
    assert pmcids(engine.search_papers(plan("Su(H)", filters=Filters(section_types=["DISCUSS"])))) == ["PMC100003"]
    assert pmcids(engine.search_papers(plan("wing", filters=Filters(pmcids=["PMC100001"])))) == ["PMC100001"]
    hits = engine.search_passages(plan("Su(H)", filters=Filters(section_types=["RESULTS"]))).hits
    assert [h.passage_id for h in hits] == ["PMC100003:1:0"]
    assert engine.search_papers(plan("")).total == 0


@pytest.mark.cluster
def test_snippets_highlight_exact_case_only_with_offsets(engine: ClusterEngine):
    hit = engine.search_papers(plan("Dl"), snippets=True).hits[0]
    assert hit.snippets and all(s.highlights for s in hit.snippets)
    for snip in hit.snippets:
        assert all(snip.text[s:e] == "Dl" for s, e in snip.highlights)
    p = engine.search_passages(plan("Su(H)")).hits[0]
    s, e = p.snippet.highlights[0]
    assert p.snippet.text[s:e] == "Su(H)"
    word = engine.search_passages(plan("examined mutants")).hits[0]
    assert {word.snippet.text[s:e] for s, e in word.snippet.highlights} == {"Mutants", "examined"}
    assert engine.search_papers(plan("Dl"), snippets=False).hits[0].snippets == []


@pytest.mark.cluster
def test_matched_names_reported(engine: ClusterEngine):
    res = engine.search_papers(plan("binding", expansions=["Su(H)", "Suppressor of Hairless"]))
    by_id = {h.pmcid: h.matched for h in res.hits}
    assert by_id["PMC100003"] == ["Su(H)", "Suppressor of Hairless"]
    assert by_id["PMC100001"] == ["Su(H)"]


@pytest.mark.cluster
def test_papers_round_trip_and_passages_keep_ids_and_offsets(engine: ClusterEngine):
    for p in PAPERS:
        assert engine.get_paper(p.pmcid) == p
    assert engine.get_paper("PMC999") is None and engine.get_paper("PMC/../x?y") is None
    paper = engine.get_paper("PMC100003")
    hit = engine.search_passages(plan("l(2)gl")).hits[0]
    assert hit.passage_id == "PMC100003:1:1"
    assert paper.sections[hit.section_index - 1].paragraphs[hit.paragraph_index][hit.start:hit.end] == hit.text
    stats = engine.stats()
    assert (stats.papers, stats.passages) == (len(PAPERS), sum(len(split_passages(p)) for p in PAPERS))
    assert stats.index_bytes > 0 and stats.engine == "cluster"


@pytest.mark.cluster
def test_no_index_yet_is_index_missing(cluster_settings: Settings):
    engine = ClusterEngine(cluster_settings)
    with pytest.raises(IndexMissing):
        engine.search_papers(plan("Dl"))
    with pytest.raises(IndexMissing):
        engine.get_paper("PMC100001")
    assert engine.stats().papers == 0


# ---- builds, aliases, bulk -----------------------------------------------------------------------------------------
@pytest.mark.cluster
def test_publish_swaps_aliases_and_keeps_configured_versions(cluster_node: ClusterNode, cluster_settings: Settings):
    engine = ClusterEngine(cluster_settings)
    prefix = cluster_settings.cluster_index_prefix
    ids = [publish(engine, PAPERS[:n], fingerprint=f"v{n}") for n in (1, 2, 3)]
    assert engine.stats().papers == 3 and engine.stats().build == ids[-1]
    assert list(cluster_node.call("GET", f"/_alias/{prefix}-papers")) == [f"{prefix}-papers-{ids[-1]}"]
    assert list(cluster_node.call("GET", f"/_alias/{prefix}-passages")) == [f"{prefix}-passages-{ids[-1]}"]
    keep = cluster_settings.cluster_keep_versions
    # the newest versions are kept (version ids made in the same second do not sort by age, hence sets)
    assert set(cluster_node.indices(f"{prefix}-papers-2*")) == {f"{prefix}-papers-{i}" for i in ids[-keep:]}
    assert set(cluster_node.indices(f"{prefix}-passages-2*")) == {f"{prefix}-passages-{i}" for i in ids[-keep:]}
    settings = cluster_node.call("GET", f"/{prefix}-papers-{ids[-1]}/_settings")
    assert "refresh_interval" not in settings[f"{prefix}-papers-{ids[-1]}"]["settings"]["index"]


@pytest.mark.cluster
def test_refresh_is_off_during_the_load(cluster_node: ClusterNode, cluster_settings: Settings):
    engine = ClusterEngine(cluster_settings)
    build = engine.open_build("x", resume=False)
    index = build.papers_index
    assert cluster_node.call("GET", f"/{index}/_settings")[index]["settings"]["index"]["refresh_interval"] == "-1"
    build.abort()


def _loader_script(settings: Settings, n_papers: int, commit_every: int) -> str:
    return f"""
import json
from indexer.synthetic import SyntheticConfig, generate
from search.core.config import Settings
from search.engines.cluster.engine import ClusterEngine
from search.text.passages import split_passages
settings = Settings(cluster_url={settings.cluster_url!r}, cluster_flavour={settings.cluster_flavour!r},
                    cluster_index_prefix={settings.cluster_index_prefix!r})
build = ClusterEngine(settings, chunk_bytes=30_000).open_build("kill-test", resume=True)
done = build.state.get("consumed", 0)
print(json.dumps({{"build": build.id, "resumed_from": done}}), flush=True)
n = 0
for n, paper in enumerate(generate(SyntheticConfig(n_papers={n_papers}, words_per_paper=300, seed=5,
                                                   vocabulary=3000)), start=1):
    if n <= done:
        continue
    build.add(paper, split_passages(paper))
    if n % {commit_every} == 0:
        build.commit({{"consumed": n}})
        print(json.dumps({{"committed": n}}), flush=True)
build.commit({{"consumed": n}})
count = build.count()
build.publish()
print(json.dumps({{"published": count}}), flush=True)
"""


@pytest.mark.cluster
def test_killed_build_is_never_searched_and_resumes_to_the_right_count(cluster_node: ClusterNode,
                                                                         cluster_settings: Settings):
    engine = ClusterEngine(cluster_settings)
    old = publish(engine, PAPERS)
    script = _loader_script(cluster_settings, n_papers=150, commit_every=10)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    first = json.loads(proc.stdout.readline())
    assert first["resumed_from"] == 0
    for line in proc.stdout:
        if json.loads(line).get("committed", 0) >= 60:
            break
    proc.kill()  # SIGKILL midway: no cleanup code runs
    proc.wait()
    half = f"{cluster_settings.cluster_index_prefix}-papers-{first['build']}"
    cluster_node.call("POST", f"/{half}/_refresh")
    assert cluster_node.call("GET", f"/{half}/_count")["count"] >= 60  # the half-built index exists and has data
    # searches through the alias still see the old build, whole
    assert engine.stats().build == old and engine.stats().papers == len(PAPERS)
    assert pmcids(engine.search_papers(plan("Dl"))) == ["PMC100001"]
    # a rerun of the same input resumes the same build from its last commit and ends with every paper
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO, check=True)
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert lines[0]["build"] == first["build"] and lines[0]["resumed_from"] >= 60
    assert lines[-1] == {"published": 150}
    assert engine.stats().build == first["build"] and engine.stats().papers == 150


def _year_paper(pmcid: str, year: int) -> Paper:
    return Paper(pmcid=pmcid, year=year, title=f"Paper {pmcid}", abstract="Wingless signalling in discs.",
                 sections=[Section(type="RESULTS", paragraphs=[f"Paragraph {i} about wg and dpp." for i in range(5)])])


@pytest.mark.cluster
def test_refused_paper_is_rejected_whole_naming_the_field_and_later_chunks_go_on(cluster_settings: Settings):
    engine = ClusterEngine(cluster_settings, chunk_bytes=3_000)
    papers = [_year_paper(f"PMC2{i:05d}", 2000 + i % 20) for i in range(40)]
    papers[17] = _year_paper("PMC200017", 10**12)  # does not fit the integer mapping of `year`
    build = engine.open_build("rejects", resume=False)
    for p in papers:
        build.add(p, split_passages(p))
    build.commit({})
    assert [(r.pmcid, r.field) for r in build.failures] == [("PMC200017", "year")]
    assert "year" in build.failures[0].reason
    assert build.count() == 39
    build.publish()
    assert engine.get_paper("PMC200017") is None and engine.get_paper("PMC200039") is not None
    assert engine.search_passages(plan("wg", filters=Filters(pmcids=["PMC200017"]))).total == 0
    assert engine.stats().passages == 39 * len(split_passages(papers[0]))


@pytest.mark.cluster
def test_bulk_retries_429_until_the_cluster_accepts(cluster_node: ClusterNode, cluster_settings: Settings):
    engine = ClusterEngine(cluster_settings, backoff_s=0.2)
    build = engine.open_build("busy", resume=False)
    block = {"index.blocks.read_only_allow_delete": True}
    cluster_node.call("PUT", f"/{build.papers_index}/_settings", block)  # writes now answer 429
    lifted = threading.Timer(1.5, cluster_node.call, ("PUT", f"/{build.papers_index}/_settings",
                                                      {"index.blocks.read_only_allow_delete": None}))
    lifted.start()
    for p in PAPERS:
        build.add(p, split_passages(p))
    build.commit({"consumed": 4})
    lifted.join()
    assert build.retries >= 1 and build.failures == []
    assert build.count() == len(PAPERS)


@pytest.mark.cluster
def test_bulk_gives_up_with_503_when_429_persists(cluster_node: ClusterNode, cluster_settings: Settings):
    engine = ClusterEngine(cluster_settings, max_retries=2, backoff_s=0.05)
    build = engine.open_build("busy", resume=False)
    cluster_node.call("PUT", f"/{build.papers_index}/_settings", {"index.blocks.read_only_allow_delete": True})
    build.add(PAPERS[0], split_passages(PAPERS[0]))
    with pytest.raises(Unavailable):
        build.commit({"consumed": 1})
    cluster_node.call("PUT", f"/{build.papers_index}/_settings", {"index.blocks.read_only_allow_delete": None})


@pytest.mark.cluster
def test_mapping_conflict_on_resume_names_the_field(cluster_node: ClusterNode, cluster_settings: Settings):
    engine = ClusterEngine(cluster_settings)
    build = engine.open_build("conflict", resume=False)
    build.abort()
    # an older layout of the same build: `year` was a keyword
    index = build.papers_index
    cluster_node.call("DELETE", f"/{index}")
    cluster_node.call("PUT", f"/{index}", {"mappings": {"properties": {"year": {"type": "keyword"}}}})
    with pytest.raises(FlysiftError) as e:
        engine.open_build("conflict", resume=True)
    assert e.value.code == "mapping_conflict" and e.value.details["field"] == "year"
    assert "year" in e.value.message


# ---- export beyond 10,000 hits -------------------------------------------------------------------------------------
@pytest.mark.cluster
def test_export_pages_past_ten_thousand_hits(cluster_settings: Settings):
    engine = ClusterEngine(cluster_settings, chunk_bytes=2_000_000)
    papers = [Paper(pmcid=f"PMC3{i:05d}", year=2020, title=f"Bulk {i}", abstract="wing disc",
                    sections=[Section(type="RESULTS", paragraphs=[f"wing cell {i}.{j}" for j in range(250)])])
              for i in range(41)]
    publish(engine, papers)
    query = plan("wing")
    total = engine.search_passages(query, limit=1).total
    assert total == 41 * 251 > 10_000
    ids = [h.passage_id for h in engine.export_passages(query, batch_size=2000)]
    assert len(ids) == total == len(set(ids))
    assert [h.pmcid for h in engine.export_papers(query, batch_size=7)] == pmcids(engine.search_papers(query, limit=41))
    with pytest.raises(LimitExceeded):
        engine.search_passages(query, limit=10, offset=10_000)


# ---- ontology terms ------------------------------------------------------------------------------------------------
TERMS = [
    Term(id="GO:0005634", ontology="go", name="nucleus", aspect="C", namespace="cellular_component",
         definition="A membrane-bounded organelle containing the chromosomes.",
         synonyms=[Synonym(text="cell nucleus", scope="EXACT")]),
    Term(id="GO:0007219", ontology="go", name="Notch signaling pathway", aspect="P",
         namespace="biological_process", definition="The series of molecular signals initiated by Notch binding.",
         synonyms=[Synonym(text="N signaling pathway", scope="EXACT"),
                   Synonym(text="Notch signalling", scope="RELATED")],
         alt_ids=["GO:0007220"]),
    Term(id="GO:0007224", ontology="go", name="smoothened signaling pathway", aspect="P",
         synonyms=[Synonym(text="hedgehog signaling pathway", scope="NARROW")]),
    Term(id="GO:0000001", ontology="go", name="mitochondrion inheritance", aspect="P", obsolete=True),
    Term(id="GO:0003700", ontology="go", name="DNA-binding transcription factor activity", aspect="F"),
]


@pytest.mark.cluster
def test_terms_rank_as_the_embedded_term_index(cluster_settings: Settings, tmp_path: Path):
    from search.engines.embedded.terms import TermIndex

    cluster, embedded = ClusterEngine(cluster_settings), TermIndex(tmp_path / "emb")
    assert cluster.write_terms("go", TERMS) == embedded.write("go", TERMS) == len(TERMS)
    assert cluster.write_terms("go", TERMS) == len(TERMS)  # replacing keeps one live version
    assert cluster.stats().terms == {"go": len(TERMS)}
    cases = [("signaling pathway", {}), ("Notch signalling", {}), ("nucleus", {}), ("GO:0007220", {}),
             ("hedgehog", {}), ("mitochondrion inheritance", {}), ("mitochondrion", {"include_obsolete": True}),
             ("signaling", {"exclude_ids": {"GO:0007219"}}), ("signaling", {"aspect": "C"}),
             ("transcription factor", {"aspect": "F"}), ("the of", {})]
    for q, kw in cases:
        got = [(h.id, h.matched_synonym, h.obsolete) for h in cluster.search_terms("go", q, **kw)]
        want = [(h.id, h.matched_synonym, h.obsolete) for h in embedded.search("go", q, **kw)]
        assert got == want, (q, kw)
    assert cluster.search_terms("go", "GO:0007220")[0].id == "GO:0007219"
    assert not any(h.obsolete for h in cluster.search_terms("go", "mitochondrion inheritance"))
