"""Issue #26 item 1 for agents: MCP tools read plain text unless the server is started with the query language
(``flysift mcp --query-syntax``; a harness's ``query_syntax`` option), and FlyAOC parity runs never turn it on."""

from __future__ import annotations

import asyncio
import json

from curation.agent import GeneTask
from curation.harnesses.base import Harness
from search.client import AsyncClient, Client
from search.mcp.server import SYNTAX_NOTE, SessionTools, build_server


def _pmcids(text: str) -> set[str]:
    return {h["pmcid"] for h in json.loads(text)}


def test_agents_keep_the_plain_reading_unless_they_opt_in(live_server):
    with Client(live_server.url) as c:
        session = c.create_session("FBgn0000463", max_papers=3)

    async def run(query_syntax: bool) -> tuple[set[str], str]:
        api = AsyncClient(live_server.url, session_id=session.id)
        try:
            tools = SessionTools(api, session, query_syntax=query_syntax)
            found = _pmcids(await tools.search_corpus("wing -Dl"))
            bad = await tools.search_corpus('wing "disc')
            return found, bad
        finally:
            await api.aclose()

    plain, plain_bad = asyncio.run(run(False))
    assert plain == {"PMC100001", "PMC100004"} and _pmcids(plain_bad)   # - and " are text
    lang, lang_bad = asyncio.run(run(True))
    assert lang == {"PMC100004"} and json.loads(lang_bad)["code"] == "query_syntax"
    api = AsyncClient(live_server.url)
    assert SYNTAX_NOTE not in build_server(api, session).instructions
    assert SYNTAX_NOTE in build_server(api, session, query_syntax=True).instructions   # the agent is told


def test_a_parity_run_ignores_the_query_syntax_option():
    harness = Harness({"query_syntax": True})
    assert harness.query_syntax(GeneTask(gene_id="FBgn0000463", symbol="Dl", budget=3)) is True
    assert harness.query_syntax(GeneTask(gene_id="FBgn0000463", symbol="Dl", budget=3, parity=True)) is False
    assert Harness({}).query_syntax(GeneTask(gene_id="FBgn0000463", symbol="Dl", budget=3)) is False
