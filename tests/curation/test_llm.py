"""The model client against a fake OpenAI-compatible server on loopback: tool calls, usage and cost, retries that
honour Retry-After on 429, 5xx and timeouts, limits, the recorded transcript and its exact replay."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from fake_openai import FakeOpenAI, Reply, completion, error_body

from curation.llm import (
    LLM,
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
    retry_after,
    write_transcript,
)

from helpers import needs_extra

KEY_ENV = "FLYSIFT_TEST_LLM_KEY"
SECRET = "sk-test-do-not-record-0123456789"
TOOLS = [{"type": "function", "function": {"name": "get_budget", "description": "budget",
                                           "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)


def config(fake: FakeOpenAI, model: str = "gpt-5-mini", **kw) -> ModelConfig:
    return ModelConfig(model=model, base_url=fake.url, api_key_env=KEY_ENV, backoff_s=0.01, max_backoff_s=0.05,
                       **kw)


def chat(llm: LLM, cfg: ModelConfig, messages, tools=None, stream="agent"):
    return asyncio.run(llm.chat(cfg, stream, messages, tools))


@needs_extra("curation")
def test_tool_call_usage_cost_and_record():
    """A tool call comes back as sent, usage and cost add up, the seed and fingerprint are recorded, the
    assistant's tool-call turn goes back with content "" (never null), and the key is never recorded."""
    script = [completion(tool_calls=[("get_budget", {})], prompt_tokens=1000, completion_tokens=100,
                         cached_tokens=400),
              completion(content="done", prompt_tokens=2000, completion_tokens=50, fingerprint="fp_2")]
    with FakeOpenAI(lambda body, n: script[n]) as fake:
        llm = LLM(OpenAIBackend(), PriceTable())
        cfg = config(fake, seed=7, temperature=0.0)
        messages = [{"role": "user", "content": "go"}]
        msg = chat(llm, cfg, messages, TOOLS)
        assert msg["content"] is None and msg["tool_calls"][0]["function"]["name"] == "get_budget"
        messages += [assistant_turn(msg), {"role": "tool", "tool_call_id": "call_0", "content": "{}"}]
        assert chat(llm, cfg, messages, TOOLS)["content"] == "done"
        sent = [r["body"] for r in fake.requests]
        auth = fake.requests[0]["headers"].get("Authorization") or fake.requests[0]["headers"].get("authorization")
    assert auth == f"Bearer {SECRET}"
    assert sent[0]["seed"] == 7 and sent[0]["temperature"] == 0.0 and sent[0]["tools"] == TOOLS
    assert sent[1]["messages"][1] == {"role": "assistant", "content": "",
                                      "tool_calls": [{"id": "call_0", "type": "function",
                                                      "function": {"name": "get_budget", "arguments": "{}"}}]}
    assert llm.usage["input_tokens"] == 3000 and llm.usage["output_tokens"] == 150
    assert llm.usage["cached_tokens"] == 400 and llm.usage["model_calls"] == 2
    # gpt-5-mini: 600 fresh * 0.25 + 400 cached * 0.025 + 100 * 2.0, then 2000 * 0.25 + 50 * 2.0 (per million)
    assert llm.cost_usd == pytest.approx((600 * 0.25 + 400 * 0.025 + 100 * 2.0 + 2000 * 0.25 + 50 * 2.0) / 1e6)
    assert llm.fingerprints == {"fp_test", "fp_2"}
    assert [(e["stream"], e["turn"], e["seed"], e["system_fingerprint"]) for e in llm.exchanges] == \
        [("agent", 0, 7, "fp_test"), ("agent", 1, 7, "fp_2")]
    assert SECRET not in json.dumps(llm.exchanges) and SECRET not in json.dumps(cfg.public())


@needs_extra("curation")
def test_429_honours_retry_after_then_succeeds():
    replies = [Reply(error_body("slow down", "rate_limit"), 429, {"Retry-After": "0.2"}),
               Reply(error_body("slow down", "rate_limit"), 429, {"retry-after-ms": "50"}),
               completion(content="ok")]
    with FakeOpenAI(lambda body, n: replies[n]) as fake:
        llm = LLM(OpenAIBackend())
        assert chat(llm, config(fake), [{"role": "user", "content": "x"}])["content"] == "ok"
        assert len(fake.requests) == 3
    retries = llm.exchanges[0]["retries"]
    assert [(r["error"], r["wait_s"]) for r in retries] == [("http_429", 0.2), ("http_429", 0.05)]


@needs_extra("curation")
def test_500_and_timeout_are_retried_with_backoff():
    replies = [Reply(error_body("boom", "server_error"), 500), Reply(completion(content="late"), delay_s=3.0),
               completion(content="ok")]
    with FakeOpenAI(lambda body, n: replies[n]) as fake:
        llm = LLM(OpenAIBackend())
        msg = chat(llm, config(fake, call_timeout_s=0.5), [{"role": "user", "content": "x"}])
        assert msg["content"] == "ok" and len(fake.requests) == 3
    retries = llm.exchanges[0]["retries"]
    assert [r["error"] for r in retries] == ["http_500", "timeout"]
    assert all(0 < r["wait_s"] <= 0.05 * 1.25 for r in retries)  # exponential backoff, capped, with jitter


