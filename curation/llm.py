"""A small chat loop of our own over the OpenAI Chat Completions protocol, recorded so that a run replays offline.

Why our own: every OpenAI-compatible server (OpenAI, vLLM, Ollama, llama.cpp's server, OpenRouter, a LiteLLM proxy)
speaks Chat Completions with tool calling, so one loop over the ``openai`` package reaches all of them by
``base_url``/``model``. The API key is read from the environment (``api_key_env``, default ``OPENAI_API_KEY``) when
the client is made and is never stored in a config, a transcript or a run directory.

What the loop adds over the package: retries with backoff that honour ``Retry-After`` on 429/5xx, timeouts and lost
connections (the package's own retries are off so there is one policy); a per-call timeout bounded by the gene's
deadline; token usage and cost from a :class:`PriceTable` (an unknown model reports tokens, cost ``None``); the
provider's ``system_fingerprint`` and the seed in every record. Every exchange (request, raw response, retries,
usage) is one JSON line, so :class:`ReplayBackend` can serve a run again exactly and refuse loudly when the
conversation diverges: that is the deterministic test double of the harnesses.

Tool schemas are the MCP server's own (``search.mcp.server`` lists them); :func:`openai_tools` converts them in one
place.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import logging
import os
import random
import time
import tomllib
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from search.core.extras import require

log = logging.getLogger("flysift.curation.llm")

#: USD per million tokens (input, cached input, output); public list prices, override with a file or option
DEFAULT_PRICES: dict[str, dict[str, float]] = {
    "gpt-5": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
    "gpt-5-mini": {"input": 0.25, "cached_input": 0.025, "output": 2.0},
    "gpt-5-nano": {"input": 0.05, "cached_input": 0.005, "output": 0.40},
    "gpt-4.1": {"input": 2.0, "cached_input": 0.50, "output": 8.0},
    "gpt-4.1-mini": {"input": 0.40, "cached_input": 0.10, "output": 1.60},
    "gpt-4o": {"input": 2.50, "cached_input": 1.25, "output": 10.0},
    "gpt-4o-mini": {"input": 0.15, "cached_input": 0.075, "output": 0.60},
}

#: statuses worth another try: timeouts, conflicts, rate limits, server errors
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
#: request keys that make up the conversation; a replay must see exactly these again
CONVERSATION_KEYS = ("messages", "tools", "tool_choice", "response_format")


class LLMError(Exception):
    """A model call failed for good (after the retries, or with a status no retry helps)."""


class LimitReached(LLMError):
    """A run limit was hit: ``kind`` is ``turns``, ``cost`` or ``timeout``."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class ReplayDivergence(LLMError):
    """A replayed run asked something the recorded run did not: the code or the service changed."""


# ---- prices ---------------------------------------------------------------------------------------------------------

@dataclass
class PriceTable:
    """USD per million tokens by model. Names match exactly, then without a provider prefix (``openai/gpt-5-mini``)
    and a date suffix (``gpt-5-mini-2025-08-07``)."""

    prices: dict[str, dict[str, float]] = field(default_factory=lambda: dict(DEFAULT_PRICES))

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: dict[str, dict[str, float]] | None = None) -> PriceTable:
        """The defaults, updated from a JSON or TOML file (``{model: {input, output, cached_input?}}``) and then
        from ``overrides``."""
        prices = dict(DEFAULT_PRICES)
        if path:
            p = Path(path)
            data = tomllib.loads(p.read_text()) if p.suffix == ".toml" else json.loads(p.read_text())
            prices.update(_check_prices(data, str(p)))
        if overrides:
            prices.update(_check_prices(overrides, "prices option"))
        return cls(prices)

    def lookup(self, model: str) -> dict[str, float] | None:
        for name in _model_names(model):
            if name in self.prices:
                return self.prices[name]
        return None

    def cost(self, model: str, usage: dict[str, int]) -> float | None:
        price = self.lookup(model)
        if price is None:
            return None
        cached = usage.get("cached_tokens", 0)
        fresh = usage.get("input_tokens", 0) - cached
        return (fresh * price["input"] + cached * price.get("cached_input", price["input"])
                + usage.get("output_tokens", 0) * price["output"]) / 1e6


