"""``flysift mcp``: serve FlyAOC's tools over MCP for one session (``search.mcp.server``), bound to an existing
session or a new one created through the REST API."""

from __future__ import annotations

import sys
from typing import Any

import click

from search.client import AsyncClient, Client, ClientError
from search.mcp.server import build_server
from search.schema.hidden import spec_from_text
from search.schema.sessions import Session

DEFAULT_URL = "http://127.0.0.1:8000"


def bind_session(api: Client, session_id: str | None = None, gene: str | None = None, **create: Any) -> Session:
    """The session the server serves: the one named, or a new one for ``gene`` (``create`` holds its options)."""
    if session_id:
        return api.get_session(session_id)
    if gene:
        return api.create_session(gene, **create)
    raise click.UsageError("Give --session ID (or FLYSIFT_SESSION_ID), or --gene to create a session.")


@click.command("mcp")
@click.option("--url", "api_url", envvar="FLYSIFT_URL", default=None,
              help=f"flysift REST API base URL (env FLYSIFT_URL; default {DEFAULT_URL}), as for eval and curate")
@click.option("--api", "api_alias", envvar="FLYSIFT_API_URL", default=None, hidden=True,
              help="Deprecated alias of --url (env FLYSIFT_API_URL); removed in the next release")
@click.option("--api-key", envvar="FLYSIFT_API_KEY", default=None, help="API key (env FLYSIFT_API_KEY)")
@click.option("--session", "session_id", envvar="FLYSIFT_SESSION_ID", default=None,
              help="Serve this existing session (env FLYSIFT_SESSION_ID)")
@click.option("--gene", envvar="FLYSIFT_GENE", default=None, help="Create a session for this gene (FBgn id or symbol)")
@click.option("--team", envvar="FLYSIFT_TEAM", default=None, help="Team of the new session")
@click.option("--max-papers", type=int, envvar="FLYSIFT_MAX_PAPERS", default=None, help="Reading budget (default 16)")
@click.option("--budget-policy", type=click.Choice(["distinct", "flyaoc"]), default=None,
              help="distinct: one unit per distinct paper; flyaoc: one per get_paper_text call")
@click.option("--synonym-policy", type=click.Choice(["none", "snapshot", "registered", "full"]), default=None)
@click.option("--hidden", default=None, help="Hide GO terms: 'flyaoc' (FlyAOC's 120 ids) and/or comma-separated ids")
@click.option("--hidden-descendants", is_flag=True, help="Also hide the descendants of the hidden ids")
@click.option("--label", default=None, help="Free-text label of the new session (harness, run)")
@click.option("--query-syntax", is_flag=True,
              help="Searches read the query language (+must -not AND OR NOT, title:, year:…); default: plain words "
                   "and phrases, as FlyAOC's tools")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP transport: bind address")
@click.option("--port", type=int, default=8765, show_default=True, help="HTTP transport: port (endpoint /mcp)")
def mcp(api_url: str | None, api_alias: str | None, api_key: str | None, session_id: str | None, gene: str | None,
        team: str | None, max_papers: int | None, budget_policy: str | None, synonym_policy: str | None,
        hidden: str | None, hidden_descendants: bool, label: str | None, query_syntax: bool, transport: str,
        host: str, port: int) -> None:
    """Serve FlyAOC's tools over MCP for one session (stdio by default)."""
    if api_url is None and api_alias is not None:
        print("flysift mcp: --api / FLYSIFT_API_URL are deprecated, use --url / FLYSIFT_URL", file=sys.stderr)
    api_url = api_url or api_alias or DEFAULT_URL
    try:
        hidden_terms = spec_from_text(hidden, hidden_descendants)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--hidden") from None
    try:
        with Client(api_url, api_key=api_key) as sync_api:
            session = bind_session(sync_api, session_id, gene, team=team, max_papers=max_papers,
                                   budget_policy=budget_policy, synonym_policy=synonym_policy,
                                   hidden_terms=hidden_terms, label=label)
    except ClientError as exc:
        raise click.ClickException(f"[{exc.code}] {exc.message}") from None
    print(f"flysift mcp: session {session.id} (gene {session.gene.symbol}, budget {session.max_papers}) via "
          f"{api_url}", file=sys.stderr)
    api = AsyncClient(api_url, api_key=api_key, session_id=session.id)
    server = build_server(api, session, query_syntax=query_syntax)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)


if __name__ == "__main__":  # pragma: no cover
    mcp()
