"""Issue #14 item 8: the core install is the embedded service and CLI; heavy stacks are extras, imported where they are
used, and a missing one is one line naming the ``pip install`` (tested by hiding the package from the import system)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from search.core.extras import EXTRAS, ExtraMissing, require

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
HEAVY = {"ranx", "matplotlib", "pyarrow", "opensearch-py", "elasticsearch", "scipy", "pandas", "numba", "datasets",
         "sentence-transformers", "faiss-cpu", "openai", "psutil"}


def _name(req: str) -> str:
    return req.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].strip().lower()


def test_core_dependencies_leave_the_heavy_stacks_to_extras() -> None:
    core = {_name(r) for r in PYPROJECT["dependencies"]}
    assert not core & HEAVY, core & HEAVY
    extras = PYPROJECT["optional-dependencies"]
    for extra, packages in EXTRAS.items():
        assert {_name(r) for r in extras[extra]} == set(packages), extra
    assert extras["all"] == [f"flysift[{','.join(EXTRAS)}]"]
    # README line 1 installs the test extra: it must hold what the default test run imports
    test = {_name(r) for r in extras["test"]} | {x for r in extras["test"] if r.startswith("flysift[")
                                                 for e in r[8:-1].split(",") for x in EXTRAS[e]}
    assert {"ranx", "matplotlib", "pyarrow", "opensearch-py", "elasticsearch", "openai", "psutil"} <= test


def test_a_missing_extra_is_one_line_naming_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ranx", None)  # what an uninstalled package looks like to `import`
    with pytest.raises(ExtraMissing) as err:
        require("ranx", "eval", "scoring IR runs")
    assert err.value.message == ("scoring IR runs needs the optional package ranx (not installed): "
                                 "pip install 'flysift[eval]'")
    assert require("json", "eval", "x") is json


def test_ir_scoring_without_ranx_names_the_eval_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from eval.ir import score_runs

    monkeypatch.setitem(sys.modules, "ranx", None)
    with pytest.raises(ExtraMissing, match=r"pip install 'flysift\[eval\]'"):
        score_runs({"q1": {"d1": 1}}, {"bm25": {"q1": {"d1": 1.0}}})


def test_plots_without_matplotlib_name_the_eval_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from eval.report import _pyplot

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ExtraMissing, match=r"pip install 'flysift\[eval\]'"):
        _pyplot()


def test_cluster_engine_without_its_client_names_the_cluster_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from search.core.config import Settings
    from search.engines.cluster.transport import Transport

    monkeypatch.setitem(sys.modules, "opensearchpy", None)
    with pytest.raises(ExtraMissing, match=r"pip install 'flysift\[cluster\]'"):
        Transport(Settings(cluster_url="http://127.0.0.1:9"))


def test_indexing_parquet_without_pyarrow_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from search.cli.main import main

    (tmp_path / "papers.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    res = CliRunner().invoke(main, ["index", "corpus", str(tmp_path / "papers.parquet"),
                                    "--data-dir", str(tmp_path / "data")])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert any("pip install 'flysift[hf]'" in ln for ln in lines), res.output
    assert "Traceback" not in res.output


def test_the_core_service_and_cli_import_without_any_extra(tmp_path: Path) -> None:
    """A fresh interpreter in which the extras' packages cannot be imported: the app, every CLI command's module and
    ``flysift --help`` still load (before #14, eval's CLI imported matplotlib and the FlyAOC reader pyarrow)."""
    blocked = ["ranx", "matplotlib", "pyarrow", "opensearchpy", "elasticsearch", "datasets", "sentence_transformers",
               "faiss", "openai", "psutil", "scipy", "pandas"]
    code = f"""
import sys
for name in {blocked!r}:
    sys.modules[name] = None
from importlib.metadata import entry_points
import search.api.app, search.mcp.server
for ep in entry_points(group="flysift.commands"):
    ep.load()
from click.testing import CliRunner
from search.cli.main import main
res = CliRunner().invoke(main, ["--help"])
assert res.exit_code == 0, res.output
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
