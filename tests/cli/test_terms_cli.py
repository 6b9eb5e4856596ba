"""Issue #15: ``flysift terms`` answers from the term index and the saved re-ranker model: no OBO file, no ontology
parse, and none of the server's modules."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from search.cli.main import main
from search.engines.embedded.terms import TermIndex
from search.ontology.model import Ontology

from helpers import term_service

FIX = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def go_dir(tmp_path: Path) -> Path:
    d, obo = tmp_path / "data", tmp_path / "obo"
    obo.mkdir()
    shutil.copy(FIX / "mini.obo", obo / "mini.obo")
    term_service(d).index_ontology(Ontology.load(obo / "mini.obo", "go", cache_dir=obo), TermIndex(d).write)
    shutil.rmtree(obo)
    return d


def test_terms_answers_without_the_ontology(go_dir, monkeypatch):
    want = term_service(go_dir).search("go", "cell nucleus", limit=3).model_dump(mode="json", by_alias=True)

    def refuse(*_a, **_k):
        raise AssertionError("flysift terms read the ontology")
    monkeypatch.setattr(Ontology, "read", refuse)
    res = CliRunner().invoke(main, ["terms", "cell nucleus", "-o", "go", "-n", "3", "--json", "--data-dir",
                                    str(go_dir)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == want and want["hits"][0]["id"] == "GO:0005634"
    res = CliRunner().invoke(main, ["terms", "cell nucleus", "--resolve", "--json", "--data-dir", str(go_dir)])
    assert res.exit_code == 0 and json.loads(res.output)["results"][0]["id"] == "GO:0005634"


def test_terms_imports_no_server_module(go_dir):
    heavy = ("fastapi", "uvicorn", "starlette", "lemminflect", "fastobo")
    code = ("import sys; from search.cli.main import main\n"
            "try:\n    main(['terms', 'nucleus', '--data-dir', sys.argv[1], '--json'])\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(go_dir)], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout[out.stdout.index('{'):out.stdout.rindex('}') + 1])["hits"][0]["id"] == "GO:0005634"
    assert out.stdout.strip().splitlines()[-1] == "[]"
