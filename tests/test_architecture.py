"""The dependency rules of docs/architecture.md, checked on the source: no import cycle among the project's modules,
``search`` imports none of the other packages, nothing outside ``search/engines/`` reaches below ``search.engines``
(except the cluster transport the shared session store uses), and curation/eval reach the service only as clients."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("search", "indexer", "curation", "eval")
#: the one module below search.engines that code outside the engines may import
ENGINE_EXCEPTIONS = ("search.engines.cluster.transport",)
#: what curation/ and eval/ must never import: they talk to a running service like any outside team
CLIENT_ONLY_FORBIDDEN = ("search.engines", "search.sessions.store", "search.sessions.cluster_store",
                         "search.ontology.service", "search.ontology.recognise", "search.retrieval", "search.text",
                         "search.api")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an import names (the longest known prefix), or None for third-party modules."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(mod: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            # `from pkg import submodule` depends on the submodule; `from pkg import name` on pkg
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for t in targets:
            r = _resolve(t)
            if r and r != mod:
                out.add(r)
    return out


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _cycles() -> list[list[str]]:
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
        for w in GRAPH[v]:
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

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def _violations(pred) -> list[str]:
    return sorted(f"{m} imports {t}" for m, ts in GRAPH.items() for t in ts if pred(m, t))


def test_the_graph_sees_the_project():
    assert {"search.core.models", "search.engines", "indexer.pipeline", "eval.flyaoc"} <= set(MODULES)
    assert "search.core.models" in GRAPH["search.retrieval.service"] or any(
        "search.core" in t for t in GRAPH["search.retrieval.service"])


def test_no_import_cycle():
    assert _cycles() == []


def test_search_imports_no_other_package():
    assert _violations(lambda m, t: m.startswith("search") and t.split(".")[0] in ("indexer", "curation", "eval")) == []


def test_only_engines_reach_below_the_engine_protocol():
    def bad(m: str, t: str) -> bool:
        return (t.startswith("search.engines.") and not m.startswith("search.engines")
                and not any(t == e or t.startswith(e + ".") for e in ENGINE_EXCEPTIONS))
    assert _violations(bad) == []


def test_curation_and_eval_are_clients():
    def bad(m: str, t: str) -> bool:
        return m.split(".")[0] in ("curation", "eval") and any(t == f or t.startswith(f + ".")
                                                                  for f in CLIENT_ONLY_FORBIDDEN)
    assert _violations(bad) == []