def _check_prices(data: Any, where: str) -> dict[str, dict[str, float]]:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object of models")
    out = {}
    for model, price in data.items():
        if not isinstance(price, dict) or not {"input", "output"} <= set(price) or \
                not all(isinstance(v, int | float) and v >= 0 for v in price.values()):
            raise ValueError(f"{where}: {model!r} needs non-negative numbers 'input' and 'output' (USD per 1M "
                             "tokens), optionally 'cached_input'")
        out[str(model)] = {k: float(v) for k, v in price.items()}
    return out


def _model_names(model: str) -> Iterable[str]:
    yield model
    base = model.rsplit("/", 1)[-1]
    yield base
    parts = base.rsplit("-", 3)
    if len(parts) == 4 and all(p.isdigit() for p in parts[1:]):  # name-YYYY-MM-DD
        yield parts[0]


# ---- configuration --------------------------------------------------------------------------------------------------

@dataclass
class ModelConfig:
    """One model endpoint. Holds the *name* of the key's environment variable, never the key."""

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    call_timeout_s: float = 120.0
    max_retries: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 60.0

    @classmethod
    def from_options(cls, options: dict[str, Any], prefix: str = "") -> ModelConfig:
        """From agent options (``model``, ``base_url``, …; with ``prefix='reader_'`` the reader's, falling back to
        the main model's)."""
        def get(key: str) -> Any:
            return options.get(prefix + key, options.get(key)) if prefix else options.get(key)

        model = get("model") or os.environ.get("FLYSIFT_LLM_MODEL")
        if not model:
            raise ValueError("no model: pass --model NAME (or -o model=NAME, or set FLYSIFT_LLM_MODEL)")
        kw = {k: get(k) for k in ("base_url", "api_key_env", "temperature", "seed", "max_tokens", "call_timeout_s",
                                  "max_retries", "backoff_s", "max_backoff_s") if get(k) is not None}
        return cls(model=model, **kw)

    def public(self) -> dict[str, Any]:
        """What a run directory may record (everything here; the key itself is never in the config)."""
        return asdict(self)


