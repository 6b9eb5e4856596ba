"""Collection builds, the one write path: ``service`` opens a build of a collection, adds papers with their
passages, records what the engine refused, publishes behind the publish guard and aborts. Its two adapters are the
REST routes (``search.api.builds``) and the indexer's run (``indexer.pipeline``)."""
