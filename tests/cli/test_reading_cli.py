"""Issue #26 item 7: the CLI for people. Hits with their matched words marked (bold/colour on a terminal, plain when
piped), text wrapped at word boundaries, tables without empty columns, ``flysift paper`` by section with passage ids,
exports with ``--format``, a syntax error with a caret, an alternative id said to be one."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

from click.testing import CliRunner

from search.cli.main import main
from search.cli.render import MARK_ON, marked, paragraph, styled, table, wrap
from search.engines.embedded.terms import TermIndex
from search.ontology.model import Ontology

from helpers import PAPERS, term_service

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def run(*args: str, env: dict | None = None):
    res = CliRunner().invoke(main, list(args), env={"COLUMNS": "80", **(env or {})})
    return res


def test_search_shows_hits_with_their_fragments_plain_when_piped(data_dir):
    res = run("search", "Dl wing -dorsal", "--data-dir", str(data_dir), "--facets")
    assert res.exit_code == 0, res.output
    assert "2 papers match" in res.output and "year: 2001 1, 2015 1" in res.output
    assert "1.   Delta and Notch signalling in the wing" in res.output
    assert "[abstract] Dl activates N in wing margin cells." in res.output
    assert MARK_ON not in res.output and "\x1b[" not in res.output


def test_matches_are_bold_and_coloured_on_a_terminal():
    text = marked("Loss of Dl abolishes", [(8, 10)])
    assert styled(text, True) == "Loss of \x1b[33m\x1b[1mDl\x1b[0m abolishes"
    assert styled(text, False) == "Loss of Dl abolishes"


def test_text_wraps_at_word_boundaries_and_tables_hide_empty_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    words = "the morphogenesis of the compound eye requires " * 4
    for line in wrap(words, 30):
        assert len(line) <= 30 and all(w in words.split() for w in line.split())
    assert paragraph(marked("a " * 60 + "morphogenesis", [(120, 133)]), False).splitlines()[-1].endswith(
        "morphogenesis")
    rows = [{"id": "FBbt:00004729", "aspect": "", "name": "wing margin", "definition": "The margin of the wing "
             "blade, where the dorsal and ventral surfaces meet; morphogenesis " * 3, "status": ""}]
    out = table(rows, [("id", "id", 14), ("aspect", "aspect", 6), ("name", "name", 45),
                       ("definition", "definition", 60), ("status", "status", 8)], False)
    assert "aspect" not in out and "status" not in out
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "morphogene\n" not in out and all(not line.rstrip().endswith("morphogene") for line in out.splitlines())


def test_paper_reads_by_section_with_passage_ids_and_marks(data_dir):
    res = run("paper", PAPERS[0].pmcid, "--query", "Dl", "--data-dir", str(data_dir))
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == PAPERS[0].title and lines[1].startswith(f"{PAPERS[0].pmcid} · 2001 · Dev Biol")
    assert "3 matches marked" in res.output
    assert [x for x in lines if x in ("ABSTRACT", "INTRO", "RESULTS")] == ["ABSTRACT", "INTRO", "RESULTS"]
    assert f"[{PAPERS[0].pmcid}:2:0]" in lines
    res = run("paper", PAPERS[0].pmcid, "--section", "results", "--data-dir", str(data_dir))
    assert "INTRO" not in res.output and "Loss of Dl" in res.output


def test_passages_show_their_papers_title_and_exports_go_to_stdout(data_dir):
    res = run("passages", "Su(H)", "--data-dir", str(data_dir), "-n", "1")
    assert res.exit_code == 0 and "Suppressor of Hairless targets" in res.output
    res = run("search", "Dl OR wing", "--format", "csv", "--data-dir", str(data_dir))
    rows = list(csv.reader(io.StringIO(res.output)))
    assert rows[0][0] == "rank" and [r[1] for r in rows[1:]] == ["PMC100001", "PMC100004"]


def test_a_syntax_error_points_at_its_place(data_dir):
    res = CliRunner().invoke(main, ["search", 'Dl AND (wing OR "disc', "--data-dir", str(data_dir)])
    assert res.exit_code == 2
    err = res.stderr if hasattr(res, "stderr") else res.output
    assert "error [query_syntax]" in err and "at character 17" in err
    caret_line = err.splitlines()[-1]
    assert caret_line.index("^") == 2 + 16


def test_terms_says_an_alternative_id_is_one(tmp_path):
    data = tmp_path / "data"
    obo = tmp_path / "obo"
    obo.mkdir()
    shutil.copy(FIX / "mini.obo", obo / "mini.obo")
    term_service(data).index_ontology(Ontology.load(obo / "mini.obo", "go", cache_dir=obo), TermIndex(data).write)
    res = run("terms", "GO:0042051", "--data-dir", str(data))
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == "GO:0042051 is an alternative id of GO:0001745 (compound eye morphogenesis)."
    res = run("terms", "GO:0001745", "--data-dir", str(data))
    assert "alternative id" not in res.output
