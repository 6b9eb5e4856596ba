"""Engines: the ``Engine`` protocol, the guards every engine applies, and the factory that picks an implementation.

Code outside ``search/engines/`` imports from this package only (the one exception is the cluster transport, which
the cluster session store shares): the protocols (``search.engines.protocol``), the publish and storage guards
(``search.engines.guards``) and :func:`open_engine`. The implementations live in ``embedded/`` (tantivy, no server)
and ``cluster/`` (Elasticsearch 8 / OpenSearch); they share the text analysis and term-search definitions of
``search.text``, never each other's code.
"""

from __future__ import annotations

from pathlib import Path

from search.core.config import Settings
from search.core.errors import DEFAULT_COLLECTION
from search.engines.guards import MIN_PUBLISH_SHARE, BuildRefused, StorageError, publish_refusal, storage_error
from search.engines.protocol import Build, Engine, TermEngine, VectorStore, VectorWriter

__all__ = ["MIN_PUBLISH_SHARE", "Build", "BuildRefused", "Engine", "StorageError", "TermEngine", "VectorStore",
           "VectorWriter", "collection_names", "open_engine", "open_local", "publish_refusal", "storage_error"]


def open_engine(settings: Settings, *, collection: str = DEFAULT_COLLECTION) -> Engine:
    """The engine the settings ask for: embedded unless a cluster URL (or ``engine = "cluster"``) is configured.

    A collection is an independent corpus (the FlyAOC papers are ``default``; IR test collections get their own).
    """
    if settings.engine_kind == "cluster":
        from search.engines.cluster.engine import ClusterEngine

        return ClusterEngine(settings, collection=collection)
    return open_local(settings.data_dir, collection=collection, min_publish_share=settings.min_publish_share,
                      index_threads=settings.index_threads, field_weights=settings.bm25(collection).field_weights)


def open_local(data_dir: Path | str, *, collection: str = DEFAULT_COLLECTION,
               min_publish_share: float = MIN_PUBLISH_SHARE, index_threads: int | None = None,
               field_weights: dict[str, float] | None = None) -> Engine:
    """The embedded engine over the files of one data directory, whatever else is configured: for what lives beside
    its builds (the dense index) and for tools and tests that hold a folder, not settings."""
    from search.engines.embedded.engine import EmbeddedEngine

    return EmbeddedEngine(data_dir, collection=collection, min_publish_share=min_publish_share,
                          index_threads=index_threads, field_weights=field_weights)


def collection_names(settings: Settings) -> list[str]:
    """The collections with a published build, by name, in the engine the settings ask for."""
    if settings.engine_kind == "cluster":
        from search.engines.cluster.browse import collection_names as on_cluster
        from search.engines.cluster.transport import Transport

        t = Transport(settings)
        try:
            return on_cluster(t, settings.cluster_index_prefix)
        finally:
            t.close()
    from search.engines.embedded.browse import collection_names as on_disk

    return on_disk(settings.data_dir)
