"""Passage vectors on the cluster: OpenSearch's k-NN plugin, ``knn_vector`` fields in Lucene HNSW graphs (cosine).

One vectors index per build of a collection's passages, as the embedded engine keeps its FAISS index beside a
build::

    <base>-vectors-<version>     alias <base>-vectors     _meta: the papers build, model, dim, backend, counts

A run writes a new versioned index (no replicas, refresh off) and records in its ``_meta`` how many passages of the
scan are in after each checkpoint, so an interrupted run of the same build and model continues; ``publish`` restores
replicas and refresh and moves the alias atomically. Searches check that the alias's vectors belong to the published
papers build: after ``flysift index corpus`` they are ``dense_unavailable`` until ``flysift index dense`` runs again.

Every passage document carries its paper's section types, so a paper search's section filter keeps every passage of
a paper with such a section (the embedded engine's meaning). Scores come back as cosines (the plugin answers
``(1 + cos) / 2`` for Lucene's cosine space). The plugin must be on every data node: an index that a node without it
would have to hold turns red, so the store checks first and refuses with one line. The Elasticsearch flavour has
its own ``dense_vector``; it is not wired here, and says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from search.core.errors import DenseUnavailable, IndexMissing
from search.engines.cluster.bulk import Bulk, Prepared, source_tail
from search.engines.cluster.snapshots import RESTORED
from search.engines.cluster.transport import ClusterRequestError

#: the k-NN plugin as a distribution installs it (name) and as deploy/cluster-local loads it from the classpath
KNN_PLUGIN_NAMES = frozenset({"opensearch-knn", "org.opensearch.knn.plugin.KNNPlugin"})
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 128
#: the plugin's largest k
MAX_K = 10_000
#: seconds a search trusts what it read of the published build and the vectors' meta
META_TTL_S = 10.0


def vector_mapping(dim: int, meta: dict[str, Any]) -> dict[str, Any]:
    keyword = {"type": "keyword"}
    # no _source: the vector lives in Lucene's vector files and the graph; as JSON it would take ~7 KB more a passage,
    # and the ids come back from doc values
    return {"dynamic": "strict", "_meta": meta, "_source": {"enabled": False}, "properties": {
        "id": keyword, "pmcid": keyword, "section_type": keyword, "paper_sections": keyword,
        "year": {"type": "integer"},
        "vector": {"type": "knn_vector", "dimension": dim, "method": {
            "name": "hnsw", "engine": "lucene", "space_type": "cosinesimil",
            "parameters": {"m": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION}}}}}


def knn_filter(filters: Any, paper_level: bool) -> dict[str, Any] | None:
    """``search.core.query.Filters`` as the k-NN query's filter (what ``DenseIndex._mask`` keeps, embedded)."""
    if filters is None:
        return None
    must: list[dict[str, Any]] = []
    if filters.year_from is not None or filters.year_to is not None:
        bounds = {k: v for k, v in (("gte", filters.year_from), ("lte", filters.year_to)) if v is not None}
        must.append({"range": {"year": bounds}})
    if filters.pmcids:
        must.append({"terms": {"pmcid": list(filters.pmcids)}})
    if filters.section_types:
        must.append({"terms": {"paper_sections" if paper_level else "section_type": list(filters.section_types)}})
    return {"bool": {"filter": must}} if must else None


def missing_plugin(nodes: dict[str, Any], wanted: frozenset[str] = KNN_PLUGIN_NAMES) -> list[str]:
    """Names of the data nodes (in a ``GET /_nodes/plugins`` answer) that lack the k-NN plugin."""
    lacking = []
    for node in nodes.get("nodes", {}).values():
        roles = node.get("roles", [])
        if roles and not any(r == "data" or r.startswith("data_") for r in roles):
            continue
        plugins = {p.get("name") for p in node.get("plugins", [])} | {p.get("classname") for p in
                                                                       node.get("plugins", [])}
        if not plugins & wanted:
            lacking.append(node.get("name", "?"))
    return sorted(lacking)


