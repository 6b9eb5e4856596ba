"""Issue #25: the client is a client. Importing ``search.client`` (what curation, eval and outside teams use) or the
MCP server (a thin layer over the client) loads the wire shapes and the core, never a service, a store, an engine,
the retrieval layer or the HTTP server; the allow-list of tests/test_architecture.py checks the source, this checks
what a fresh interpreter really loads."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: the project modules a client may load
ALLOWED = ("search", "search.client", "search.core", "search.schema", "search.mcp", "search.mcp.server")
#: third-party server stacks a client never needs
SERVER_LIBS = ("fastapi", "starlette", "uvicorn", "tantivy", "opensearchpy", "elasticsearch", "faiss", "fastobo",
               "pronto", "lemminflect")

RUN = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(sys.modules)))
"""


def loaded(module: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", RUN, module], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def server_modules(modules: list[str]) -> list[str]:
    project = [m for m in modules if m.split(".")[0] in ("search", "indexer", "curation", "eval")]
    return [m for m in project if not any(m == a or m.startswith(a + ".") for a in ALLOWED if a != "search")
            and m != "search"]


@pytest.mark.parametrize("module", ["search.client", "search.mcp.server"])
def test_a_client_loads_no_server_module(module):
    modules = loaded(module)
    assert module in modules and "search.schema.sessions" in modules
    assert server_modules(modules) == []
    assert sorted({m.split(".")[0] for m in modules} & set(SERVER_LIBS)) == []


def test_the_check_sees_a_server_module():
    """The check above can fail: the term service is a server module and is found as one."""
    modules = loaded("search.ontology.service")
    assert "search.ontology.service" in server_modules(modules)
