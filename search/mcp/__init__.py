"""The MCP server: FlyAOC's tools as a thin adapter over the REST API (``flysift mcp`` is ``search.cli.mcp``)."""

from search.mcp.server import SessionTools, build_server

__all__ = ["SessionTools", "build_server"]
