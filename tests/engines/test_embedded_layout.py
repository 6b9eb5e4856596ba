"""The embedded engine's index layout: each text analysed once (pre-analysed fields), passage text kept once (in the
paper store), the per-paper work prepared apart from the writer, writer threads and heap from the machine.

The reference is layout 1 (every field analysed by tantivy from the raw text, each passage's text in its stored doc)
with the papers' one ``text`` field of layout 5, so that scores must be equal; the per-field layout 1 itself is
written here as it was, to show that such builds still open and serve."""

from __future__ import annotations

import json
import pickle
import sqlite3
import zlib
from pathlib import Path

import pytest
import tantivy

from indexer.synthetic import SyntheticConfig, generate
from search.core.models import Paper, Section
from search.core.query import Clause, EngineQuery
from search.engines.embedded import build as embedded
from search.engines.embedded import paper_store
from search.engines.embedded.build import writer_plan
from search.engines.embedded.engine import EmbeddedEngine
from search.engines.embedded.prepare import PaperHead
from search.retrieval.planner import plan
from search.text.analysis import ANALYZERS, SYMBOL_ANALYZER, WORD_ANALYZER
from search.text.passages import split_passages

from helpers import PAPERS, build_index

_SENTENCE = "Cells of the wing pouch proliferate while Dl and Su(H) act at the margin. "
#: an abstract of two paragraphs, and a body paragraph long enough to be cut into pieces, so that fields join the
#: token strings of several passages and phrases run across passage boundaries
LONG = Paper(pmcid="PMC100009", year=2012, journal="Dev Biol", title="Margin signalling by Dl, N and l(2)gl",
             abstract="First part: the dl gradient.\n\nSecond part: α-Cat at junctions.",
             sections=[Section(type="RESULTS", paragraphs=[_SENTENCE * 60, "Closing words on N and n = 3 embryos."]),
                       Section(type="DISCUSS", paragraphs=["   ", "l(2)gl (Su(H)), α-Cat; Dl."])])
QUERIES = ["Dl", "dl", "Su(H)", "N", "l(2)gl", "α-Cat", "abd-A", "E(spl)m8-HLH", "wing", "wing margin", "expression",
           "proliferate pouch", "signalling", '"wing pouch"', '"margin cells of the wing"', '"morphogen gradient"',
           '"the margin. Cells"', "Dl wing", "dorsal closure", "transcription factor", '"transcription factor"']


