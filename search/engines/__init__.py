"""Engines: the ``Engine`` protocol, the guards every engine applies, and the factory that picks an implementation.

Code outside ``search/engines/`` imports from this package and from ``search.engines.dense`` (the dense passage index,
which lives beside the engines and reaches a build's files through ``Engine.published_files``); never from the
implementations in ``embedded/`` (tantivy, no server) and ``cluster/`` (Elasticsearch 8 / OpenSearch), which share
the text analysis and term-search definitions of ``search.text``, never each other's code. The one exception is the
cluster transport, which the cluster session store shares. What an engine can do is its ``Capabilities``; the
configured kind (``Settings.engine_kind``) is read here and nowhere else.
"""

from __future__ import annotations

from pathlib import Path

from search.core.config import Settings
from search.core.errors import FlysiftError
from search.core.names import DEFAULT_COLLECTION
from search.core.query import BM25_B, BM25_K1
from search.engines.guards import MIN_PUBLISH_SHARE, BuildRefused, StorageError, publish_refusal, storage_error
from search.engines.protocol import (
    Backupable,
    Build,
    Capabilities,
    Engine,
    PublishedBuild,
    Snapshotting,
    TermEngine,
    VectorStore,
    VectorWriter,
)

__all__ = ["MIN_PUBLISH_SHARE", "Backupable", "Build", "BuildRefused", "Capabilities", "Engine", "PublishedBuild",
           "Snapshotting", "StorageError", "TermEngine", "VectorStore", "VectorWriter", "capabilities_of",
           "check_settings", "collection_names", "open_engine", "open_local", "publish_refusal", "storage_error"]


def capabilities_of(settings: Settings) -> Capabilities:
    """What the engine the settings choose can do, without opening it."""
    if settings.engine_kind == "cluster":
        from search.engines.cluster import CAPABILITIES as CLUSTER

        return CLUSTER
    from search.engines.embedded import CAPABILITIES as EMBEDDED

    return EMBEDDED


def check_settings(settings: Settings) -> Settings:
    """``settings`` if the chosen engine can apply them, else a one-line ``config_error``: a collection asking for
    BM25 k1/b on an engine that fixes them (tantivy) is refused at startup, not ignored."""
    if capabilities_of(settings).bm25_params:
        return settings
    for name, c in settings.collections.items():
        if c.bm25_k1 not in (None, BM25_K1) or c.bm25_b not in (None, BM25_B):
            asked = ", ".join(f"{k}={v}" for k, v in (("bm25_k1", c.bm25_k1), ("bm25_b", c.bm25_b)) if v is not None)
            raise FlysiftError(f"invalid setting collections.{name}: {asked} needs the cluster engine; the embedded "
                               f"engine (tantivy) fixes BM25 at k1={BM25_K1}, b={BM25_B}. Remove bm25_k1/bm25_b from "
                               "the collection or use the cluster engine (FLYSIFT_CLUSTER_URL)", code="config_error",
                               status=500)
    return settings


def open_engine(settings: Settings, *, collection: str = DEFAULT_COLLECTION) -> Engine:
    """The engine the settings ask for: embedded unless a cluster URL (or ``engine = "cluster"``) is configured.

    A collection is an independent corpus (the FlyAOC papers are ``default``; IR test collections get their own).
    """
    check_settings(settings)
    if settings.engine_kind == "cluster":
        from search.engines.cluster.engine import ClusterEngine

        return ClusterEngine(settings, collection=collection)
    return open_local(settings.data_dir, collection=collection, min_publish_share=settings.min_publish_share,
                      index_threads=settings.index_threads, field_weights=settings.bm25(collection).field_weights)


def open_local(data_dir: Path | str, *, collection: str = DEFAULT_COLLECTION,
               min_publish_share: float = MIN_PUBLISH_SHARE, index_threads: int | None = None,
               field_weights: dict[str, float] | None = None) -> Engine:
    """The embedded engine over the files of one data directory, whatever else is configured: for tools and tests
    that hold a folder, not settings."""
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
