"""Curation agents over a running flysift service, exactly as an outside team writes them: they reach the service
only through ``search.client`` (or the MCP server's tools), never an engine. ``curation.agent`` is the interface and
registry, ``curation.lexical`` the model-free curator, ``curation.harnesses`` FlyAOC's LLM harnesses, and
``curation.runs``/``curation.cli`` the resumable batch runs (``flysift curate``). See docs/curation.md."""