def _layout1_build(data_dir: Path, papers: list[Paper], one_field: bool = False) -> None:
    """A published build as the engine wrote it before pre-analysed fields (layout 1); with ``one_field``, papers in
    one field as layout 5 writes them (title twice, abstract, body), from the raw text."""
    build = data_dir / "collections" / "default" / "builds" / "20200101T000000-old001"

    def schema(views: list[str], extra) -> tantivy.Schema:
        sb = tantivy.SchemaBuilder()
        extra(sb)
        for name in views:
            sb.add_text_field(name + "_w", stored=False, tokenizer_name=WORD_ANALYZER)
            sb.add_text_field(name + "_s", stored=False, tokenizer_name=SYMBOL_ANALYZER)
        return sb.build()

    def paper_fields(sb: tantivy.SchemaBuilder) -> None:
        sb.add_text_field("pmcid", stored=True, tokenizer_name="raw")
        sb.add_integer_field("year", stored=False, indexed=True, fast=True)
        sb.add_text_field("section_types", stored=False, tokenizer_name="raw")
        sb.add_bytes_field("head", stored=True, indexed=False)

    def passage_fields(sb: tantivy.SchemaBuilder) -> None:
        sb.add_text_field("id", stored=True, tokenizer_name="raw")
        sb.add_text_field("pmcid", stored=False, tokenizer_name="raw")
        sb.add_integer_field("year", stored=False, indexed=True, fast=True)
        sb.add_text_field("section_type", stored=False, tokenizer_name="raw")
        sb.add_bytes_field("doc", stored=True, indexed=False)

    indices = {}
    for kind, views, extra in (("papers", ["text"] if one_field else ["title", "abstract", "body"], paper_fields),
                               ("passages", ["text"], passage_fields)):
        (build / kind).mkdir(parents=True)
        index = tantivy.Index(schema(views, extra), path=str(build / kind))
        for name, analyzer in ANALYZERS.items():
            index.register_tokenizer(name, analyzer)
        indices[kind] = index.writer(heap_size=50_000_000, num_threads=1)
    db = sqlite3.connect(build / "papers.db")
    db.execute("CREATE TABLE papers (pmcid TEXT PRIMARY KEY, doc BLOB NOT NULL)")
    for paper in papers:
        db.execute("INSERT INTO papers VALUES (?, ?)",
                   (paper.pmcid, zlib.compress(paper.model_dump_json(exclude_none=True).encode())))
        head = PaperHead(title=paper.title, abstract=paper.abstract[:500], year=paper.year, journal=paper.journal)
        doc = tantivy.Document(pmcid=paper.pmcid, head=head.model_dump_json(exclude_none=True).encode())
        for field, text in (("title", paper.title), ("abstract", paper.abstract), ("body", paper.body_text())):
            for _ in range((2 if field == "title" else 1) if one_field else 1):
                if one_field and not text:
                    continue
                doc.add_text(("text" if one_field else field) + "_w", text)
                doc.add_text(("text" if one_field else field) + "_s", text)
        for st in paper.section_types():
            doc.add_text("section_types", st)
        if paper.year is not None:
            doc.add_integer("year", paper.year)
        indices["papers"].add_document(doc)
        for p in split_passages(paper):
            pd = tantivy.Document(id=p.id, pmcid=p.pmcid, section_type=p.section_type, text_w=p.text, text_s=p.text,
                                  doc=p.model_dump_json(exclude_none=True).encode())
            if p.year is not None:
                pd.add_integer("year", p.year)
            indices["passages"].add_document(pd)
    db.commit()
    db.close()
    for w in indices.values():
        w.commit()
        w.wait_merging_threads()
    meta = {"fingerprint": "old", "status": "published", "state": {}, "created": 1.0, "published": 1.0}
    if one_field:
        meta.update(layout=5, field_weights={"title": 2, "abstract": 1, "body": 1})
    (build / "build.json").write_text(json.dumps(meta))
    (data_dir / "collections" / "default" / "CURRENT").write_text(json.dumps({"build": build.name}))


@pytest.fixture(scope="module")
def corpus() -> list[Paper]:
    return [*PAPERS, LONG, *generate(SyntheticConfig(n_papers=40, words_per_paper=600, seed=5, vocabulary=3000))]


@pytest.fixture(scope="module")
def engines(corpus, tmp_path_factory) -> tuple[EmbeddedEngine, EmbeddedEngine]:
    """The reference (raw text analysed by tantivy, papers in one field) and the current layout."""
    old = _layout1_engine(tmp_path_factory.mktemp("reference"), corpus, one_field=True)
    return old, build_index(tmp_path_factory.mktemp("layout5"), corpus)


@pytest.fixture(scope="module")
def legacy(corpus, tmp_path_factory) -> EmbeddedEngine:
    """A per-field layout-1 build, as written before."""
    return _layout1_engine(tmp_path_factory.mktemp("layout1"), corpus)


def _layout1_engine(data_dir: Path, corpus: list[Paper], one_field: bool = False) -> EmbeddedEngine:
    _layout1_build(data_dir, corpus, one_field)
    return EmbeddedEngine(data_dir)


def _scores(hits, key: str) -> dict[str, float]:
    return {getattr(h, key): h.score for h in hits}


