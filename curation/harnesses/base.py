"""What the four LLM harnesses share: the session's tools as the MCP server publishes them, the tool loop, the run
limits and FlyAOC's output rule.

Tools run in process through ``search.mcp.server`` (its tool listing is the one source of the schemas, its tools call
the REST API through ``search.client.AsyncClient`` with the session's id), so a harness sees exactly what an MCP agent
sees: the same names, arguments, JSON answers and errors, the same budget refusals.

A run's output is the last submission the service validated (read back from the service). Without one, a JSON
object in the model's final message is submitted for validation (FlyAOC's fallback). With ``parity`` on, hitting the
turn or cost limit, the time limit, or any error yields no output, as in FlyAOC's runner; the other parity rules
(every full-text call charged, temperature 1.0, FlyAOC's tools, whole papers in one answer) are applied here and in
the harnesses (docs/curation.md has the table).

Replays must not depend on what changes between sessions: the service signs a paper's page cursor for the session
that read it, so the tool box shows the model a stable handle (``page-1``, ``page-2``, … in the order issued) and
maps it back to the real cursor when the model continues a paper.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from curation.agent import ConfigError, GeneResult, GeneTask, empty_usage
from curation.llm import (
    LLM,
    Backend,
    LimitReached,
    LLMError,
    ModelConfig,
    OpenAIBackend,
    PriceTable,
    ReplayBackend,
    ReplayDivergence,
    assistant_turn,
    openai_tools,
    parse_json_object,
    read_transcript,
)
from search.client import AsyncClient, Client, ClientError
from search.core.extras import ExtraMissing, require

log = logging.getLogger("flysift.curation.harness")

#: FlyAOC's sampling temperature (its runner's default for every harness), used under ``parity`` when none is set
PARITY_TEMPERATURE = 1.0
#: FlyAOC's agent-facing tools (spec §2); under ``parity`` a harness offers only these
FLYAOC_TOOLS = ("search_corpus", "get_paper_text", "search_go_terms", "search_anatomy_terms", "search_stage_terms",
                "get_term_children", "submit_annotations")
TERM_TOOLS = ("search_go_terms", "search_anatomy_terms", "search_stage_terms")


class ToolBox:
    """Some of a session's MCP tools (plus harness tools such as ``analyze_papers_batch``), as OpenAI function tools,
    executed in process. A call never raises: a failure is the JSON error text the model reads.

    ``whole_papers`` (FlyAOC parity): ``get_paper_text`` answers the whole paper in one result, the tool box
    following the page cursors itself (continuing a paper is free under every budget policy). Page cursors the model
    sees are stable handles (see the module docstring); the handle map is shared by :meth:`subset` copies."""

    def __init__(self, server: Any, names: Sequence[str], specs: list[dict[str, Any]], whole_papers: bool = False,
                 cursors: dict[str, str] | None = None):
        self.server, self.names, self.specs = server, tuple(names), specs
        self.whole_papers = whole_papers
        self._cursors: dict[str, str] = {} if cursors is None else cursors

    @classmethod
    async def open(cls, api: AsyncClient, session: Any, names: Sequence[str],
                   extra: dict[str, Callable[..., Awaitable[str]]] | None = None,
                   whole_papers: bool = False, query_syntax: bool = False) -> ToolBox:
        from search.mcp.server import build_server

        server = build_server(api, session, query_syntax=query_syntax)
        for name, fn in (extra or {}).items():
            server.add_tool(fn, name=name, structured_output=False)
        listed = {t.name: t for t in await server.list_tools()}
        missing = [n for n in names if n not in listed]
        if missing:
            raise LLMError(f"the MCP server does not offer {missing}")
        return cls(server, names, openai_tools(listed[n] for n in names), whole_papers)

    async def call(self, name: str, arguments: dict[str, Any] | str) -> str:
        if not name:
            return _error(f"The tool call names no function; call one of {list(self.names)}.", "invalid_request")
        if name not in self.names:
            return _error(f"Unknown tool {name!r}; use one of {list(self.names)}.", "unknown_tool")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except json.JSONDecodeError as exc:
                return _error(f"The arguments are not valid JSON ({exc}); send a JSON object.", "invalid_request")
        if not isinstance(arguments, dict):
            return _error("The arguments must be a JSON object.", "invalid_request")
        if name == "get_paper_text":
            return await self._paper(arguments)
        return await self._raw(name, arguments)

    async def _raw(self, name: str, arguments: dict[str, Any]) -> str:
        try:
            result = await self.server.call_tool(name, arguments)
        except Exception as exc:  # the SDK's ToolError: unknown or invalid arguments
            return _error(str(exc)[:1000], "invalid_request")
        return "".join(getattr(c, "text", "") for c in result.content)

    async def _paper(self, arguments: dict[str, Any]) -> str:
        """``get_paper_text`` with stable cursor handles, and whole papers when ``whole_papers``."""
        cursor = arguments.get("cursor")
        if isinstance(cursor, str) and cursor in self._cursors:
            arguments = {**arguments, "cursor": self._cursors[cursor]}
        if self.whole_papers:
            arguments = {**arguments, "max_chars": WHOLE_PAPER_PAGE_CHARS}
        text = await self._raw("get_paper_text", arguments)
        page = _json_object(text)
        if page is None or "error" in page:
            return text
        last = page
        while self.whole_papers and last.get("next_cursor"):
            more = _json_object(await self._raw("get_paper_text", {**arguments, "cursor": last["next_cursor"]}))
            if more is None or "error" in more:
                break
            _append_page(page, last, more)
            page["next_cursor"], last = more.get("next_cursor"), more
        if self.whole_papers:
            page.pop("note", None)
            if not page.get("next_cursor"):
                page.pop("next_cursor", None)
        if page.get("next_cursor"):
            handle = f"page-{len(self._cursors) + 1}"
            self._cursors[handle] = page["next_cursor"]
            page["next_cursor"] = handle
        return json.dumps(page, indent=2, ensure_ascii=False)


#: page size the tool box asks for when it assembles a whole paper (the MCP tool's largest)
WHOLE_PAPER_PAGE_CHARS = 50_000


def _append_page(paper: dict[str, Any], last: dict[str, Any], more: dict[str, Any]) -> None:
    """Add the page ``more`` to the assembled ``paper``; ``last`` is the page before it. A full page ends inside a
    paragraph (the service cuts one longer than what is left of the page), so the next page's first piece is joined
    to the last paragraph of its section type instead of starting a new one."""
    chars = len(last.get("abstract") or "") + sum(len(t) for ps in (last.get("sections") or {}).values() for t in ps)
    joined = chars < WHOLE_PAPER_PAGE_CHARS   # a page that is not full ended at a paragraph's end
    if more.get("abstract"):
        paper["abstract"] = (paper.get("abstract") or "") + more["abstract"]
        joined = True
    sections = paper.setdefault("sections", {})
    for typ, paragraphs in (more.get("sections") or {}).items():
        paragraphs = list(paragraphs)
        if not joined and paragraphs and sections.get(typ):
            sections[typ][-1] += paragraphs.pop(0)
        joined = True
        sections.setdefault(typ, []).extend(paragraphs)


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _error(message: str, code: str) -> str:
    return json.dumps({"error": message, "code": code}, indent=2)


async def tool_loop(llm: LLM, config: ModelConfig, stream: str, messages: list[dict[str, Any]], tools: ToolBox,
                    max_turns: int) -> dict[str, Any]:
    """Call the model, run the tools it asks for, repeat until it answers without tool calls (returned). Every model
    call is a turn; past ``max_turns`` the loop stops with :class:`LimitReached`."""
    for _ in range(max_turns):
        message = await llm.chat(config, stream, messages, tools.specs)
        turn = assistant_turn(message, len(llm.exchanges) - 1)  # the seq of the exchange that answered
        messages.append(turn)
        if not turn.get("tool_calls"):
            return turn
        for call in turn["tool_calls"]:
            result = await tools.call(call["function"]["name"], call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    raise LimitReached("turns", f"turn limit reached ({max_turns} model calls)")


class Harness:
    """The run of one gene: a session, a model client, the harness's ``curate`` and FlyAOC's output rule.

    Options (all harnesses): ``model``, ``base_url``, ``api_key_env``, ``temperature``, ``seed``, ``max_tokens``,
    ``call_timeout_s``, ``max_retries``, ``prices`` (a JSON/TOML file), ``price_overrides`` (a dict), ``replay`` (a
    transcript file, or a folder of ``<gene_id>.jsonl``, served instead of a model), ``tools`` (a list restricting
    the tools offered), ``query_syntax`` (searches read the query language; ignored under ``parity``), ``label``."""

    name = "harness"
    stream = "agent"

    def __init__(self, options: dict[str, Any] | None = None, backend: Backend | None = None):
        self.options = dict(options or {})
        self.backend = backend
        self.prices = PriceTable.load(self.options.get("prices"), self.options.get("price_overrides"))

    # ---- what a harness implements --------------------------------------------------------------------------------
    async def curate(self, ctx: RunContext) -> dict[str, Any] | None:
        """Work the gene; returns the model's final JSON object, if any (submitted when nothing valid was)."""
        raise LLMError(f"{type(self).__name__} does not curate")

    def query_syntax(self, task: GeneTask) -> bool:
        """Whether the searches read the query language: the ``query_syntax`` option, never under ``parity``
        (FlyAOC's tools read words and phrases)."""
        return bool(self.options.get("query_syntax")) and not task.parity

    def tool_names(self, task: GeneTask) -> tuple[str, ...]:
        names = tuple(self.options.get("tools") or self.default_tools(task))
        return tuple(n for n in names if n in FLYAOC_TOOLS) if task.parity else names

    def default_tools(self, task: GeneTask) -> tuple[str, ...]:
        return FLYAOC_TOOLS

    def expected_calls(self, task: GeneTask, paper_tokens: int) -> list[tuple[str, int, int]]:
        """For :meth:`estimate`: ``(model prefix, calls, input tokens per call)`` of a typical run. One tool loop
        that reads its papers keeps each read paper in context for about half of the remaining calls."""
        calls = 2 * task.budget + 4
        return [("", calls, 3000 + paper_tokens * task.budget // 2)]

    def estimate(self, task: GeneTask) -> dict[str, Any]:
        """A rough cost of one gene before running it (``--dry-run``): tokens from :meth:`expected_calls`
        (``est_paper_tokens``, default 10000, ~40,000 characters; ``est_output_tokens`` per call, default 1000,
        reasoning included), priced like a run. Unknown prices give ``cost_usd: None``."""
        paper_tokens = int(self.options.get("est_paper_tokens", 10_000))
        out_per_call = int(self.options.get("est_output_tokens", 1_000))
        total: dict[str, Any] = {"model_calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
        for prefix, calls, per_call in self.expected_calls(task, paper_tokens):
            usage = {"input_tokens": calls * per_call, "output_tokens": calls * out_per_call}
            cost = self.prices.cost(self.model_config(prefix).model, usage)
            total["model_calls"] += calls
            total["input_tokens"] += usage["input_tokens"]
            total["output_tokens"] += usage["output_tokens"]
            total["cost_usd"] = None if cost is None or total["cost_usd"] is None else total["cost_usd"] + cost
        total["basis"] = f"{paper_tokens} tokens per paper, {out_per_call} output tokens per call"
        return total

    # ---- the run --------------------------------------------------------------------------------------------------
    def model_config(self, prefix: str = "", parity: bool = False) -> ModelConfig:
        """The model of ``prefix`` (``""`` the agent, ``"reader_"`` the multi agent's readers). Under ``parity`` an
        unset temperature is FlyAOC's 1.0."""
        options = dict(self.options)
        if "model" not in options and self.options.get("replay"):
            options["model"] = "replay"
        config = ModelConfig.from_options(options, prefix)
        if parity and config.temperature is None:
            config.temperature = PARITY_TEMPERATURE
        return config

    def model_prefixes(self) -> tuple[str, ...]:
        """The models a run calls (``""``: the agent's; the multi agent adds its readers')."""
        return ("",)

    def preflight(self, task: GeneTask) -> None:
        """Raise :class:`ConfigError` for what every gene would meet: no model, the ``curation`` extra missing, no
        API key for a hosted model. A replayed run needs none of them."""
        try:
            configs = [self.model_config(prefix, task.parity) for prefix in self.model_prefixes()]
            if self.backend is not None or self.options.get("replay"):
                return
            require("openai", "curation", f"the {self.name} agent")
        except (ValueError, ExtraMissing) as exc:
            raise ConfigError(str(exc)) from None
        for config in configs:
            if not config.base_url and not os.environ.get(config.api_key_env):
                raise ConfigError(f"no API key for model {config.model!r}: set {config.api_key_env} (or give "
                                  "--base-url for a local OpenAI-compatible server)")

    def _backend(self, task: GeneTask) -> Backend:
        if self.backend is not None:
            return self.backend
        replay = self.options.get("replay")
        if replay:
            path = Path(replay)
            return ReplayBackend(read_transcript(path / f"{task.gene_id}.jsonl" if path.is_dir() else path))
        return OpenAIBackend()

    def run(self, task: GeneTask, client: Client) -> GeneResult:
        """Curate ``task`` in a new session; never raises for a failed gene (the failure is ``error``)."""
        started = time.monotonic()
        result = GeneResult(gene_id=task.gene_id, output=None)
        try:
            config = self.model_config(parity=task.parity)
            backend = self._backend(task)
            session = client.create_session(**task.session_options(),
                                            label=self.options.get("label") or f"flysift-curate {self.name}")
        except (ClientError, LLMError, OSError, ValueError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
            result.elapsed_s = round(time.monotonic() - started, 3)
            return result
        result.session_id = session.id
        if not task.symbol:  # the gene's current symbol from the service's lexicon, for every harness
            task = replace(task, symbol=session.gene.symbol)
        result.extra["gene_symbol"] = task.symbol
        deadline = started + task.timeout_s if task.timeout_s else None
        llm = LLM(backend, self.prices, max_cost_usd=task.max_cost_usd, deadline=deadline)
        limit_hit = False
        try:
            final = asyncio.run(self._arun(task, client, session, config, llm, deadline))
            self._fallback_submit(client, session.id, task, final)
        except LimitReached as exc:
            result.error, limit_hit = f"{exc.kind}_limit: {exc}", True
        except ReplayDivergence as exc:
            result.error = f"replay_divergence: {exc}"
            log.error("%s: %s", task.gene_id, exc)
        except (LLMError, ClientError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # an agent never takes the batch down with it
            log.exception("%s: harness %s failed", task.gene_id, self.name)
            result.error = f"{type(exc).__name__}: {exc}"
        if isinstance(backend, ReplayBackend) and result.error is None and backend.leftover():
            result.error = f"replay_divergence: recorded exchanges were never asked for: {backend.leftover()}"
        divergent = (result.error or "").startswith("replay_divergence")
        result.output = None if divergent or (task.parity and result.error) else \
            self._last_valid(client, session.id, result)
        if limit_hit and task.parity:
            result.extra["parity_rule"] = "limit hit: no output (FlyAOC)"
        result.transcript = llm.exchanges
        result.usage = self._usage(client, session.id, llm)
        result.extra.update({"agent": self.name, "model": config.model, "seed": config.seed,
                             "system_fingerprints": sorted(llm.fingerprints)})
        try:
            client.close_session(session.id)
        except ClientError as exc:
            log.warning("%s: could not close session %s: %s", task.gene_id, session.id, exc)
        result.elapsed_s = round(time.monotonic() - started, 3)
        return result

    async def _arun(self, task: GeneTask, client: Client, session: Any, config: ModelConfig, llm: LLM,
                    deadline: float | None) -> dict[str, Any] | None:
        async with AsyncClient(client.base_url, session_id=session.id) as api:
            api._http.headers.update(_auth_headers(client))
            ctx = RunContext(self, task, session, api, llm, config)
            work = self.curate(ctx)
            if deadline is None:
                return await work
            try:
                return await asyncio.wait_for(work, max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise LimitReached("timeout", f"the gene's time limit ran out ({task.timeout_s} s)") from None

    def _fallback_submit(self, client: Client, session_id: str, task: GeneTask, final: dict[str, Any] | None) -> None:
        """FlyAOC's fallback: without a valid submission, the JSON of the final message is submitted for validation
        (the service decides whether it counts)."""
        if final is None or any(s.valid for s in client.get_submissions(session_id)):
            return
        final.setdefault("gene_id", task.gene_id)
        final.setdefault("gene_symbol", task.symbol)
        client.submit(final, session_id)

    @staticmethod
    def _last_valid(client: Client, session_id: str, result: GeneResult) -> dict[str, Any] | None:
        try:
            valid = [s for s in client.get_submissions(session_id) if s.valid]
        except ClientError as exc:
            result.error = result.error or f"could not read the submissions: {exc}"
            return None
        return valid[-1].annotations if valid else None

    @staticmethod
    def _usage(client: Client, session_id: str, llm: LLM) -> dict[str, Any]:
        usage = {**empty_usage(), **{k: v for k, v in llm.usage.items() if k != "priced"}}
        usage["cost_usd"] = llm.cost_usd
        usage["turns"] = sum(n for s, n in llm.calls_by_stream.items() if s == "agent" or s.startswith("agent:"))
        with contextlib.suppress(ClientError):
            usage["papers_read"] = client.get_session(session_id).budget_used
        return usage


def _auth_headers(client: Client) -> dict[str, str]:
    """The caller's credentials for the async client of the tools (the same key the sync client carries)."""
    auth = client._http.headers.get("authorization")
    return {"Authorization": auth} if auth else {}


class RunContext:
    """What ``curate`` works with: the task, the session, the async API client, the model client and its config."""

    def __init__(self, harness: Harness, task: GeneTask, session: Any, api: AsyncClient, llm: LLM,
                 config: ModelConfig):
        self.harness, self.task, self.session, self.api = harness, task, session, api
        self.llm, self.config = llm, config

    async def tools(self, names: Sequence[str] | None = None,
                    extra: dict[str, Callable[..., Awaitable[str]]] | None = None) -> ToolBox:
        """The session's tools (default: the harness's); under ``parity`` papers come whole (FlyAOC's tool) and the
        searches read plain text."""
        return await ToolBox.open(self.api, self.session, names or self.harness.tool_names(self.task), extra,
                                  whole_papers=self.task.parity, query_syntax=self.harness.query_syntax(self.task))

    async def loop(self, messages: list[dict[str, Any]], tools: ToolBox) -> dict[str, Any] | None:
        """The single tool loop of the main agent; returns the JSON object of its final message, if any."""
        final = await tool_loop(self.llm, self.config, self.harness.stream, messages, tools, self.task.max_turns)
        return parse_json_object(final.get("content"))

