"""Issue #14 items 1 and 7: the README's commands run, in order, as written.

The slow test runs README line 1 and every shell block of the "Quick start" section in one temporary directory, with
bash. Two things differ from a newcomer's run, on purpose: the install (``python3.11 -m venv .venv && pip install``)
is not repeated, ``.venv/bin/`` is this interpreter's own bin directory (the one running the tests), and README line 2
(``pytest``) is not run from inside pytest; port 8000 becomes a free port. The fast test checks the part of ``demo``
the examples rely on (the ontology sample)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)


def _section(title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert m, f"README has no '## {title}' section"
    return m.group(1)


def _line1() -> str:
    """README line 1 without the install: the commands after ``pip install …``."""
    first = BLOCK.search(README)
    assert first
    line = first.group(1).splitlines()[0].split("#", 1)[0]
    steps = [s.strip() for s in line.split("&&")]
    assert steps[0].startswith("python3.11 -m venv .venv") and "pip install -e \".[test]\"" in steps[1], steps
    return " && ".join(steps[2:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quick_start_script(port: int) -> str:
    blocks = [_line1(), *BLOCK.findall(_section("Quick start"))]
    assert len(blocks) >= 2
    script = "\n".join(blocks)
    script = script.replace(".venv/bin/", f"{Path(sys.executable).parent}/").replace("8000", str(port))
    # a server left by a failing line is stopped too
    return "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + script


def test_the_quick_start_names_what_the_test_runs() -> None:
    script = quick_start_script(8123)
    assert "flysift demo" in script and "flysift terms \"compound eye morphogenesis\" --ontology go" in script
    assert "/v1/sessions" in script and ":8123" in script and "localhost:8123/?q=Su%28H%29" in script
    assert not any(line.startswith(".venv/bin/") for line in script.splitlines())


@pytest.mark.slow
def test_readme_quick_start_runs_in_order(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYSIFT_")}
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", quick_start_script(_free_port())], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (res.stdout[-3000:], res.stderr[-3000:])
    assert "GO:0001745" in res.stdout  # the terms example after demo (item 7)
    assert re.search(r'"symbol":\s*"dl"', res.stdout), res.stdout[-2000:]  # the session example (item 6)
    assert (tmp_path / "page.html").read_text().count('<mark class="q">Su(H)</mark>') >= 1   # the workbench page


def test_demo_indexes_the_ontology_sample(tmp_path: Path) -> None:
    from search.cli.main import main

    data = tmp_path / "data"
    res = CliRunner().invoke(main, ["demo", "--data-dir", str(data), "--papers", "20", "--query", "Dl"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["terms", "compound eye morphogenesis", "--ontology", "go", "--aspect", "P",
                                    "--data-dir", str(data), "--json"])
    assert res.exit_code == 0, res.output
    assert "GO:0001745" in res.output
    for name, query in (("fbbt", "wing disc"), ("fbdv", "embryonic stage")):
        res = CliRunner().invoke(main, ["terms", query, "--ontology", name, "--data-dir", str(data)])
        assert res.exit_code == 0, (name, res.output)


def test_serve_prints_url_engine_corpus_and_docs_and_takes_access_log(tmp_path: Path, monkeypatch) -> None:
    """Issue #14 item 4 (serve): the URL, the engine, the corpus size and where the docs are; --access-log."""
    import uvicorn

    from search.cli.main import main

    from helpers import PAPERS, build_index

    calls: list[dict] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: calls.append(kw))
    empty = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path / "none"), "--port", "8765",
                                      "--workers", "1"])
    assert empty.exit_code == 0, empty.output
    assert "no corpus indexed yet" in empty.output and calls[-1]["access_log"] is False
    build_index(tmp_path / "data")
    res = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path / "data"), "--port", "8765", "--workers", "1",
                                    "--access-log"])
    assert res.exit_code == 0, res.output
    assert "http://127.0.0.1:8765" in res.output and "engine: embedded" in res.output
    assert f"{len(PAPERS)} papers" in res.output and "http://127.0.0.1:8765/docs" in res.output
    assert calls[-1]["access_log"] is True and calls[-1]["log_level"] == "info" and calls[-1]["port"] == 8765