def test_new_layout_scores_and_ranks_exactly_as_analysing_the_text(engines):
    old, new = engines
    queries = QUERIES + ["Notch", "dpp", "Ubx", "wg", "hh", "en", "Antp", "ey"]
    found = 0
    for q in queries:
        query = plan(q)
        a, b = old.search_papers(query, limit=100), new.search_papers(query, limit=100)
        assert a.total == b.total, q
        assert _scores(b.hits, "pmcid") == pytest.approx(_scores(a.hits, "pmcid"), rel=1e-6), q
        assert [h.score for h in b.hits] == pytest.approx([h.score for h in a.hits], rel=1e-6), q
        assert {h.pmcid: sorted(h.matched) for h in b.hits} == {h.pmcid: sorted(h.matched) for h in a.hits}, q
        pa, pb = old.search_passages(query, limit=200), new.search_passages(query, limit=200)
        assert pa.total == pb.total, q
        assert _scores(pb.hits, "passage_id") == pytest.approx(_scores(pa.hits, "passage_id"), rel=1e-6), q
        old_hits = {h.passage_id: h for h in pa.hits}
        for h in pb.hits:   # the text sliced from the paper store is the text layout 1 stored, highlights alike
            assert h.model_dump(exclude={"score"}) == old_hits[h.passage_id].model_dump(exclude={"score"}), q
        found += bool(b.hits)
    assert found >= len(queries) - 3   # the comparison is about hits, not empty lists


def test_hazards_keep_their_answers_in_the_new_layout(engines):
    _, new = engines

    def ids(q: str) -> set[str]:
        return {h.pmcid for h in new.search_papers(plan(q), limit=100).hits}

    assert "PMC100002" not in ids("Dl") and {"PMC100001", "PMC100009"} <= ids("Dl")
    assert {"PMC100001", "PMC100003", "PMC100009"} <= ids("Su(H)")
    assert {"PMC100003", "PMC100009"} <= ids("l(2)gl") and {"PMC100003", "PMC100009"} <= ids("α-Cat")
    assert "PMC100002" not in ids("N")   # "n = 12" is not Notch
    # a phrase across the pieces of a long paragraph, and across an abstract's two paragraphs
    assert "PMC100009" in ids('"margin. Cells of the wing pouch"')
    assert "PMC100009" in ids('"dl gradient Second part"')
    hit = new.search_passages(plan("α-Cat"), limit=100).hits
    assert {"PMC100009:0:1", "PMC100009:2:1"} <= {h.passage_id for h in hit}


def test_passage_text_is_stored_once_and_scan_serves_it(tmp_path, corpus):
    eng = build_index(tmp_path / "data", corpus[:12])
    index = tantivy.Index.open(str(eng._read().path / "passages"))
    searcher = index.searcher()
    stored = [json.loads(searcher.doc(a)["doc"][0]) for _, a in
              searcher.search(tantivy.Query.all_query(), 10_000).hits]
    assert stored and all("text" not in d for d in stored)
    expected = {p.id: p for paper in corpus[:12] for p in split_passages(paper)}
    scanned = list(eng.scan_passages())
    assert [p.id for p, _ in scanned] == [p.id for p, _ in eng.scan_passages()]   # one order per build
    assert {p.id: p for p, _ in scanned} == expected
    titles = {paper.pmcid: paper.title for paper in corpus}
    assert all(title == titles[p.pmcid] for p, title in scanned)


def test_layout1_build_scans_and_fetches_as_before(legacy, corpus):
    old = legacy
    expected = {p.id: p for paper in corpus for p in split_passages(paper)}
    assert {p.id: p for p, _ in old.scan_passages()} == expected
    assert old.get_paper("PMC100009") == LONG


def test_a_per_field_build_is_still_searched_per_field_with_the_configured_weights(tmp_path):
    """Builds before the one-field layout keep serving after an upgrade: the configured weights are their boosts."""
    in_title = Paper(pmcid="PMC200001", title="Wingless signalling", abstract="A study of cell growth in the embryo.")
    in_abstract = Paper(pmcid="PMC200002", title="Cell growth in the embryo",
                        abstract="A study of wingless signalling.")
    _layout1_build(tmp_path, [in_title, in_abstract, PAPERS[0]])
    title = EmbeddedEngine(tmp_path, field_weights={"title": 10, "abstract": 1})
    abstract = EmbeddedEngine(tmp_path, field_weights={"title": 1, "abstract": 10})
    assert title.search_papers(plan("wingless")).hits[0].pmcid == in_title.pmcid
    assert abstract.search_papers(plan("wingless")).hits[0].pmcid == in_abstract.pmcid
    assert title.bm25_parameters()["field_weights"] == {"title": 10, "abstract": 1, "body": 1}
    # with the default weights, the per-field layout's own defaults: its ranking does not change until a rebuild
    assert EmbeddedEngine(tmp_path).bm25_parameters()["field_weights"] == {"title": 3, "abstract": 2, "body": 1}


