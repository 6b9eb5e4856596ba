"""FlyAOC's Single-Agent and Memorization harnesses: one tool loop over the session's tools (memorization: the
term and submission tools only, no literature)."""

from __future__ import annotations

from typing import Any

from curation.agent import GeneTask
from curation.harnesses import prompts
from curation.harnesses.base import FLYAOC_TOOLS, TERM_TOOLS, Harness, RunContext

#: flysift's tools beyond FlyAOC's, offered to the single agent unless ``parity`` is on
EXTRA_TOOLS = ("search_passages", "find_terms", "register_gene_name", "get_budget")


class SingleAgent(Harness):
    """One model with every literature, term and submission tool, in one loop."""

    name = "single"

    def default_tools(self, task: GeneTask) -> tuple[str, ...]:
        return FLYAOC_TOOLS + EXTRA_TOOLS

    async def curate(self, ctx: RunContext) -> dict[str, Any] | None:
        messages = [{"role": "system", "content": prompts.SYSTEM},
                    {"role": "user", "content": prompts.task_prompt(ctx.task, prompts.reading_single(ctx.task))}]
        return await ctx.loop(messages, await ctx.tools())


class Memorization(Harness):
    """The model's prior knowledge only: term search and submission, no paper is searched or read."""

    name = "memorization"

    def default_tools(self, task: GeneTask) -> tuple[str, ...]:
        return (*TERM_TOOLS, "get_term_children", "submit_annotations")

    def tool_names(self, task: GeneTask) -> tuple[str, ...]:
        literature = {"search_corpus", "get_paper_text", "search_passages", "analyze_papers_batch"}
        return tuple(n for n in super().tool_names(task) if n not in literature)

    def expected_calls(self, task: GeneTask, paper_tokens: int) -> list[tuple[str, int, int]]:
        return [("", 8, 4000)]

    async def curate(self, ctx: RunContext) -> dict[str, Any] | None:
        messages = [{"role": "system", "content": prompts.SYSTEM},
                    {"role": "user", "content": prompts.task_prompt(ctx.task, prompts.MEMORIZATION)}]
        return await ctx.loop(messages, await ctx.tools())
