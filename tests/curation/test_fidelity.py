"""FlyAOC fidelity and robustness of the LLM harnesses, against a real service with a scripted model behind the fake
OpenAI server: the gene summary and the lexicon's symbol reach every harness, ``parity`` is FlyAOC's accounting,
replays do not depend on per-session cursors, malformed tool calls are answered, concurrent readers respect the cost
cap, and transcripts store each message once."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from fake_openai import FakeOpenAI, completion
from test_harnesses import _prediction, _tool_results, api_key, gene, record, replay, scripted, service  # noqa: F401

from curation.agent import GeneTask, make_agent
from curation.harnesses import pipeline, prompts
from curation.llm import read_transcript, write_transcript
from curation.runs import GeneRow, RunConfig, read_genes
from search.client import Client

from helpers import needs_extra

pytestmark = needs_extra("curation")

SUMMARY = "Encodes a transcription factor needed in the developing eye (FlyBase gene snapshot)."


def _user(request_body: dict[str, Any]) -> str:
    return next(m["content"] for m in request_body["messages"] if m["role"] == "user")


# ---- the gene summary and the lexicon's symbol ----------------------------------------------------------------------

def test_genes_file_summary_reaches_the_task(tmp_path):
    csv = tmp_path / "genes.csv"
    csv.write_text('FBgn_ID,Gene_Symbol,Summary\nFBgn0000014,abd-A,"Homeotic gene, abdomen."\n')
    rows = read_genes(csv)
    assert rows == [GeneRow("FBgn0000014", "abd-A", "Homeotic gene, abdomen.")]
    task = RunConfig(agent="single").task(rows[0])
    assert task.summary == "Homeotic gene, abdomen." and "Gene summary: Homeotic gene, abdomen." in \
        prompts.task_prompt(task, "")
    tsv = tmp_path / "genes.txt"
    tsv.write_text("# a comment\nFBgn0000014\tabd-A\tHomeotic gene.\nFBgn0000015 Abd-B\nFBgn0000016\n")
    assert read_genes(tsv) == [GeneRow("FBgn0000014", "abd-A", "Homeotic gene."), GeneRow("FBgn0000015", "Abd-B"),
                               GeneRow("FBgn0000016")]


@pytest.mark.parametrize("agent", ["single", "multi", "memorization", "pipeline"])
def test_summary_and_the_lexicon_symbol_reach_every_harness(service, gene, agent):  # noqa: F811
    """Without a symbol the harness takes the session gene's (the service's lexicon): the task prompt names it and
    the pipeline searches with it; the summary is in the prompt of every harness that has a task prompt."""
    task = GeneTask(gene_id=gene.id, symbol="", budget=2, summary=SUMMARY)
    with FakeOpenAI(scripted) as fake:
        result = record(service, fake, agent, task, max_retries=0)
        bodies = [r["body"] for r in fake.requests]
    assert result.error is None, result.error
    assert result.extra["gene_symbol"] == gene.symbol
    if agent == "pipeline":  # its extraction prompts are per paper; it must have found and read the gene's papers
        assert result.usage["papers_read"] == 2
        assert all(_user(b).startswith(f"Gene: {gene.symbol} ({gene.id})") for b in bodies)
    else:
        first = _user(bodies[0])
        assert first.startswith(f"Annotate gene {gene.symbol} ({gene.id}).") and f"Gene summary: {SUMMARY}" in first


# ---- parity: FlyAOC's accounting --------------------------------------------------------------------------------

def test_parity_pipeline_reads_and_cuts_as_flyaoc(service, gene):  # noqa: F811
    task = GeneTask(gene_id=gene.id, symbol=gene.symbol, budget=2, parity=True)
    with FakeOpenAI(scripted) as fake:
        result = record(service, fake, "pipeline", task)
        bodies = [r["body"] for r in fake.requests]
    assert result.error is None, result.error
    assert {b.get("temperature") for b in bodies} == {1.0}  # FlyAOC's temperature
    with Client(service.url) as client:
        session = client.get_session(result.session_id)
        trace = client.get_trace(result.session_id)
        order = [h.pmcid for h in client.search_papers(gene.symbol, limit=20).hits]
    assert session.budget_policy == "flyaoc"  # every full-text call charged
    searches = [e.arguments["body"] for e in trace if e.tool == "search_papers"]
    assert [(a["query"], a.get("gene")) for a in searches] == [(gene.symbol, None), (gene.id, None)]
    assert session.papers_read == order[:2]  # search order, not gene-in-title first
    for body in bodies:
        text = _user(body).split("\n\n", 1)[1]
        assert text.startswith("ABSTRACT:\n") and "METHODS:" not in text
        assert len(text) <= pipeline.PARITY_CHARS + len(pipeline.PARITY_CUT_MARK)


def test_parity_pipeline_text_cut():
    page = {"title": "T", "abstract": "A" * 10,
            "sections": {"METHODS": ["m"], "DISCUSS": ["d"], "RESULTS": ["r" * 9000], "INTRO": ["i"]}}
    text = pipeline.parity_text(page)
    assert text.startswith("ABSTRACT:\nAAAAAAAAAA\n\nRESULTS:\nrrr") and text.endswith("\n... [truncated]")
    assert len(text) == pipeline.PARITY_CHARS + len(pipeline.PARITY_CUT_MARK)
    short = pipeline.parity_text({"abstract": "a", "sections": {"DISCUSS": ["d"], "INTRO": ["i"], "METHODS": ["m"]}})
    assert short == "ABSTRACT:\na\n\nINTRO:\ni\n\nDISCUSS:\nd"


def _paging(max_chars: int, continue_with_cursor: bool):
    """A single agent that reads the gene's first paper a page at a time and then submits."""
    def script(body: dict[str, Any], n: int) -> dict[str, Any]:
        user = body["messages"][1]["content"]
        symbol, gene_id = re.search(r"Annotate gene (\S+) \((FBgn\d+)\)", user).groups()
        results = _tool_results(body)
        step = sum(m["role"] == "assistant" for m in body["messages"])
        if step == 0:
            return completion(tool_calls=[("search_corpus", {"query": symbol, "gene": symbol, "limit": 3})])
        pmcid = results[0][0]["pmcid"]
        last = results[-1]
        if step == 1:
            return completion(tool_calls=[("get_paper_text", {"pmcid": pmcid, "max_chars": max_chars})])
        if continue_with_cursor and last.get("next_cursor"):
            return completion(tool_calls=[("get_paper_text", {"pmcid": pmcid, "max_chars": max_chars,
                                                              "cursor": last["next_cursor"]})])
        if step < 10 and "valid" not in last:
            return completion(tool_calls=[("submit_annotations",
                                           {"annotations": _prediction(gene_id, symbol, pmcid=pmcid)})])
        return completion("Submitted.")
    return script