class ClusterVectors:
    """The ``VectorStore`` of one collection of a ``ClusterEngine`` (see the module docstring)."""

    def __init__(self, engine: Any, plugin_names: frozenset[str] = KNN_PLUGIN_NAMES):
        self.e = engine   # the ClusterEngine of the collection (not imported: it imports this module)
        self.alias = engine.alias("vectors")
        self.plugin_names = plugin_names
        self._meta: tuple[float, dict[str, Any], str] | None = None   # (when read, meta, index)

    # ---- checks -------------------------------------------------------------------------------------------------
    def check_plugin(self) -> None:
        """``DenseUnavailable`` (one line) unless every data node has the k-NN plugin (OpenSearch only)."""
        if self.e.t.flavour != "opensearch":
            raise DenseUnavailable("Dense search on the cluster uses OpenSearch's k-NN plugin; on Elasticsearch it is "
                                   "not available in this version (use the embedded engine for dense search).",
                                   details={"engine": "cluster", "flavour": self.e.t.flavour})
        nodes = self.e.t.request("GET", "/_nodes/plugins", what="listing plugins")
        lacking = missing_plugin(nodes, self.plugin_names)
        if lacking:
            raise DenseUnavailable(f"Dense search on the cluster needs the k-NN plugin (opensearch-knn, the "
                                   f"cluster's exact version) on every data node; {', '.join(lacking[:5])} "
                                   f"lack{'s' if len(lacking) == 1 else ''} it.",
                                   details={"nodes_without_plugin": lacking[:20]})

    def _live_build(self) -> str:
        """The published papers build (``IndexMissing`` before the first publish)."""
        return str(self.e._live_index("papers").rsplit("-papers-", 1)[1])

    # ---- writing ------------------------------------------------------------------------------------------------
    def writer(self, meta: dict[str, Any], *, resume: bool = True) -> VectorsWriter:
        self.check_plugin()
        return VectorsWriter(self, meta, resume)

    # ---- reading ------------------------------------------------------------------------------------------------
    def _current(self) -> tuple[dict[str, Any], str]:
        """(meta, index) of the searched vectors, checked against the published build (cached ``META_TTL_S``)."""
        now = time.monotonic()
        if self._meta is not None and now - self._meta[0] < META_TTL_S:
            return self._meta[1], self._meta[2]
        build = self._live_build()
        targets = self.e._alias_targets(self.alias)
        how = (f"build it with `flysift index dense --collection {self.e.collection}` (or POST "
               f"/v1/collections/{self.e.collection}/dense for a small collection)")
        if not targets:
            self.check_plugin()
            raise DenseUnavailable(f"Collection {self.e.collection!r} has no dense vectors on the cluster: {how}.",
                                   details={"collection": self.e.collection, "build": build})
        index = targets[0]
        res = self.e._request("GET", f"/{index}/_mapping", what="reading the vectors' meta")
        meta = next(iter(res.values()))["mappings"].get("_meta", {})
        if RESTORED.sub("", str(meta.get("build"))) != RESTORED.sub("", build):
            raise DenseUnavailable(f"The dense vectors of collection {self.e.collection!r} belong to build "
                                   f"{meta.get('build')}, not to the published build {build}: {how}.",
                                   details={"collection": self.e.collection, "build": build})
        self._meta = (now, meta, index)
        return meta, index

    def meta(self) -> dict[str, Any]:
        return dict(self._current()[0])

    def search(self, vector: Sequence[float], k: int, filters: Any = None,
               paper_level: bool = False) -> list[tuple[str, str, float]]:
        """The ``k`` nearest passages. The cached index may have been replaced since it was read (a restore switched
        the aliases and closed or deleted it, from another process): then it is read again and the search retried."""
        try:
            return self._search(vector, k, filters, paper_level)
        except (ClusterRequestError, IndexMissing) as e:
            if self._meta is None or not (isinstance(e, IndexMissing) or e.error_type == "index_closed_exception"):
                raise
            self._meta = None
            return self._search(vector, k, filters, paper_level)

    def _search(self, vector: Sequence[float], k: int, filters: Any,
                paper_level: bool) -> list[tuple[str, str, float]]:
        _, index = self._current()
        k = max(0, min(int(k), MAX_K))
        if k == 0:
            return []
        knn: dict[str, Any] = {"vector": [float(x) for x in vector], "k": k}
        flt = knn_filter(filters, paper_level)
        if flt is not None:
            knn["filter"] = flt
        body = {"size": k, "_source": False, "docvalue_fields": ["id", "pmcid"], "query": {"knn": {"vector": knn}}}
        try:
            res = self.e._request("POST", f"/{index}/_search", body, what="k-NN search")
        except ClusterRequestError as e:
            if "knn" in e.message and e.error_type in ("parsing_exception", "x_content_parse_exception"):
                self.check_plugin()
            raise
        return [(h["fields"]["id"][0], h["fields"]["pmcid"][0], 2.0 * float(h["_score"] or 0.0) - 1.0)
                for h in res["hits"]["hits"]]


