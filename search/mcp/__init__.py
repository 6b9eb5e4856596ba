"""The MCP server: FlyAOC's tools over the REST API."""
