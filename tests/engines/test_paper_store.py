"""The embedded engine's paper store: body paragraphs in compressed blocks (store format 2), so a passage hit reads
one block, papers fetched exactly as stored, builds of the older one-row-per-paper store still served, and a
damaged store answering ``index_corrupt`` naming the file, table and paper."""

from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path

import pytest

from indexer.synthetic import SyntheticConfig, generate
from search.core.errors import FlysiftError
from search.core.models import Paper, Section
from search.engines.embedded import paper_store
from search.engines.embedded.engine import EmbeddedEngine
from search.retrieval.planner import plan
from search.text.passages import split_passages

from helpers import PAPERS, build_index

_WORDS = "Notch signalling at the wing margin needs Dl and Ser in adjacent cells. "
#: many paragraphs per section (several blocks each), one paragraph longer than a block, a whitespace paragraph,
#: a section without paragraphs, optional fields present and absent
ODD = Paper(pmcid="PMC200001", pmid="123", doi="10.1/x", year=2003, journal="Genetics", title="Blocks of paragraphs",
            abstract="One abstract part.\n\n  Another, about Dl.  ",
            sections=[Section(type="INTRO", title="Intro", paragraphs=[f"Para {i}: " + _WORDS * (i % 5 + 1)
                                                                       for i in range(40)]),
                      Section(type="RESULTS", paragraphs=[_WORDS * 200, "   ", "Short one on Ser."]),
                      Section(type="METHODS", title="Empty", paragraphs=[]),
                      Section(type="DISCUSS", paragraphs=["Last words: Dl."])])


@pytest.fixture(scope="module")
def corpus() -> list[Paper]:
    return [*PAPERS, ODD, *generate(SyntheticConfig(n_papers=30, words_per_paper=700, seed=9, vocabulary=2000))]


@pytest.fixture(scope="module")
def engine(corpus, tmp_path_factory) -> EmbeddedEngine:
    return build_index(tmp_path_factory.mktemp("store"), corpus)


def _db(engine: EmbeddedEngine) -> Path:
    return engine._read().path / "papers.db"


def _older_store(engine: EmbeddedEngine, corpus: list[Paper]) -> None:
    """Turn a build's paper store into the format of layout-2 builds: one compressed paper JSON per row."""
    db = sqlite3.connect(_db(engine))
    db.executescript("DROP TABLE blocks; DROP TABLE paper_docs;"
                     "CREATE TABLE papers (pmcid TEXT PRIMARY KEY, doc BLOB NOT NULL);")
    db.executemany("INSERT INTO papers VALUES (?, ?)",
                   [(p.pmcid, zlib.compress(p.model_dump_json(exclude_none=True).encode(), 3)) for p in corpus])
    db.commit()
    db.close()


def test_papers_come_back_exactly_as_stored(engine, corpus):
    for paper in corpus:
        assert engine.get_paper(paper.pmcid) == paper
    assert engine.get_paper("PMC999999") is None
    blocks = sqlite3.connect(_db(engine)).execute("SELECT COUNT(*) FROM blocks WHERE pmcid = 'PMC200001'").fetchone()
    assert blocks[0] >= 4   # the 40 paragraphs of the introduction take several blocks, the long one its own
    parts = [json.loads(zlib.decompress(b)) for _, b in paper_store.encode(ODD).blocks]
    assert [len(p) for p in parts][-1] == 3   # the last block runs across RESULTS, the empty METHODS and DISCUSS


def test_passage_texts_are_the_paragraph_slices(engine, corpus):
    expected = {p.id: p for paper in corpus for p in split_passages(paper)}
    assert {p.id: p for p, _ in engine.scan_passages()} == expected
    hits = engine.search_passages(plan("Ser"), limit=200).hits
    assert {"PMC200001:2:2", "PMC200001:1:0"} <= {h.passage_id for h in hits}
    assert all(h.text == expected[h.passage_id].text for h in hits)


def test_a_passage_hit_reads_only_its_own_block(tmp_path):
    eng = build_index(tmp_path / "data", [ODD])
    db = sqlite3.connect(_db(eng))
    first = db.execute("SELECT MIN(place) FROM blocks WHERE pmcid = 'PMC200001'").fetchone()[0]
    db.execute("UPDATE blocks SET doc = ? WHERE place != ?", (zlib.compress(b"not a block"), first))
    db.commit()
    db.close()
    hits = eng.search_passages(plan("Para 0"), limit=5).hits
    assert hits and hits[0].passage_id == "PMC200001:1:0" and hits[0].text.startswith("Para 0: Notch")
    assert eng.search_passages(plan("Another"), limit=5).hits[0].text == "Another, about Dl."   # the abstract
    with pytest.raises(FlysiftError) as err:   # the other blocks are damaged, and the whole paper needs them
        eng.get_paper("PMC200001")
    assert err.value.code == "index_corrupt" and "blocks" in err.value.message and "PMC200001" in err.value.message


def test_builds_with_the_older_store_still_serve(tmp_path, corpus):
    new = build_index(tmp_path / "new", corpus)
    old = build_index(tmp_path / "old", corpus)
    _older_store(old, corpus)
    old.close()
    assert not old._read().store.blocked and new._read().store.blocked
    for q in ("Dl", "Ser", "wing margin", '"adjacent cells"', "the"):
        a, b = old.search_passages(plan(q), limit=50), new.search_passages(plan(q), limit=50)
        assert [h.model_dump() for h in a.hits] == [h.model_dump() for h in b.hits]
    assert all(old.get_paper(p.pmcid) == p for p in corpus)


@pytest.mark.parametrize("damage, why", [
    ("UPDATE blocks SET doc = X'00ff'", "does not decode"),
    ("UPDATE blocks SET doc = ?", "not a list of paragraphs per section"),
    ("DELETE FROM blocks WHERE place > (SELECT MIN(place) FROM blocks)", "paragraph"),
    ("UPDATE paper_docs SET doc = ?", "not a paper without its paragraphs"),
])
def test_a_damaged_store_is_index_corrupt_naming_table_and_paper(tmp_path, damage, why):
    eng = build_index(tmp_path / "data", [ODD])
    db = sqlite3.connect(_db(eng))
    db.execute(damage, (zlib.compress(b'{"a": [1]}'),) if "?" in damage else ())
    db.commit()
    db.close()
    with pytest.raises(FlysiftError) as err:
        eng.get_paper("PMC200001")
        eng.search_passages(plan("Ser Dl Para"), limit=100)
    assert err.value.code == "index_corrupt" and err.value.status == 500
    assert why in err.value.message and "PMC200001" in err.value.message and "papers.db" in err.value.message


def test_decompression_is_bounded_on_read_and_write(tmp_path, monkeypatch):
    eng = build_index(tmp_path / "data", [ODD])
    monkeypatch.setattr(paper_store, "MAX_DECODED_BYTES", 2_000)   # below the long paragraph's block
    with pytest.raises(FlysiftError, match="over 2,000 bytes") as err:
        eng.get_paper("PMC200001")
    assert err.value.code == "index_corrupt"
    with pytest.raises(ValueError, match="PMC200001.*at most 2,000"):
        paper_store.encode(ODD)
