"""FlyAOC's four agent harnesses over any OpenAI-compatible model (Zhang et al. 2026, github.com/xingjian-zhang/flyaoc):
``memorization``, ``pipeline``, ``single`` and ``multi``. Importing the package registers them in
``curation.agent.AGENTS``; each factory takes the agent options (``model``, ``base_url``, ``replay``, …)."""

from __future__ import annotations

from curation.agent import register
from curation.harnesses.base import Harness
from curation.harnesses.multi import MultiAgent
from curation.harnesses.pipeline import Pipeline
from curation.harnesses.single import Memorization, SingleAgent

HARNESSES: dict[str, type[Harness]] = {h.name: h for h in (Memorization, Pipeline, SingleAgent, MultiAgent)}

for _name, _cls in HARNESSES.items():
    register(_name, _cls)

__all__ = ["HARNESSES", "Harness", "Memorization", "MultiAgent", "Pipeline", "SingleAgent"]