def test_the_paper_store_caches_are_bounded(tmp_path, corpus, monkeypatch):
    new = build_index(tmp_path / "data", corpus)
    monkeypatch.setattr(paper_store, "BLOCK_CACHE", 3)
    hits = new.search_passages(plan("the"), limit=100).hits
    assert len({h.pmcid for h in hits}) > 3
    assert len(new._read().store._blocks) <= 3
    assert all(h.text for h in hits)
    old = _layout1_engine(tmp_path / "old", corpus)
    monkeypatch.setattr(paper_store, "PAPER_CACHE", 3)
    hits = old.search_passages(plan("the"), limit=100).hits
    assert len({h.pmcid for h in hits}) > 3 and all(h.text for h in hits)
    assert len(old._read().store._papers) <= 3


def test_prepared_papers_are_plain_data_and_add_like_papers(tmp_path):
    prepared = [embedded._prepare(p, split_passages(p)) for p in [*PAPERS, LONG]]
    blobs = [pickle.dumps(pr) for pr in prepared]
    assert not any(b"pydantic" in b or b"search.core.models" in b for b in blobs)
    eng = EmbeddedEngine(tmp_path / "data")
    build = eng.open_build("prepared", resume=False)
    for b in blobs:
        build.add_prepared(pickle.loads(b))
    build.commit({})
    build.publish()
    direct = build_index(tmp_path / "direct", [*PAPERS, LONG])
    for q in ("Dl", "wing margin", '"wing pouch"', "α-Cat"):
        assert _scores(eng.search_papers(plan(q)).hits, "pmcid") == _scores(direct.search_papers(plan(q)).hits, "pmcid")
    assert eng.get_paper("PMC100009") == LONG


def test_prepare_refuses_passages_of_another_paper_or_out_of_order():
    passages = split_passages(LONG)
    with pytest.raises(ValueError, match="PMC100001"):
        embedded._prepare(PAPERS[0], passages)
    with pytest.raises(ValueError, match="in order"):
        embedded._prepare(LONG, passages[::-1])
    edited = [passages[0].model_copy(update={"text": "something else"}), *passages[1:]]
    with pytest.raises(ValueError, match="not the next piece"):
        embedded._prepare(LONG, edited)


def test_writer_plan_bounds_threads_and_heap(monkeypatch):
    n, heap = writer_plan(3)
    assert n == 3 and embedded.MIN_THREAD_HEAP * 3 <= heap <= embedded.MAX_THREAD_HEAP * 3
    monkeypatch.setattr(embedded, "_available_memory", lambda: 100_000_000)   # a small machine: the floor holds
    assert writer_plan(2) == (2, 2 * embedded.MIN_THREAD_HEAP)
    monkeypatch.setattr(embedded.os, "cpu_count", lambda: 64)
    assert writer_plan()[0] == embedded.MAX_WRITER_THREADS
    monkeypatch.setattr(embedded.os, "cpu_count", lambda: 2)
    assert writer_plan()[0] == 1


def test_index_threads_setting_reaches_the_writers(tmp_path):
    from search.core.config import Settings
    from search.engines import open_engine

    eng = open_engine(Settings(data_dir=tmp_path / "data", index_threads=2))
    assert isinstance(eng, EmbeddedEngine) and eng.index_threads == 2
    build = eng.open_build("threads", resume=False)
    for p in PAPERS:
        build.add(p, split_passages(p))
    build.commit({})
    build.publish()
    assert {h.pmcid for h in eng.search_papers(plan("Su(H)")).hits} == {"PMC100001", "PMC100003"}


@pytest.mark.parametrize("layout", [None, 2])
def test_a_building_build_of_an_older_layout_is_not_resumed(tmp_path, layout):
    d = tmp_path / "data"
    build_index(d, PAPERS[:1])
    builds = d / "collections" / "default" / "builds"
    old = builds / "20200101T000000-old002"
    (old / "papers").mkdir(parents=True)
    meta = {"fingerprint": "same", "status": "building", "state": {"n": 1}}
    (old / "build.json").write_text(json.dumps(meta if layout is None else {**meta, "layout": layout}))
    build = EmbeddedEngine(d).open_build("same", resume=True)
    try:
        assert build.id != old.name and build.state == {}
        assert not old.exists()   # an unfinished build of another layout can never be published: removed
    finally:
        build.abort(discard=True)


