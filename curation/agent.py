"""The interface every curation agent implements, and the registry the CLI picks agents from.

An agent curates one gene through a running flysift service (``search.client.Client``) exactly as an outside team
would; its result is written as a FlyAOC run record so that FlyAOC's evaluator and ours both read it.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from search.client import Client

#: run-record fields FlyAOC's evaluator and ours read; everything else in the record is informational
USAGE_KEYS = ("papers_read", "turns", "input_tokens", "output_tokens", "cost_usd")


class ConfigError(Exception):
    """A configuration mistake every gene of a run would meet (no model, a missing extra, no API key): the run stops
    before its first gene with this one-line message."""


@dataclass
class GeneTask:
    """One gene to curate and the limits of the run (papers = the session budget; turns/cost/time per gene).

    ``symbol`` may be empty: the agent then takes the symbol of the session's gene (the service's lexicon).
    ``summary`` is FlyAOC's gene snapshot (the genes file's ``Summary`` column), shown to the harnesses that use it.
    ``budget_policy`` None means ``flyaoc`` (every full-text call charged) under ``parity``, else ``distinct``."""

    gene_id: str
    symbol: str
    budget: int
    synonym_policy: str = "snapshot"
    budget_policy: str | None = None
    hidden: str | None = None
    max_turns: int = 50
    max_cost_usd: float | None = None
    timeout_s: float | None = None
    parity: bool = False
    summary: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def effective_budget_policy(self) -> str:
        return self.budget_policy or ("flyaoc" if self.parity else "distinct")

    def session_options(self) -> dict[str, Any]:
        """Keyword arguments of ``Client.create_session`` for this task (one home for the mapping)."""
        opts: dict[str, Any] = dict(gene=self.gene_id, max_papers=self.budget, synonym_policy=self.synonym_policy,
                                    budget_policy=self.effective_budget_policy)
        if self.hidden:
            opts["hidden_terms"] = {"set": self.hidden} if self.hidden == "flyaoc" else \
                {"ids": [t for t in self.hidden.split(",") if t]}
        return opts


def empty_usage() -> dict[str, Any]:
    return {"papers_read": 0, "turns": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": None}


@dataclass
class GeneResult:
    """What a run of one gene produced. ``output`` is the last submission the service validated (None: failed)."""

    gene_id: str
    output: dict[str, Any] | None
    usage: dict[str, Any] = field(default_factory=empty_usage)
    error: str | None = None
    session_id: str | None = None
    transcript: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_run_record(self) -> dict[str, Any]:
        """FlyAOC's run-record shape ``{output, usage, error, …}``; the transcript is kept out (its own file)."""
        rec = {k: v for k, v in asdict(self).items() if k != "transcript"}
        rec["usage"] = {**empty_usage(), **self.usage}
        return rec


class Agent(Protocol):
    """A curation agent: curates ``task`` through ``client`` (which it may give a session id) and never raises for
    a failed gene - the failure goes into ``GeneResult.error``. An agent may also define ``preflight(task)``, which
    raises :class:`ConfigError` for a mistake every gene would meet (checked once, before the first gene)."""

    name: str

    def run(self, task: GeneTask, client: Client) -> GeneResult: ...


AgentFactory = Callable[[dict[str, Any]], Agent]

#: name -> factory(options) -> Agent; filled by :func:`register` from the modules in ``_PROVIDERS``
AGENTS: dict[str, AgentFactory] = {}

#: modules whose import registers agents (the LLM harnesses register theirs from their package)
_PROVIDERS = ("curation.lexical", "curation.harnesses")


def register(name: str, factory: AgentFactory) -> None:
    AGENTS[name] = factory


def load_agents() -> dict[str, AgentFactory]:
    """Import the provider modules (lazily, so no cycle through this module) and return the registry."""
    for mod in _PROVIDERS:
        if importlib.util.find_spec(mod) is not None:
            importlib.import_module(mod)
    return AGENTS


def make_agent(name: str, options: dict[str, Any] | None = None) -> Agent:
    agents = load_agents()
    if name not in agents:
        raise KeyError(f"unknown agent {name!r}; known: {', '.join(sorted(agents)) or 'none'}")
    return agents[name](dict(options or {}))