@needs_extra("curation")
def test_refusals_and_exhausted_retries_fail():
    with FakeOpenAI(lambda body, n: Reply(error_body("bad", "invalid_request_error"), 400)) as fake:
        with pytest.raises(LLMError, match="400"):
            chat(LLM(OpenAIBackend()), config(fake), [{"role": "user", "content": "x"}])
        assert len(fake.requests) == 1  # no retry helps a 400
    with FakeOpenAI(lambda body, n: Reply(error_body("down", "server_error"), 503)) as fake:
        with pytest.raises(LLMError, match="after 3 attempts"):
            chat(LLM(OpenAIBackend()), config(fake, max_retries=2), [{"role": "user", "content": "x"}])
        assert len(fake.requests) == 3


@needs_extra("curation")
def test_limits_cost_and_time():
    with FakeOpenAI(lambda body, n: completion(content="ok", prompt_tokens=1_000_000)) as fake:
        llm = LLM(OpenAIBackend(), max_cost_usd=0.2)
        chat(llm, config(fake), [{"role": "user", "content": "x"}])  # $0.25: the next call is refused
        with pytest.raises(LimitReached) as exc:
            chat(llm, config(fake), [{"role": "user", "content": "x"}])
        assert exc.value.kind == "cost" and len(fake.requests) == 1
        late = LLM(OpenAIBackend(), deadline=time.monotonic() - 1)
        with pytest.raises(LimitReached) as exc:
            chat(late, config(fake), [{"role": "user", "content": "x"}])
        assert exc.value.kind == "timeout"


@needs_extra("curation")
def test_unknown_model_reports_tokens_only_and_prices_override(tmp_path):
    with FakeOpenAI(lambda body, n: completion(content="ok", model="gemma3-270m")) as fake:
        llm = LLM(OpenAIBackend())
        chat(llm, config(fake, model="gemma3-270m"), [{"role": "user", "content": "x"}])
        assert llm.cost_usd is None and llm.usage["input_tokens"] == 100
        prices = tmp_path / "prices.toml"
        prices.write_text('[gemma3-270m]\ninput = 1.0\noutput = 10.0\n')
        priced = LLM(OpenAIBackend(), PriceTable.load(prices, {"gpt-5-mini": {"input": 0, "output": 0}}))
        chat(priced, config(fake, model="gemma3-270m"), [{"role": "user", "content": "x"}])
        assert priced.cost_usd == pytest.approx((100 * 1.0 + 20 * 10.0) / 1e6)
    table = PriceTable.load(overrides={"gpt-5-mini": {"input": 0, "output": 0}})
    assert table.cost("openai/gpt-5-mini-2025-08-07", {"input_tokens": 10, "output_tokens": 10}) == 0.0
    assert PriceTable().lookup("gpt-5-mini-2025-08-07") == PriceTable().lookup("gpt-5-mini")
    with pytest.raises(ValueError, match="input"):
        PriceTable.load(overrides={"m": {"output": 1}})


@needs_extra("curation")
def test_transcript_replays_exactly_and_divergence_is_loud(tmp_path):
    with FakeOpenAI(lambda body, n: completion(content=f"answer {n}", tool_calls=None)) as fake:
        live = LLM(OpenAIBackend())
        cfg = config(fake)
        first = chat(live, cfg, [{"role": "user", "content": "a"}])
        second = chat(live, cfg, [{"role": "user", "content": "b"}], stream="reader:1:PMC1")
    path = tmp_path / "t.jsonl"
    write_transcript(path, live.exchanges)
    recorded = read_transcript(path)
    assert recorded == json.loads(json.dumps(live.exchanges))

    replay = ReplayBackend(recorded)
    again = LLM(replay)
    cfg2 = ModelConfig(model="anything")  # nothing is called, so the model does not matter
    assert chat(again, cfg2, [{"role": "user", "content": "b"}], stream="reader:1:PMC1") == second  # streams apart
    assert chat(again, cfg2, [{"role": "user", "content": "a"}]) == first
    assert again.usage == live.usage and replay.leftover() == {}

    with pytest.raises(ReplayDivergence, match="messages differs"):
        chat(LLM(ReplayBackend(recorded)), cfg2, [{"role": "user", "content": "changed"}])
    with pytest.raises(ReplayDivergence, match="no further exchange"):
        chat(LLM(ReplayBackend(recorded)), cfg2, [{"role": "user", "content": "a"}], stream="reader:2:PMC9")


def test_mcp_tool_schemas_convert_in_one_place():
    """The OpenAI tools are the MCP server's listing, converted: same names, descriptions and JSON schemas."""
    from search.client import AsyncClient
    from search.core.models import Gene
    from search.mcp.server import build_server
    from search.schema.sessions import Session

    session = Session(id="ses_schema", team="t", gene=Gene(id="FBgn0000001", symbol="x"), max_papers=2, created_at=0)
    listed = asyncio.run(build_server(AsyncClient("http://127.0.0.1:9"), session).list_tools())
    tools = {t["function"]["name"]: t["function"] for t in openai_tools(listed)}
    assert set(tools) == {t.name for t in listed}
    paper = next(t for t in listed if t.name == "get_paper_text")
    assert tools["get_paper_text"]["description"] == paper.description
    assert tools["get_paper_text"]["parameters"]["properties"] == paper.input_schema["properties"]
    assert tools["get_paper_text"]["parameters"]["required"] == ["pmcid"]


def test_helpers():
    assert retry_after({"retry-after": "2"}) == 2.0 and retry_after({}) is None
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert parse_json_object('Here:\n```json\n{"a": {"b": 1}}\n```') == {"a": {"b": 1}}
    assert parse_json_object("no json {here") is None and parse_json_object(None) is None
