"""The dependency rules of docs/architecture.md, checked on the source (imports as arrows):

- no import cycle among the project's modules; ``search`` imports none of the other packages;
- clients import an allow-list: ``curation`` and ``eval`` only ``search.client``, ``search.core``, ``search.schema``,
  ``search.flyaoc``, ``search.ontology.model`` and the MCP server; the client itself only ``search.core`` and
  ``search.schema``; the MCP server only the client, the core and the schema (a thin client); the schema only the
  core;
- the indexer needs no HTTP layer: no ``search.api``, ``search.mcp``, ``search.client``, and none of FastAPI,
  Starlette, uvicorn, httpx or mcp;
- nothing outside ``search/engines/`` reaches below ``search.engines`` except the dense index
  (``search.engines.dense``) and, for the cluster session store alone, the cluster transport;
- one composition root: only ``search/services.py`` constructs the services (``SearchService``, ``TermService``,
  ``SessionService``, ``BuildService``) or opens the session store; only the engine factory reads
  ``Settings.engine_kind``;
- no module over ``MAX_LINES`` lines.

Each rule is a function over a :class:`Project` read from a folder; ``test_a_planted_violation_fails_every_rule``
copies the project, plants one violation per rule and checks that each is reported.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("search", "indexer", "curation", "eval")
#: folders whose files count for the size rule and the composition rule (bench wires services too)
CHECKED_FOLDERS = (*PACKAGES, "bench", "tests")
MAX_LINES = 800

#: what a client (curation, eval, outside teams) may import of the service's package
CLIENT_ALLOWED = ("search.client", "search.core", "search.schema", "search.flyaoc", "search.ontology.model",
                  "search.mcp")
#: imports a client makes for now against the allow-list, each with its reason; the list only shrinks (empty since the
#: term recogniser moved into search/ behind POST /v1/terms/recognise, #24)
CLIENT_EXCEPTIONS: set[tuple[str, str]] = set()
#: what each thin layer may import of the project: itself, the package root (``__version__``) and these
LAYERS = {
    "search.client": ("search.core", "search.schema"),
    "search.mcp": ("search.client", "search.core", "search.schema"),
    "search.schema": ("search.core",),
}
#: the HTTP layer the indexer never needs: project packages and third-party modules
HTTP_MODULES = ("search.api", "search.mcp", "search.client")
HTTP_LIBS = ("fastapi", "starlette", "uvicorn", "httpx", "mcp")
#: below search.engines, what code outside the engines may import: the dense index, and the cluster transport for
#: the cluster session store
ENGINE_PUBLIC = ("search.engines.dense",)
ENGINE_EXCEPTIONS = {("search.sessions.cluster_store", "search.engines.cluster.transport")}
#: the services only the composition root constructs
SERVICES = ("SearchService", "TermService", "SessionService", "BuildService", "open_store")
COMPOSITION_ROOT = "search/services.py"


def _within(name: str, prefixes: tuple[str, ...] | str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in ((prefixes,) if isinstance(prefixes, str) else prefixes))


class Project:
    """The modules of the four packages under ``root`` and their imports: project modules (resolved to the longest
    known prefix) and third-party top-level names."""

    def __init__(self, root: Path):
        self.root = root
        self.modules: dict[str, Path] = {}
        for pkg in PACKAGES:
            for path in (root / pkg).rglob("*.py"):
                parts = path.relative_to(root).with_suffix("").parts
                self.modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
        self.graph: dict[str, set[str]] = {}
        self.libs: dict[str, set[str]] = {}
        for mod, path in self.modules.items():
            self.graph[mod], self.libs[mod] = self._imports(mod, path)

    def _resolve(self, name: str) -> str | None:
        while name:
            if name in self.modules:
                return name
            name = name.rpartition(".")[0]
        return None

    def _imports(self, mod: str, path: Path) -> tuple[set[str], set[str]]:
        tree = ast.parse(path.read_text(), str(path))
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        out: set[str] = set()
        libs: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                # `from pkg import submodule` depends on the submodule; `from pkg import name` on pkg
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in self.modules else base for a in node.names]
            else:
                continue
            for t in targets:
                r = self._resolve(t)
                if r is None:
                    libs.add(t.split(".")[0])
                elif r != mod:
                    out.add(r)
        return out, libs

    def violations(self, bad: Callable[[str, str], bool]) -> list[str]:
        return sorted(f"{m} imports {t}" for m, ts in self.graph.items() for t in ts if bad(m, t))

    @cached_property
    def files(self) -> list[Path]:
        return sorted(p for folder in CHECKED_FOLDERS if (self.root / folder).is_dir()
                      for p in (self.root / folder).rglob("*.py") if "fixtures" not in p.parts)


# ---- the rules ----------------------------------------------------------------------------------------------------

def cycles(project: Project) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in project.graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(project.graph):
        if v not in index:
            visit(v)
    return out


def search_imports_other_packages(project: Project) -> list[str]:
    return project.violations(lambda m, t: _within(m, "search") and t.split(".")[0] in ("indexer", "curation", "eval"))


def clients_off_the_allow_list(project: Project) -> list[str]:
    """curation and eval import only the client-side modules of ``search`` (and each other)."""
    def bad(m: str, t: str) -> bool:
        return (m.split(".")[0] in ("curation", "eval") and _within(t, "search") and t != "search"
                and not _within(t, CLIENT_ALLOWED) and (m, t) not in CLIENT_EXCEPTIONS)
    return project.violations(bad)


def thin_layers_off_their_list(project: Project) -> list[str]:
    """The client, the MCP server and the schema import only the layers below them."""
    def bad(m: str, t: str) -> bool:
        layer = next((name for name in LAYERS if _within(m, name)), None)
        return layer is not None and not _within(t, layer) and t != "search" and not _within(t, LAYERS[layer])
    return project.violations(bad)


def indexer_http(project: Project) -> list[str]:
    """The indexer writes builds; it needs no HTTP layer (client, server or MCP)."""
    found = project.violations(lambda m, t: _within(m, "indexer") and _within(t, HTTP_MODULES))
    found += sorted(f"{m} imports {lib}" for m, libs in project.libs.items() if _within(m, "indexer")
                    for lib in libs if lib in HTTP_LIBS)
    return found


def below_the_engine_protocol(project: Project) -> list[str]:
    def bad(m: str, t: str) -> bool:
        return (t.startswith("search.engines.") and not _within(m, "search.engines")
                and not _within(t, ENGINE_PUBLIC) and (m, t) not in ENGINE_EXCEPTIONS)
    return project.violations(bad)


def outside_the_composition_root(project: Project) -> list[str]:
    """Calls that construct a service, and reads of ``engine_kind``, outside their one home."""
    out = []
    for path in project.files:
        rel = path.relative_to(project.root).as_posix()
        if rel.startswith("tests/"):
            continue   # tests build what they test
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name in SERVICES and rel != COMPOSITION_ROOT:
                    out.append(f"{rel}:{node.lineno} constructs {name}")
            elif isinstance(node, ast.Attribute) and node.attr == "engine_kind" and not (
                    rel.startswith("search/engines/") or rel == "search/core/config.py"):
                out.append(f"{rel}:{node.lineno} reads engine_kind")
    return out


def oversized(project: Project) -> list[str]:
    return [f"{p.relative_to(project.root)}: {n} lines" for p in project.files
            if (n := len(p.read_text().splitlines())) > MAX_LINES]


RULES: list[Callable[[Project], list]] = [cycles, search_imports_other_packages, clients_off_the_allow_list,
                                           thin_layers_off_their_list, indexer_http, below_the_engine_protocol,
                                           outside_the_composition_root, oversized]
PROJECT = Project(ROOT)


def test_the_graph_sees_the_project():
    assert {"search.core.models", "search.engines", "indexer.pipeline", "eval.flyaoc", "search.schema.sessions",
            "search.services"} <= set(PROJECT.modules)
    assert "search.core.query" in PROJECT.graph["search.retrieval.service"]
    assert "httpx" in PROJECT.libs["search.client"]


def test_no_import_cycle():
    assert cycles(PROJECT) == []


def test_search_imports_no_other_package():
    assert search_imports_other_packages(PROJECT) == []


def test_curation_and_eval_import_only_the_client_side():
    assert clients_off_the_allow_list(PROJECT) == []


def test_the_client_the_mcp_server_and_the_schema_are_thin():
    assert thin_layers_off_their_list(PROJECT) == []


def test_the_indexer_needs_no_http_layer():
    assert indexer_http(PROJECT) == []


def test_only_engines_reach_below_the_engine_protocol():
    assert below_the_engine_protocol(PROJECT) == []


def test_one_composition_root():
    assert outside_the_composition_root(PROJECT) == []


def test_no_module_is_over_the_size_limit():
    assert oversized(PROJECT) == []


PLANTED = {
    "search/core/planted_cycle.py": "from search.core import planted_cycle_b\n",
    "search/core/planted_cycle_b.py": "from search.core import planted_cycle\n",
    "search/core/planted_up.py": "import indexer.pipeline\n",
    "eval/planted_client.py": "from search.retrieval.service import SearchService\n",
    "search/schema/planted_thin.py": "from search.sessions.service import SessionService\n",
    "indexer/planted_http.py": "import httpx\nfrom search.api.app import create_app\n",
    "search/api/planted_engine.py": "from search.engines.embedded.engine import EmbeddedEngine\n",
    "bench/planted_root.py": "from search.ontology.service import TermService\nTermService('.', None)\n",
    "search/api/planted_kind.py": "def kind(settings):\n    return settings.engine_kind\n",
    "indexer/planted_big.py": "x = 1\n" * (MAX_LINES + 1),
}


def test_a_planted_violation_fails_every_rule(tmp_path: Path):
    """A copy of the project with one violation per rule planted: every rule reports its violation, so none of the
    tests above can pass whatever the code does."""
    for folder in (*PACKAGES, "bench"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__", "fixtures"))
    for rel, text in PLANTED.items():
        (tmp_path / rel).write_text(text)
    planted = Project(tmp_path)
    found = {rule.__name__: rule(planted) for rule in RULES}
    assert found["cycles"] == [["search.core.planted_cycle", "search.core.planted_cycle_b"]]
    assert found["search_imports_other_packages"] == ["search.core.planted_up imports indexer.pipeline"]
    assert found["clients_off_the_allow_list"] == ["eval.planted_client imports search.retrieval.service"]
    assert found["thin_layers_off_their_list"] == ["search.schema.planted_thin imports search.sessions.service"]
    assert found["indexer_http"] == ["indexer.planted_http imports search.api.app",
                                     "indexer.planted_http imports httpx"]
    assert found["below_the_engine_protocol"] == [
        "search.api.planted_engine imports search.engines.embedded.engine"]
    assert found["outside_the_composition_root"] == ["bench/planted_root.py:2 constructs TermService",
                                                     "search/api/planted_kind.py:2 reads engine_kind"]
    assert found["oversized"] == [f"indexer/planted_big.py: {MAX_LINES + 1} lines"]