class VectorsWriter:
    """Vectors of the published build being written into a new (or resumed) versioned index."""

    def __init__(self, store: ClusterVectors, meta: dict[str, Any], resume: bool):
        e = self.e = store.e
        self.store = store
        build = store._live_build()
        self.meta = {**meta, "build": build, "collection": e.collection, "complete": False, "done": 0}
        found = self._resumable(build) if resume else None
        if found:
            self.index, self.done = found
        else:
            self._drop_unpublished()
            self.index, self.done = e.new_index("vectors"), 0
            e._request("PUT", f"/{self.index}", {
                "settings": {"index": {"knn": True, "number_of_shards": e.shards, "number_of_replicas": 0,
                                       "refresh_interval": "-1"}},
                "mappings": vector_mapping(int(meta["dim"]), self.meta)}, what=f"creating {self.index}")
        self.meta["done"] = self.done
        self._bulk = Bulk(e.t, e.chunk_bytes, e.max_retries, e.backoff_s, concurrency=e.bulk_concurrency())

    def _unpublished(self) -> list[str]:
        live = set(self.e._alias_targets(self.store.alias))
        versions = self.e._request("GET", f"/{self.e.base}-vectors-2*/_mapping", params={"allow_no_indices": "true"},
                                   what="listing vectors indices")
        return sorted(i for i in versions if i not in live)

    def _resumable(self, build: str) -> tuple[str, int] | None:
        """An unfinished index of this build made with the same model, backend and dim, and how far it got."""
        for index in reversed(self._unpublished()):
            res = self.e._request("GET", f"/{index}/_mapping", what="reading a vectors index")
            meta = next(iter(res.values()))["mappings"].get("_meta", {})
            if meta.get("build") == build and all(meta.get(k) == self.meta.get(k)
                                                  for k in ("model", "dim", "backend", "dtype")):
                return index, int(meta.get("done", 0))
        return None

    def _drop_unpublished(self) -> None:
        old = self._unpublished()
        if old:
            self.e._request("DELETE", "/" + ",".join(old), what="dropping unfinished vectors")

    def write(self, rows: Sequence[tuple[str, str, str, int | None, Sequence[str]]], vectors: Any) -> None:
        for (pid, pmcid, section, year, sections), vec in zip(rows, vectors, strict=True):
            doc: dict[str, Any] = {"id": pid, "pmcid": pmcid, "section_type": section,
                                   "paper_sections": list(sections), "vector": [float(x) for x in vec]}
            if year is not None:
                doc["year"] = year
            self._bulk.add(Prepared(pid, [("vectors", pid, source_tail(pid, json.dumps(doc).encode()))]),
                           {"vectors": self.index})

    def checkpoint(self, done: int) -> None:
        self._bulk.flush()
        if self._bulk.failures:
            f = self._bulk.failures[0]
            raise DenseUnavailable(f"The cluster refused {len(self._bulk.failures)} passage vectors; first "
                                   f"{f.pmcid}: {f.reason}"[:500], details={"passage": f.pmcid})
        self.done = self.meta["done"] = done
        self.e._request("PUT", f"/{self.index}/_mapping", {"_meta": self.meta}, what="saving the vectors' progress")

    def publish(self, meta: dict[str, Any]) -> None:
        e = self.e
        self._bulk.flush()
        self._bulk.close()
        self.meta.update(meta, complete=True)
        e._request("PUT", f"/{self.index}/_mapping", {"_meta": self.meta}, what="saving the vectors' meta")
        e._request("PUT", f"/{self.index}/_settings", {"index": {"refresh_interval": None,
                                                                 "number_of_replicas": e.replicas}},
                   what="restoring refresh")
        e._request("POST", f"/{self.index}/_refresh", what="refresh")
        e._request("GET", f"/_cluster/health/{self.index}", params={"wait_for_status": "yellow"})
        old = e._alias_targets(self.store.alias)
        e._request("POST", "/_aliases", {"actions": [*({"remove": {"index": i, "alias": self.store.alias}}
                                                       for i in old),
                                                     {"add": {"index": self.index, "alias": self.store.alias}}]},
                   what="publishing the vectors")
        if old:
            e._request("DELETE", "/" + ",".join(old), params={"ignore_unavailable": "true"},
                       what="dropping old vectors")
        self.store._meta = None