def test_parity_single_agent_gets_whole_papers_and_flyaoc_tools(service, gene):  # noqa: F811
    task = GeneTask(gene_id=gene.id, symbol=gene.symbol, budget=2, parity=True)
    with FakeOpenAI(_paging(1000, continue_with_cursor=False)) as fake:
        result = record(service, fake, "single", task)
        offered = {t["function"]["name"] for t in fake.requests[0]["body"]["tools"]}
    assert result.error is None, result.error
    page = _tool_results(result.transcript[2]["request"])[1]
    assert "next_cursor" not in page and "note" not in page
    text = (page["abstract"] or "") + "".join(p for ps in page["sections"].values() for p in ps)
    assert page["total_chars"] > 1000 and len(text) == page["total_chars"]  # one answer, the whole paper
    assert result.usage["papers_read"] == 1
    assert offered == {"search_corpus", "get_paper_text", "search_go_terms", "search_anatomy_terms",
                       "search_stage_terms", "get_term_children", "submit_annotations"}


def test_replay_of_a_paged_read_does_not_depend_on_the_session(service, gene, tmp_path):  # noqa: F811
    """The model continues a paper with the cursor it was shown; the service signs cursors per session, so a replay
    (a new session) only matches because the model sees stable handles."""
    task = GeneTask(gene_id=gene.id, symbol=gene.symbol, budget=2)
    with FakeOpenAI(_paging(1000, continue_with_cursor=True)) as fake:
        result = record(service, fake, "single", task)
    assert result.error is None, result.error
    pages = [r for r in _tool_results(result.transcript[-1]["request"]) if isinstance(r, dict) and "pmcid" in r]
    assert pages[0]["next_cursor"] == "page-1" and len(pages) >= 2
    again = replay(service, "single", task, result, tmp_path)
    assert again.error is None and again.output == result.output and again.session_id != result.session_id


