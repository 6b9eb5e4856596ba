"""Re-indexing an ontology has the corpus builds' shrink guard (issue #28): a file much smaller than the ontology
indexed under its name is refused unless ``--allow-shrink``, and the service keeps serving the live one."""

from __future__ import annotations

from pathlib import Path

import httpx
from click.testing import CliRunner

from search.api.app import create_app
from search.cli.main import main
from search.core.config import Settings

from helpers import LiveServer

FIX = Path(__file__).parents[1] / "fixtures"
ONE_TERM = """format-version: 1.2
ontology: go

[Term]
id: GO:0003674
name: molecular_function
namespace: molecular_function
"""


def _index(data: Path, file: Path, *extra: str):
    return CliRunner().invoke(main, ["index", "ontology", str(file), "--name", "go", "--no-dense", "--data-dir",
                                     str(data), *extra])


def _served_terms(url: str) -> int:
    r = httpx.get(f"{url}/v1/terms/GO:0003700/ancestors", params={"relations": "is_a"}, timeout=30)
    return r.status_code


def test_a_one_term_file_does_not_replace_go(tmp_path: Path):
    data = tmp_path / "data"
    first = _index(data, FIX / "mini.obo")
    assert first.exit_code == 0, first.output
    small = tmp_path / "one.obo"
    small.write_text(ONE_TERM)
    with LiveServer(create_app(Settings(data_dir=data))) as srv:
        assert _served_terms(srv.url) == 200
        refused = _index(data, small)
        assert refused.exit_code != 0
        assert "build_refused" in refused.output and "--allow-shrink" in refused.output
        assert "1 terms" in refused.output and "Traceback" not in refused.output
        assert _served_terms(srv.url) == 200   # the live GO keeps serving
        forced = _index(data, small, "--allow-shrink")
        assert forced.exit_code == 0, forced.output
        assert _served_terms(srv.url) == 404   # now GO is the one term the operator asked for


def test_the_same_ontology_indexed_again_is_not_a_shrink(tmp_path: Path):
    data = tmp_path / "data"
    assert _index(data, FIX / "mini.obo").exit_code == 0
    again = _index(data, FIX / "mini.obo")
    assert again.exit_code == 0, again.output
