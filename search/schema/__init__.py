"""The wire shapes: what the REST API accepts and answers, in one home that the API, the MCP server and the Python
client share.

``papers`` (search requests, build bodies), ``sessions`` (sessions, traces, submissions, coverage), ``hidden`` (hidden
terms as a request or a session names them), ``terms`` (term search, lookups, the label export), ``flyaoc`` (the
submission report), ``errors`` (the one error body). The domain objects a route answers with (papers, hits, stats)
are ``search.core.models``.

This package imports ``search.core`` and pydantic only, so a client (``search.client``, curation, eval, outside teams)
gets every shape without loading a service, a store or an engine (``tests/test_architecture.py`` checks it).
"""
