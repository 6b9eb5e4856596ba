"""Issue #14 item 8 and #15: a ``flysift terms`` call imports what answering needs and nothing else (no settings
framework, no server, no OBO parser, no table library for ``--json``), and answers as the term service does."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from search.engines.embedded.terms import TermIndex
from search.ontology.model import Ontology

from helpers import term_service

FIX = Path(__file__).resolve().parents[1] / "fixtures"
#: modules a terms call must not import: pydantic-settings (asyncio with it), the server, clients, the OBO parsers,
#: the indexer's lemmatiser and the dense stack
NEVER = ("pydantic_settings", "asyncio", "fastapi", "starlette", "uvicorn", "httpx", "mcp", "fastobo", "pronto",
         "lemminflect", "sentence_transformers", "torch", "faiss", "onnxruntime", "indexer", "tqdm")
RUN = """
import json, sys
from search.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(json.dumps({"exit": code, "modules": sorted({m.split(".")[0] for m in sys.modules})}), file=sys.stderr)
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("terms-lean")
    d, obo = root / "data", root / "obo"
    obo.mkdir()
    for name, file in (("go", "mini.obo"), ("fbbt", "mini_fbbt.obo")):
        shutil.copy(FIX / file, obo / file)
        term_service(d).index_ontology(Ontology.load(obo / file, name, cache_dir=obo), TermIndex(d).write)
    shutil.rmtree(obo)   # a terms call needs neither the OBO file nor its cache
    return d


def _terms(data: Path, *args: str) -> tuple[str, set[str]]:
    """Run ``flysift terms ARGS`` in a fresh interpreter: its standard output and the top-level modules it loaded."""
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "200", "FLYSIFT_DATA_DIR": str(data)}
    out = subprocess.run([sys.executable, "-c", RUN, "terms", *args], capture_output=True, text=True, env=env,
                         check=True)
    report = json.loads(out.stderr.strip().splitlines()[-1])
    assert report["exit"] in (None, 0), out.stdout + out.stderr
    return out.stdout, set(report["modules"])


@pytest.mark.parametrize(("ontology", "query"),
                         [("go", "cell nucleus"), ("go", "nuclei"), ("fbbt", "ventral nerve cords")])
def test_json_answers_as_the_service_and_imports_no_more(data, ontology, query):
    stdout, modules = _terms(data, query, "-o", ontology, "-n", "5", "--json")
    want = term_service(data).search(ontology, query, limit=5).model_dump(mode="json", by_alias=True)
    assert want["hits"] and json.loads(stdout) == want
    assert sorted(modules & {*NEVER, "rich"}) == []


def test_resolve_json_answers_as_the_service(data):
    stdout, modules = _terms(data, "the nucleus of a cell", "--resolve", "--json")
    want = term_service(data).resolve_description("the nucleus of a cell", "go", limit=10)
    assert json.loads(stdout) == want.model_dump(mode="json", by_alias=True) and want.results
    assert sorted(modules & {*NEVER, "rich"}) == []


def test_table_lists_the_services_hits_in_order(data):
    stdout, modules = _terms(data, "cell nucleus", "-n", "5")
    want = [h.id for h in term_service(data).search("go", "cell nucleus", limit=5).hits]
    shown = [line.split()[0] for line in stdout.splitlines() if line.startswith("GO:")]
    assert shown == want
    assert sorted(modules & set(NEVER)) == []