def test_the_symbol_view_keeps_no_positions_and_a_symbol_phrase_matches_all_its_tokens(engines):
    """Layout 4: no query reads symbol-view positions (symbol clauses are single tokens; phrases are word-view), so
    they are not indexed (a fifth of the index); a symbol phrase, which the planner never makes, is read as all its
    tokens in one field."""
    _, new = engines
    for kind in ("papers", "passages"):
        meta = json.loads(next((new.dir / "builds").glob(f"*/{kind}/meta.json")).read_text())
        record = {f["name"]: f["options"]["indexing"]["record"] for f in meta["schema"] if f["type"] == "text"}
        assert {v for k, v in record.items() if k.endswith("_s")} == {"freq"}, kind
        assert {v for k, v in record.items() if k.endswith("_w")} == {"position"}, kind
    both = EngineQuery(clauses=[Clause(text="Dl", view="symbol", required=True),
                                Clause(text="N", view="symbol", required=True)])
    phrase = EngineQuery(clauses=[Clause(text="Dl N", view="symbol", phrase=True)])
    found = {h.pmcid for h in new.search_papers(phrase, limit=100).hits}
    assert "PMC100001" in found and found <= {h.pmcid for h in new.search_papers(both, limit=100).hits}


# ---- older layouts: deprecated, and `flysift upgrade` --------------------------------------------------------------

def test_an_old_layout_is_one_line_naming_flysift_upgrade_and_the_upgrade_rewrites_it(tmp_path, corpus, caplog):
    """A data dir written in layout 1 still serves, says so in one line naming the command (serve banner, server
    log, ``flysift upgrade --check``), and ``flysift upgrade`` rewrites it from its own papers: the same papers and
    passages in the current layout, and no more warning."""
    from click.testing import CliRunner

    from search.cli.main import main, serve_banner
    from search.core.config import Settings

    data = tmp_path / "data"
    _layout1_build(data, corpus)
    old = EmbeddedEngine(data)
    why = old.outdated()
    assert why is not None and "\n" not in why and "layout 1" in why and f"flysift upgrade --data-dir {data}" in why
    with caplog.at_level("WARNING", logger="flysift.engine"):
        old.stats()
    assert [r.getMessage() for r in caplog.records] == [why]
    banner = serve_banner(Settings(data_dir=data), "127.0.0.1", 8000, 1, False)
    assert [line.strip() for line in banner.splitlines() if "warning" in line] == [f"warning: {why}"]
    r = CliRunner().invoke(main, ["upgrade", "--check", "--data-dir", str(data)])
    assert r.exit_code == 1 and "flysift upgrade" in r.output

    r = CliRunner().invoke(main, ["upgrade", "--data-dir", str(data)])
    assert r.exit_code == 0 and f"default: rewrote {len(corpus)} papers" in r.output, r.output
    new = EmbeddedEngine(data)
    assert new.outdated() is None and new.stats().papers == len(corpus)
    assert new._read().layout == embedded.LAYOUT and new.get_paper("PMC100009") == LONG
    expected = {p.id: p for paper in corpus for p in split_passages(paper)}
    assert {p.id: p for p, _ in new.scan_passages()} == expected
    assert {h.pmcid for h in new.search_papers(plan("Su(H)"), limit=100).hits} >= {"PMC100001", "PMC100003"}
    banner = serve_banner(Settings(data_dir=data), "127.0.0.1", 8000, 1, False)
    assert "warning" not in banner
    r = CliRunner().invoke(main, ["upgrade", "--check", "--data-dir", str(data)])
    assert r.exit_code == 0 and "default: current" in r.output


def test_a_current_layout_needs_no_upgrade(tmp_path, corpus):
    eng = build_index(tmp_path / "data", corpus[:5])
    assert eng.outdated() is None and EmbeddedEngine(tmp_path / "empty").outdated() is None