def request_for(config: ModelConfig, messages: Sequence[dict[str, Any]],
                tools: Sequence[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    """The Chat Completions request body. Assistant tool-call turns carry ``content: ""`` (llama.cpp's server
    rejects ``null``)."""
    body: dict[str, Any] = {"model": config.model, "messages": [wire_message(m) for m in messages]}
    if tools:
        body["tools"] = list(tools)
    for key in ("temperature", "seed", "max_tokens"):
        if getattr(config, key) is not None:
            body[key] = getattr(config, key)
    body.update({k: v for k, v in extra.items() if v is not None})
    return body


def wire_message(message: dict[str, Any]) -> dict[str, Any]:
    msg = dict(message)
    if msg.get("role") == "assistant" and msg.get("content") is None:
        msg["content"] = ""
    return msg


def assistant_turn(message: dict[str, Any], seq: int = 0) -> dict[str, Any]:
    """The history entry for a model's answer: role, content (never null) and tool calls, nothing provider-specific.

    A tool call the provider sent without an ``id`` gets one (``call_missing_<seq>_<n>``, so the tool's answer can
    refer to it), one without a function name an empty name (the tool loop answers it as an error): a malformed call
    is the model's mistake to read about, never the end of the gene."""
    turn: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    calls = message.get("tool_calls")
    if calls and isinstance(calls, list):
        turn["tool_calls"] = []
        for n, c in enumerate(calls):
            c = c if isinstance(c, dict) else {}
            fn: dict[str, Any] = c["function"] if isinstance(c.get("function"), dict) else {}
            args = fn.get("arguments")
            turn["tool_calls"].append({
                "id": c["id"] if isinstance(c.get("id"), str) and c["id"] else f"call_missing_{seq}_{n}",
                "type": "function",
                "function": {"name": fn["name"] if isinstance(fn.get("name"), str) else "",
                             "arguments": args if isinstance(args, str) and args else
                             (json.dumps(args) if isinstance(args, dict) else "{}")}})
    return turn


def openai_tools(mcp_tools: Iterable[Any]) -> list[dict[str, Any]]:
    """MCP tool listings (``name``, ``description``, ``input_schema``) as Chat Completions function tools."""
    out = []
    for t in mcp_tools:
        schema = dict(getattr(t, "input_schema", None) or {"type": "object", "properties": {}})
        schema.pop("title", None)
        out.append({"type": "function", "function": {"name": t.name, "description": t.description or "",
                                                      "parameters": schema}})
    return out


# ---- backends -------------------------------------------------------------------------------------------------------

class Backend(Protocol):
    async def complete(self, request: dict[str, Any], stream: str, config: ModelConfig,
                       deadline: float | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The provider's response body and the failed attempts before it (``[{error, status?, wait_s}]``)."""
        ...


class OpenAIBackend:
    """Chat Completions over the ``openai`` package, with our retry policy (the package's is switched off)."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str | None, str], Any] = {}

    def _client(self, config: ModelConfig) -> Any:
        openai = require("openai", "curation", "the LLM harness")

        key = (config.base_url, config.api_key_env)
        if key not in self._clients:
            api_key = os.environ.get(config.api_key_env)
            if not api_key:
                if not config.base_url:
                    raise LLMError(f"no API key: set {config.api_key_env} (or give --base-url for a local server)")
                api_key = "unused"  # local servers (llama.cpp, Ollama, vLLM) take any key
            self._clients[key] = openai.AsyncOpenAI(api_key=api_key, base_url=config.base_url, max_retries=0)
        return self._clients[key]

    async def complete(self, request: dict[str, Any], stream: str, config: ModelConfig,
                       deadline: float | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        openai = require("openai", "curation", "the LLM harness")

        client = self._client(config)
        failures: list[dict[str, Any]] = []
        for attempt in range(config.max_retries + 1):
            timeout = config.call_timeout_s
            if deadline is not None:
                timeout = min(timeout, deadline - time.monotonic())
                if timeout <= 0:
                    raise LimitReached("timeout", "the gene's time limit ran out")
            try:
                raw = await client.chat.completions.with_raw_response.create(**request, timeout=timeout)
                return json.loads(raw.text), failures
            except openai.APIStatusError as exc:
                failure: dict[str, Any] = {"error": f"http_{exc.status_code}", "status": exc.status_code,
                                           "message": str(exc)[:300]}
                if exc.status_code not in RETRY_STATUSES:
                    raise LLMError(f"model call refused ({exc.status_code}): {str(exc)[:300]}") from exc
                wait = retry_after(exc.response.headers)
            except openai.APITimeoutError:
                failure, wait = {"error": "timeout", "timeout_s": round(timeout, 3)}, None
            except openai.APIConnectionError as exc:
                failure, wait = {"error": "connection", "message": str(exc)[:300]}, None
            except json.JSONDecodeError as exc:
                failure, wait = {"error": "bad_json", "message": str(exc)[:300]}, None
            if wait is None:
                wait = min(config.max_backoff_s, config.backoff_s * 2 ** attempt) * (1 + random.random() / 4)
            failure["wait_s"] = round(wait, 3)
            failures.append(failure)
            if attempt == config.max_retries:
                break
            if deadline is not None and time.monotonic() + wait >= deadline:
                raise LimitReached("timeout", f"the gene's time limit ran out while retrying ({failure['error']})")
            log.warning("model call %s failed (%s); retrying in %.1f s", stream, failure["error"], wait)
            await asyncio.sleep(wait)
        raise LLMError(f"model call failed after {len(failures)} attempts: {failures[-1]['error']}")


def retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date), if the server said."""
    try:
        if headers.get("retry-after-ms"):
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        value = headers.get("retry-after")
        if not value:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError):
        return None


class ReplayBackend:
    """Serves a recorded run: each stream's exchanges in order, after checking that the conversation sent now is
    the one recorded (:data:`CONVERSATION_KEYS`). Anything else is a :class:`ReplayDivergence`."""

    def __init__(self, exchanges: Iterable[dict[str, Any]]):
        self._queues: dict[str, deque[dict[str, Any]]] = defaultdict(deque)
        for ex in exchanges:
            if ex.get("kind", "exchange") == "exchange":
                self._queues[ex["stream"]].append(ex)

    async def complete(self, request: dict[str, Any], stream: str, config: ModelConfig,
                       deadline: float | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        queue = self._queues.get(stream)
        if not queue:
            raise ReplayDivergence(f"replay: the transcript has no further exchange for {stream!r}")
        recorded = queue.popleft()
        for key in CONVERSATION_KEYS:
            if recorded["request"].get(key) != request.get(key):
                where = _first_difference(recorded["request"].get(key), request.get(key))
                raise ReplayDivergence(f"replay: {stream!r} turn {recorded.get('turn')}: {key} differs from the "
                                       f"recording ({where})")
        return recorded["response"], list(recorded.get("retries") or [])

    def leftover(self) -> dict[str, int]:
        """Streams with recorded exchanges the replay never asked for."""
        return {s: len(q) for s, q in self._queues.items() if q}


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if type(a) is not type(b):
        return f"at {path or '/'}: recorded {json.dumps(a)[:120]}, now {json.dumps(b)[:120]}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}/{k}")
    if isinstance(a, list):
        if len(a) != len(b):
            return f"at {path or '/'}: {len(a)} items recorded, {len(b)} now"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{path}/{i}")
    return f"at {path or '/'}: recorded {json.dumps(a)[:120]}, now {json.dumps(b)[:120]}"


# ---- transcripts ----------------------------------------------------------------------------------------------------

def write_transcript(path: str | Path, exchanges: Iterable[dict[str, Any]]) -> None:
    """JSON lines, written under a temporary name and renamed (a killed run never leaves half a transcript).

    Each request repeats the whole conversation so far, so a transcript that wrote every request in full would grow
    with the square of its length (and a 3 MB tool argument would be stored once per later turn). Every message and
    every tool list is therefore written once, as a ``{"kind": "message"|"tools", "id", …}`` line before the first
    exchange that uses it, and exchanges refer to it by id (``{"$ref": id}``); :func:`read_transcript` puts the
    requests back together."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    written: set[str] = set()
    with open(tmp, "w", encoding="utf-8") as fh:
        def ref(kind: str, value: Any) -> dict[str, str]:
            key = _content_id(value)
            if key not in written:
                written.add(key)
                fh.write(json.dumps({"kind": kind, "id": key, kind: value}, ensure_ascii=False, sort_keys=True)
                         + "\n")
            return {"$ref": key}

        for ex in exchanges:
            request = ex.get("request")
            if ex.get("kind", "exchange") == "exchange" and isinstance(request, dict):
                request = dict(request)
                if isinstance(request.get("messages"), list):
                    request["messages"] = [ref("message", m) for m in request["messages"]]
                if isinstance(request.get("tools"), list):
                    request["tools"] = ref("tools", request["tools"])
                ex = {**ex, "request": request}
            fh.write(json.dumps(ex, ensure_ascii=False, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _content_id(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:24]


def read_transcript(path: str | Path) -> list[dict[str, Any]]:
    """The exchanges of a transcript, requests whole again (older transcripts without references read as they are)."""
    out = []
    parts: dict[str, Any] = {}

    def expand(value: Any, n: int) -> Any:
        if isinstance(value, dict) and set(value) == {"$ref"}:
            if value["$ref"] not in parts:
                raise ValueError(f"{path}:{n}: refers to {value['$ref']!r}, which no earlier line defines")
            return parts[value["$ref"]]
        return value

    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not a JSON line ({exc})") from None
        kind = row.get("kind", "exchange") if isinstance(row, dict) else None
        if kind in ("message", "tools"):
            parts[str(row.get("id"))] = row.get(kind)
            continue
        request = row.get("request") if isinstance(row, dict) else None
        if isinstance(request, dict):
            if isinstance(request.get("messages"), list):
                request["messages"] = [expand(m, n) for m in request["messages"]]
            if "tools" in request:
                request["tools"] = expand(request["tools"], n)
        out.append(row)
    return out


# ---- the per-gene model client --------------------------------------------------------------------------------------

def response_usage(response: dict[str, Any]) -> dict[str, int]:
    u = response.get("usage") or {}
    details = u.get("prompt_tokens_details") or {}
    out_details = u.get("completion_tokens_details") or {}
    return {"input_tokens": int(u.get("prompt_tokens") or 0), "output_tokens": int(u.get("completion_tokens") or 0),
            "cached_tokens": int(details.get("cached_tokens") or 0),
            "reasoning_tokens": int(out_details.get("reasoning_tokens") or 0)}


@dataclass
class LLM:
    """The model client of one gene run: every call is checked against the run's cost and time limits, accounted
    and recorded. One instance serves the orchestrator and its readers (streams name who is talking).

    The cost cap holds for concurrent calls too: a call is admitted only if what was spent, what the calls in flight
    are expected to cost and its own expected cost (each the mean cost of the calls so far) stay within the cap, and
    while the run's first call is in flight no other starts (nothing is known about the cost yet). A run overshoots
    only by what its calls cost above the mean."""

    backend: Backend
    prices: PriceTable = field(default_factory=PriceTable)
    max_cost_usd: float | None = None
    deadline: float | None = None  # time.monotonic() value
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    calls_by_stream: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    usage: dict[str, Any] = field(default_factory=lambda: {"model_calls": 0, "input_tokens": 0, "output_tokens": 0,
                                                            "cached_tokens": 0, "reasoning_tokens": 0,
                                                            "cost_usd": 0.0, "priced": True})
    fingerprints: set[str] = field(default_factory=set)
    _reserved: float = 0.0
    _inflight: int = 0
    _admission: asyncio.Condition | None = None

    @property
    def cost_usd(self) -> float | None:
        """The run's cost, or None when a model without a price was called (tokens are still counted)."""
        return self.usage["cost_usd"] if self.usage["priced"] else None

    async def _admit(self, model: str) -> float | None:
        """Wait until this call may start under the cost cap and reserve its expected cost (returned; None when no
        cap applies); raises :class:`LimitReached` when it would take the run past the cap."""
        if self.max_cost_usd is None or self.prices.lookup(model) is None:
            return None  # no cap, or a model without a price: a cap cannot stop it (documented)
        if self._admission is None:
            self._admission = asyncio.Condition()
        async with self._admission:
            while self._inflight and not self.usage["model_calls"]:
                await self._admission.wait()   # the first call tells what a call costs
            spent, done = self.usage["cost_usd"], self.usage["model_calls"]
            expected = spent / done if done else 0.0
            if spent >= self.max_cost_usd or (done and spent + self._reserved + expected > self.max_cost_usd):
                raise LimitReached("cost", f"cost limit reached (${spent:.6f} spent, ${self._reserved:.6f} in "
                                           f"flight, next call ~${expected:.6f}; cap ${self.max_cost_usd:.6f})")
            self._reserved += expected
            self._inflight += 1
            return expected

    async def _release(self, reserved: float | None) -> None:
        if self._admission is None or reserved is None:
            return
        async with self._admission:
            self._reserved = max(0.0, self._reserved - reserved)
            self._inflight = max(0, self._inflight - 1)
            self._admission.notify_all()

    async def chat(self, config: ModelConfig, stream: str, messages: Sequence[dict[str, Any]],
                   tools: Sequence[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
        """One model call; returns the assistant message (``content``, ``tool_calls``) as the provider sent it."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise LimitReached("timeout", "the gene's time limit ran out")
        request = request_for(config, messages, tools, **extra)
        reserved = await self._admit(config.model)
        started = time.monotonic()
        try:
            response, retries = await self.backend.complete(request, stream, config, self.deadline)
            self._account(config, stream, request, response, retries, started)
        finally:
            await self._release(reserved)
        choices = response.get("choices") or []
        if not choices or not isinstance(choices[0].get("message"), dict):
            raise LLMError(f"the model answered without a message: {json.dumps(response)[:300]}")
        return choices[0]["message"]

    def _account(self, config: ModelConfig, stream: str, request: dict[str, Any], response: dict[str, Any],
                 retries: list[dict[str, Any]], started: float) -> None:
        """Count a finished call's tokens and cost and record the exchange."""
        usage = response_usage(response)
        cost = self.prices.cost(response.get("model") or config.model, usage)
        if cost is None:
            cost = self.prices.cost(config.model, usage)
        turn = self.calls_by_stream[stream]
        self.calls_by_stream[stream] += 1
        for key in ("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens"):
            self.usage[key] += usage[key]
        self.usage["model_calls"] += 1
        if cost is None:
            self.usage["priced"] = False
        else:
            self.usage["cost_usd"] += cost
        if response.get("system_fingerprint"):
            self.fingerprints.add(response["system_fingerprint"])
        self.exchanges.append({"kind": "exchange", "seq": len(self.exchanges), "stream": stream, "turn": turn,
                               "request": request, "response": response, "retries": retries, "usage": usage,
                               "cost_usd": cost, "seed": config.seed,
                               "system_fingerprint": response.get("system_fingerprint"),
                               "elapsed_s": round(time.monotonic() - started, 3)})


def parse_json_object(text: str | None) -> dict[str, Any] | None:
    """The first JSON object in a model's text (bare, in a ``` fence, or embedded in prose), or None."""
    if not text:
        return None
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
            if isinstance(value, dict):
                return value
        except json.JSONDecodeError:
            pass
        start = text.find("{", start + 1)
    return None