# ---- malformed tool calls -------------------------------------------------------------------------------------------

def test_tool_calls_without_id_or_function_name_are_answered_as_errors(service, gene):  # noqa: F811
    def script(body: dict[str, Any], n: int) -> dict[str, Any]:
        step = sum(m["role"] == "assistant" for m in body["messages"])
        if step == 0:
            reply = completion(tool_calls=[("get_budget", {}), ("get_budget", {})])
            calls = reply["choices"][0]["message"]["tool_calls"]
            del calls[0]["id"]
            del calls[1]["function"]["name"]
            return reply
        return completion("done")

    with FakeOpenAI(script) as fake:
        result = record(service, fake, "single", GeneTask(gene_id=gene.id, symbol=gene.symbol, budget=2))
    assert result.error is None, result.error
    messages = result.transcript[-1]["request"]["messages"]
    calls = messages[2]["tool_calls"]
    assert calls[0]["id"] == "call_missing_0_0" and calls[1]["function"]["name"] == ""
    answers = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == [calls[0]["id"], calls[1]["id"]]
    assert answers[0]["max_papers"] == 2 and answers[1]["code"] == "invalid_request"


# ---- the cost cap under concurrent readers -------------------------------------------------------------------------

def test_concurrent_readers_do_not_overshoot_the_cost_cap(service, gene):  # noqa: F811
    """Two readers start at once after the orchestrator spent two calls; the cap leaves room for one more call:
    the second reader is refused before its call (reserved cost), not after."""
    call = (100 * 0.25 + 20 * 2.0) / 1e6  # every call here: gpt-5-mini, 100 + 20 tokens
    cap = 2 * call + 1.5 * call
    with FakeOpenAI(scripted) as fake:
        result = record(service, fake, "multi", GeneTask(gene_id=gene.id, symbol=gene.symbol, budget=2,
                                                         max_cost_usd=cap))
        calls = len(fake.requests)
    assert result.error.startswith("cost_limit"), result.error
    assert calls == 3 and result.usage["cost_usd"] == pytest.approx(3 * call) and result.usage["cost_usd"] <= cap


# ---- bounded transcripts -----------------------------------------------------------------------------------------

def test_a_huge_tool_argument_is_stored_once_in_the_transcript(service, gene, tmp_path):  # noqa: F811
    huge = "x" * 3_000_000

    def script(body: dict[str, Any], n: int) -> dict[str, Any]:
        step = sum(m["role"] == "assistant" for m in body["messages"])
        if step == 0:
            return completion(tool_calls=[("search_corpus", {"query": huge})])
        if step < 4:
            return completion(tool_calls=[("get_budget", {})])
        return completion("done")

    with FakeOpenAI(script) as fake:
        result = record(service, fake, "single", GeneTask(gene_id=gene.id, symbol=gene.symbol, budget=2))
    assert result.error is None, result.error
    assert len(result.transcript) == 5
    answer = [m for m in result.transcript[1]["request"]["messages"] if m["role"] == "tool"][0]["content"]
    assert "error" in json.loads(answer) and len(answer) < 2000  # the tool's error quotes little of the argument
    path = tmp_path / "t.jsonl"
    write_transcript(path, result.transcript)
    # twice (the provider's raw response, the conversation's message), not once per later request (5 x 3 MB)
    assert path.stat().st_size < 6_500_000
    assert read_transcript(path) == json.loads(json.dumps(result.transcript))
    again = make_agent("single", {"replay": str(path)})
    with Client(service.url) as client:
        replayed = again.run(GeneTask(gene_id=gene.id, symbol=gene.symbol, budget=2), client)
    assert replayed.error is None and replayed.usage["turns"] == 5
