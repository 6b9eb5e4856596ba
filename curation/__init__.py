"""Curation harnesses: agents and pipelines that curate genes by calling the flysift service through
``search.client`` (never an engine directly). No harness has landed yet; the FlyAOC-compatible tools they will use
are served by ``search.mcp.server`` and the REST API."""
