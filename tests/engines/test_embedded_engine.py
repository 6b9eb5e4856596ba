"""The embedded engine: two-view analysis, symbol-aware planning, filters, snippets, reload on publish."""

from __future__ import annotations

from search.core.query import Filters
from search.engines.embedded.engine import EmbeddedEngine
from search.retrieval.planner import plan
from search.text.analysis import is_symbol_like, symbol_tokens

from helpers import PAPERS, build_index


def pmcids(res):
    return [h.pmcid for h in res.hits]


def test_symbol_tokens_keep_fly_symbols_whole():
    text = "(Su(H)), E(spl)m8-HLH; l(2)gl) abd-A. Df(3L)ED4543 α-Cat dl Dl N."
    assert symbol_tokens(text) == ["Su(H)", "E(spl)m8-HLH", "l(2)gl", "abd-A", "Df(3L)ED4543", "α-Cat", "dl", "Dl", "N"]


def test_planner_reads_symbols_and_words():
    assert is_symbol_like("Dl") and is_symbol_like("N") and is_symbol_like("Su(H)") and is_symbol_like("GAL4")
    assert not is_symbol_like("dorsal") and not is_symbol_like("Notch") and not is_symbol_like("dl")
    q = plan('Dl "wing margin" dorsal')
    views = [(c.text, c.view, c.phrase) for c in q.clauses]
    assert ("wing margin", "word", True) in views and ("Dl", "symbol", False) in views
    assert ("dorsal", "word", False) in views


def test_Dl_does_not_retrieve_papers_that_only_say_dl(data_dir):
    eng = EmbeddedEngine(data_dir)
    assert pmcids(eng.search_papers(plan("Dl"))) == ["PMC100001"]
    # the lower-case query matches both spellings, exact-case mentions first
    assert pmcids(eng.search_papers(plan("dl")))[0] == "PMC100002"
    assert set(pmcids(eng.search_papers(plan("dl")))) == {"PMC100001", "PMC100002"}


def test_symbols_found_when_followed_by_punctuation(data_dir):
    eng = EmbeddedEngine(data_dir)
    # "Su(H)," "Su(H);" "(Su(H))." all occur in the fixture
    assert set(pmcids(eng.search_papers(plan("Su(H)")))) == {"PMC100001", "PMC100003"}
    for sym, pmcid in [("E(spl)m8-HLH", "PMC100001"), ("l(2)gl", "PMC100003"), ("abd-A", "PMC100003"),
                       ("Df(3L)ED4543", "PMC100003"), ("α-Cat", "PMC100003")]:
        assert pmcids(eng.search_papers(plan(sym))) == [pmcid], sym


def test_field_boosts_rank_title_above_body(data_dir):
    eng = EmbeddedEngine(data_dir)
    # "wing" is in the title of PMC100004 and PMC100001 (and body of others)
    top = pmcids(eng.search_papers(plan("disc")))
    assert top[0] == "PMC100004"


def test_phrase_and_filters(data_dir):
    eng = EmbeddedEngine(data_dir)
    assert pmcids(eng.search_papers(plan('"morphogen gradient"'))) == ["PMC100002"]
    assert pmcids(eng.search_papers(plan('"gradient morphogen"'))) == []
    assert pmcids(eng.search_papers(plan("wing", filters=Filters(year_from=2010)))) == ["PMC100004"]
    assert pmcids(eng.search_papers(plan("Su(H)", filters=Filters(section_types=["DISCUSS"])))) == ["PMC100003"]
    assert pmcids(eng.search_papers(plan("wing", filters=Filters(pmcids=["PMC100001"])))) == ["PMC100001"]


def test_snippets_highlight_exact_case_only(data_dir):
    eng = EmbeddedEngine(data_dir)
    hit = eng.search_papers(plan("Dl"), snippets=True).hits[0]
    for snip in hit.snippets:
        assert all(snip.text[s:e] == "Dl" for s, e in snip.highlights)
    p = eng.search_passages(plan("Su(H)")).hits[0]
    s, e = p.snippet.highlights[0]
    assert p.snippet.text[s:e] == "Su(H)"


def test_matched_names_reported(data_dir):
    eng = EmbeddedEngine(data_dir)
    res = eng.search_papers(plan("binding", expansions=["Su(H)", "Suppressor of Hairless"]))
    by_id = {h.pmcid: h.matched for h in res.hits}
    assert set(by_id["PMC100003"]) == {"Su(H)", "Suppressor of Hairless"}
    assert by_id["PMC100001"] == ["Su(H)"]


def test_passages_have_stable_ids_and_offsets(data_dir):
    eng = EmbeddedEngine(data_dir)
    paper = eng.get_paper("PMC100003")
    hit = eng.search_passages(plan("l(2)gl")).hits[0]
    assert hit.passage_id == "PMC100003:1:1"
    para = paper.sections[hit.section_index - 1].paragraphs[hit.paragraph_index]
    assert para[hit.start:hit.end] == hit.text


def test_reader_picks_up_new_build_without_restart(tmp_path):
    d = tmp_path / "data"
    build_index(d, PAPERS[:1])
    eng = EmbeddedEngine(d)
    assert eng.stats().papers == 1
    build_index(d, PAPERS)
    assert eng.stats().papers == len(PAPERS)
    assert pmcids(eng.search_papers(plan("dpp"))) == ["PMC100004"]


def test_publish_keeps_the_two_newest_builds(tmp_path):
    d = tmp_path / "data"
    builds = []
    for n in (1, 2, 3):
        builds.append(build_index(d, PAPERS[:n]).stats().build)
    kept = {p.name for p in (d / "collections" / "default" / "builds").iterdir()}
    assert kept == set(builds[-2:])
    assert EmbeddedEngine(d).stats().papers == 3
