"""FlyAOC's Multi-Agent harness: an orchestrator finds papers and delegates reading to reader sub-agents through
``analyze_papers_batch``; each reader sees one paper and resolves what it finds with the term tools.

Unlike FlyAOC, where the batch tool reads without any budget, every paper a reader opens is read through the same
session (``get_paper_text`` with the session's id), so it is charged to the same budget under the session's policy
and refused with the same error when the budget is spent. Papers are fetched one after another in the order asked
(which paper a full budget refuses is then fixed, and replays match); the readers then run concurrently. The reader
model is configurable (``reader_model``, ``reader_base_url``, … fall back to the orchestrator's).
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

from pydantic import Field

from curation.agent import GeneTask
from curation.harnesses import prompts
from curation.harnesses.base import FLYAOC_TOOLS, TERM_TOOLS, Harness, RunContext, ToolBox, tool_loop
from curation.llm import LimitReached, ModelConfig, parse_json_object

BATCH_TOOL = "analyze_papers_batch"
USAGE_KEYS = ("input_tokens", "output_tokens", "cached_tokens")


class MultiAgent(Harness):
    """Options beyond :class:`Harness`'s: ``reader_model`` (and ``reader_base_url``, ``reader_temperature``, …),
    ``reader_max_turns`` (default 10), ``reader_max_chars`` (text a reader gets, default 120000)."""

    name = "multi"

    def default_tools(self, task: GeneTask) -> tuple[str, ...]:
        return tuple(n for n in FLYAOC_TOOLS if n != "get_paper_text") + ("search_passages", BATCH_TOOL)

    def tool_names(self, task: GeneTask) -> tuple[str, ...]:
        names = tuple(self.options.get("tools") or self.default_tools(task))
        allowed = set(FLYAOC_TOOLS) | {BATCH_TOOL} if task.parity else set(names)
        return tuple(n for n in names if n in allowed and n != "get_paper_text")

    def model_prefixes(self) -> tuple[str, ...]:
        return ("", "reader_")

    def expected_calls(self, task: GeneTask, paper_tokens: int) -> list[tuple[str, int, int]]:
        """The orchestrator sees batch answers (~1500 tokens a paper); each reader its paper and a few searches."""
        return [("", 8, 4000 + 1500 * task.budget // 2), ("reader_", 3 * task.budget, paper_tokens + 2000)]

    async def curate(self, ctx: RunContext) -> dict[str, Any] | None:
        # under parity a reader sees its whole paper, as FlyAOC's readers do
        max_chars = None if ctx.task.parity else int(self.options.get("reader_max_chars", 120_000))
        reader = Readers(ctx, self.model_config("reader_", ctx.task.parity),
                         int(self.options.get("reader_max_turns", 10)), max_chars)

        async def analyze_papers_batch(
            pmcids: Annotated[list[str], Field(description="Papers to read, e.g. [\"PMC1440717\", \"PMC2345678\"]")],
            gene_symbol: Annotated[str, Field(description="The gene whose annotations the readers extract")],
        ) -> str:
            """Read papers with reader assistants, one per paper, in parallel. Each returns the gene's function and
            expression annotations resolved to ontology ids, with quotes, plus synonyms and key findings. Every
            paper spends the session's reading budget; papers past the budget come back in errors."""
            return json.dumps(await reader.batch(pmcids, gene_symbol), indent=2, ensure_ascii=False)

        tools = await ctx.tools(extra={BATCH_TOOL: analyze_papers_batch})
        reader.term_tools = await ToolBox.open(ctx.api, ctx.session, TERM_TOOLS)
        reader.fetch = await ToolBox.open(ctx.api, ctx.session, ("get_paper_text",))
        messages = [{"role": "system", "content": prompts.SYSTEM},
                    {"role": "user", "content": prompts.task_prompt(ctx.task, prompts.reading_multi(ctx.task))}]
        return await ctx.loop(messages, tools)


class Readers:
    """The paper-reader sub-agents of one run."""

    term_tools: ToolBox
    fetch: ToolBox

    def __init__(self, ctx: RunContext, config: ModelConfig, max_turns: int, max_chars: int | None):
        self.ctx, self.config, self.max_turns, self.max_chars = ctx, config, max_turns, max_chars
        self.batches = 0

    async def batch(self, pmcids: list[str], gene_symbol: str) -> dict[str, Any]:
        """FlyAOC's batch answer ``{papers, errors, usage}``."""
        self.batches += 1
        before = {k: self.ctx.llm.usage[k] for k in USAGE_KEYS}
        errors: list[str] = []
        texts: list[tuple[str, str]] = []
        for pmcid in dict.fromkeys(p.strip() for p in pmcids if p.strip()):
            text, error = await self._read(pmcid)
            if error:
                errors.append(f"{pmcid}: {error}")
            else:
                texts.append((pmcid, text))
        outcomes = await asyncio.gather(*(self._analyze(p, t, gene_symbol) for p, t in texts),
                                        return_exceptions=True)
        papers = []
        for (pmcid, _), outcome in zip(texts, outcomes, strict=True):
            if isinstance(outcome, LimitReached) and outcome.kind != "turns":
                raise outcome  # the run's cost or time limit ends the run, not just this reader
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome
                errors.append(f"{pmcid}: {outcome}")
            elif outcome is None:
                errors.append(f"{pmcid}: the reader returned no JSON object")
            else:
                papers.append({**outcome, "pmcid": pmcid})
        usage = {k: self.ctx.llm.usage[k] - before[k] for k in USAGE_KEYS}
        return {"papers": papers, "errors": errors, "usage": usage}

    async def _read(self, pmcid: str) -> tuple[str, str | None]:
        """The paper as the tool returns it (pages joined up to ``max_chars``), or the tool's error message."""
        page = json.loads(await self.fetch.call("get_paper_text", {"pmcid": pmcid}))
        if "error" in page:
            return "", page["error"]
        text = json.dumps({k: v for k, v in page.items() if k not in ("next_cursor", "note")}, ensure_ascii=False)
        while page.get("next_cursor") and (self.max_chars is None or len(text) < self.max_chars):
            page = json.loads(await self.fetch.call("get_paper_text", {"pmcid": pmcid, "cursor": page["next_cursor"]}))
            if "error" in page:
                break
            text += "\n" + json.dumps(page.get("sections", {}), ensure_ascii=False)
        return text[: self.max_chars] if self.max_chars is not None else text, None

    async def _analyze(self, pmcid: str, text: str, gene_symbol: str) -> dict[str, Any] | None:
        messages = [{"role": "system", "content": prompts.READER_SYSTEM + ("\n\n" + prompts.HIDDEN
                                                                           if self.ctx.task.hidden else "")},
                    {"role": "user", "content": prompts.reader_prompt(gene_symbol, pmcid, text)}]
        final = await tool_loop(self.ctx.llm, self.config, f"reader:{self.batches}:{pmcid}", messages,
                                self.term_tools, self.max_turns)
        return parse_json_object(final.get("content"))
