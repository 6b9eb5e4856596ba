"""Sessions: one agent run with a reading budget, hidden terms, a synonym policy and a trace.

``models`` (server-side shapes and errors; the wire shapes are ``search.schema.sessions``), ``policy`` (the rules:
budget decisions, expansions, coverage), ``service`` (``SessionService``: what routes and the trace middleware call),
``store`` and ``cluster_store`` (where sessions live), ``keys`` (teams, API keys, scopes, rate limits).

Import the module you need: this package's ``__init__`` imports nothing, so reading a shape never loads the service
or a store.
"""
