"""The cluster engine: the ``Engine`` protocol over Elasticsearch 8 or OpenSearch 2.x/3.x, one code path.

Indices (``base`` is ``<prefix>`` for the default collection, ``<prefix>-<collection>`` for others)::

    <base>-papers-<version>     papers of one build      alias <base>-papers   (what searches use)
    <base>-passages-<version>   passages of one build    alias <base>-passages
    <prefix>-terms-<ont>-<ver>  one ontology's terms     alias <prefix>-terms-<ont>
    <prefix>-builds             one small document per build: fingerprint, status, resume state

A build writes new versioned indices (refresh off, no replicas, strict mappings from index templates) and
``publish`` moves both aliases in one ``_aliases`` request, so a search through an alias sees the old build or the
new one, never a half-built index. A killed run leaves its indices and its ``-builds`` document behind; the next
``open_build`` with the same fingerprint continues them. Analysis is ``search.text.analysis`` expressed as custom
analyzers and scoring is BM25 (k1=1.2, b=0.75), as in the embedded engine, so both rank alike
(``tests/engines/test_parity.py``); a collection may set its own k1/b (``Settings.bm25``), which its builds' indices
are created with, and its field weights, written into the papers' one ``text`` field (``mappings``); a build is
resumed only under the k1/b and weights it was created with.

The concepts live in their own modules: ``transport`` (the client of each flavour, request errors), ``mappings``
(analysis, field mappings, paper documents, version names), ``query`` (query DSL, highlights), ``bulk`` (loading),
``terms`` (ontology term indexes), ``browse`` (facets, heads, collections), ``knn`` (vectors), ``snapshots``
(backups) and ``health``; this module is the engine, its builds and its searches.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal
from urllib.parse import quote

from search.core.checks import Check
from search.core.config import Settings
from search.core.errors import FlysiftError, IndexMissing, LimitExceeded, Unavailable
from search.core.models import (
    IndexStats,
    Paper,
    PaperHit,
    PaperSearchResults,
    Passage,
    PassageHit,
    PassageSearchResults,
)
from search.core.names import DEFAULT_COLLECTION, index_missing
from search.core.query import BM25_B, BM25_K1, PAPER_TEXT, EngineQuery, HighlightSpec
from search.core.supplements import SupplementChunk, SupplementPlace, paper_fields
from search.engines.cluster import CAPABILITIES
from search.engines.cluster.browse import Browse
from search.engines.cluster.bulk import Bulk, Prepared, source_tail
from search.engines.cluster.health import ClusterHealth, as_checks, cluster_health
from search.engines.cluster.knn import ClusterVectors
from search.engines.cluster.mappings import (
    BUILDS_MAPPING,
    FIELDED_LAYOUT,
    HEAD_FIELDS,
    PAPERS_LAYOUT,
    PASSAGE_MAPPING,
    SIMILARITY,
    analysis_settings,
    has_supplements,
    new_version,
    paper_doc,
    paper_from_doc,
    paper_mapping,
    passage_doc,
    read_similarity,
    similarity,
    written_layout,
    written_weights,
)
from search.engines.cluster.query import PASSAGE_FIELDS, compile_query, snippet
from search.engines.cluster.query import highlight as unified_highlight
from search.engines.cluster.snapshots import Snapshots
from search.engines.cluster.terms import TermIndexes
from search.engines.cluster.transport import (
    POOL_SIZE,
    RETRYABLE,
    ClusterRequestError,
    Transport,
    index_exists_error,
)
from search.engines.guards import BuildRefused, publish_refusal
from search.engines.protocol import PublishedBuild
from search.text.analysis import stem
from search.text.highlight import Highlighters, paper_highlight, passage_highlight
from search.text.snippets import Highlighter, paper_snippets

EXPORT_BATCH = 1000
#: ``_bulk`` requests in flight per data node holding a written primary when FLYSIFT_CLUSTER_BULK_CONCURRENCY is not set
#: (and never fewer than ``MIN_BULK_CONCURRENCY``): each node then has one request to index while the next one travels
BULK_PER_DATA_NODE = 2
MIN_BULK_CONCURRENCY = 2

log = logging.getLogger(__name__)


#: seconds a search trusts what it read of the published papers index's layout (one ``_mapping`` request per period;
#: a per-field query that meets a one-field build published since is read again and retried at once)
LAYOUT_TTL_S = 10.0


def _prepare(paper: Paper, passages: list[Passage], repeats: dict[str, int] | None = None) -> Prepared:
    """A paper group's bulk NDJSON without the build's index names (``Engine.preparer``: runs in indexer workers)."""
    supp = [p.text for p in passages if p.source == "supplement"]
    doc = json.dumps(paper_doc(paper, repeats, supp), ensure_ascii=False).encode()
    docs = [("papers", paper.pmcid, source_tail(paper.pmcid, doc))]
    docs += [("passages", p.id, source_tail(p.id, passage_doc(p))) for p in passages]
    return Prepared(paper.pmcid, docs)


# ---- builds --------------------------------------------------------------------------------------------------------
class ClusterBuild:
    """A build being written into ``<base>-papers-<id>`` and ``<base>-passages-<id>``; see the module docstring."""

    def __init__(self, engine: ClusterEngine, fingerprint: str, resume: bool):
        self._e = engine
        self.fingerprint = fingerprint
        found = engine._find_build(fingerprint) if resume else None
        if found and engine._similarity_of(engine._index("papers", found["id"])) != (engine.bm25.k1, engine.bm25.b):
            log.info("not resuming build %s: its indices were created with other BM25 k1/b", found["id"])
            found = None   # k1/b cannot change on an open index: a new build, created with the configured ones
        written = {f: float(n) for f, n in engine.bm25.repeats().items()}
        if found and engine._weights_of(engine._index("papers", found["id"])) != written:
            log.info("not resuming build %s: its papers were written with other field weights", found["id"])
            found = None   # (or before the one-field layout) papers of two scorings would mix
        if found and engine._layout_of(engine._index("papers", found["id"])) != PAPERS_LAYOUT:
            log.info("not resuming build %s: its papers index has an older layout", found["id"])
            found = None   # its mapping cannot take the title and abstract fields, or the authors
        self.id = found["id"] if found else new_version()
        self.state = (found.get("state") or {}) if found else {}
        self._created = found["created"] if found else time.time()
        self.papers_index, self.passages_index = engine._index("papers", self.id), engine._index("passages", self.id)
        engine._ensure_templates()
        if found:
            engine._check_mappings(self.papers_index, self.passages_index)
        else:
            engine._drop_abandoned(keep=None)
            for index in (self.papers_index, self.passages_index):
                engine._request("PUT", f"/{index}", {"settings": {"index": {"refresh_interval": "-1",
                                                                            "number_of_replicas": 0}}},
                                what=f"creating {index}")
        engine._request("PUT", f"/{self.papers_index},{self.passages_index}/_settings",
                        {"index": {"refresh_interval": "-1", "number_of_replicas": 0}}, what="disabling refresh")
        self._save("building")
        self._bulk = Bulk(engine.t, engine.chunk_bytes, engine.max_retries, engine.backoff_s,
                          concurrency=engine.bulk_concurrency())
        self._indices = {"papers": self.papers_index, "passages": self.passages_index}
        self.failures = self._bulk.failures
        self._added: set[str] = set()
        self._published = False

    def _save(self, status: str) -> None:
        self._e._request("PUT", f"/{self._e.builds_index}/_doc/{self.id}", {
            "collection": self._e.collection, "fingerprint": self.fingerprint, "status": status,
            "created": self._created, "updated": time.time(), "state": self.state}, params={"refresh": "true"},
            what="saving build state")

    def add(self, paper: Paper, passages: list[Passage]) -> None:
        self.add_prepared(_prepare(paper, passages, self._e.bm25.repeats()))

    def add_prepared(self, prepared: Prepared) -> None:
        """Buffer a prepared paper group; a duplicate of an added paper first waits for every request in flight, so
        its older passages are deleted after they are written, never before (the last one wins)."""
        pmcid = prepared.key
        if pmcid in self._added:
            self._bulk.flush()
            self._e._request("POST", f"/{self.passages_index}/_refresh", what="refresh before delete")
            self._e._request("POST", f"/{self.passages_index}/_delete_by_query",
                             {"query": {"term": {"pmcid": pmcid}}}, params={"refresh": "true"},
                             what="replacing a duplicate paper")
        self._added.add(pmcid)
        self._bulk.add(prepared, self._indices)

    def flush(self) -> None:
        self._bulk.flush()

    def commit(self, state: dict[str, Any]) -> None:
        """Send what is buffered and wait for every request in flight (the cluster acknowledges durable writes; a
        failed one raises here), then save the caller's resume state."""
        self._bulk.flush()
        self.state = state
        self._save("building")

    def count(self) -> int:
        self._bulk.flush()
        self._e._request("POST", f"/{self.papers_index}/_refresh", what="refresh")
        return self._e._request("GET", f"/{self.papers_index}/_count")["count"]

    def publish(self, *, allow_shrink: bool = False) -> None:
        """Restore refresh and replicas, wait for the shards, move both aliases at once, drop old versions. A build
        the publish guard refuses (``BuildRefused``) stays as it was: add more, publish with ``allow_shrink``, or
        abort it."""
        e = self._e
        indexed, live = self.count(), e.live_count()
        if refusal := publish_refusal(indexed, live, min_share=e.min_publish_share, allow_shrink=allow_shrink):
            raise BuildRefused(f"Build {self.id} of collection {e.collection!r} was not published: {refusal}.",
                               details={"build": self.id, "indexed": indexed, "live": live,
                                        "min_share": e.min_publish_share})
        self._bulk.close()
        both = f"{self.papers_index},{self.passages_index}"
        e._request("PUT", f"/{both}/_settings", {"index": {"refresh_interval": None,
                                                           "number_of_replicas": e.replicas}}, what="restoring refresh")
        e._request("POST", f"/{both}/_refresh", what="refresh")
        e._request("GET", f"/_cluster/health/{both}", params={"wait_for_status": "yellow"})
        actions = []
        for kind, index in (("papers", self.papers_index), ("passages", self.passages_index)):
            alias = e.alias(kind)
            actions += [{"remove": {"index": old, "alias": alias}} for old in e._alias_targets(alias)]
            actions.append({"add": {"index": index, "alias": alias}})
        e._request("POST", "/_aliases", {"actions": actions}, what="swapping aliases")
        self._save("published")
        self._published = True
        e._drop_old_versions()

    def abort(self, *, discard: bool = False) -> None:
        """Stop writing: buffered documents are dropped and requests in flight stopped (they come again after the
        last commit on resume); with ``discard`` the build's indices are deleted too, so a failed build holds no disk
        on the cluster."""
        self._bulk.close()
        if discard and not self._published:
            self._e._drop(self.id)

    @property
    def retries(self) -> int:
        """Bulk requests retried after 429/5xx answers so far."""
        return self._bulk.retries


# ---- the engine ----------------------------------------------------------------------------------------------------
class ClusterEngine(Browse, TermIndexes, Snapshots):
    """The ``Engine`` protocol over an Elasticsearch 8 or OpenSearch cluster (facets, heads, document frequencies:
    ``Browse``; ontology terms: ``TermIndexes``; backups: ``Snapshots``)."""

    name = "cluster"
    capabilities = CAPABILITIES

    def __init__(self, settings: Settings, collection: str = DEFAULT_COLLECTION, *, chunk_bytes: int = 5_000_000,
                 max_retries: int = 10, backoff_s: float = 0.5, bulk_concurrency: int | None = None):
        self.t = Transport(settings)
        self.collection = collection
        self.prefix = settings.cluster_index_prefix
        self.base = self.prefix if collection == DEFAULT_COLLECTION else f"{self.prefix}-{collection}"
        self.builds_index = f"{self.prefix}-builds"
        self.shards, self._replicas = settings.cluster_shards, settings.cluster_replicas
        self.keep, self.snapshot_location = settings.cluster_keep_versions, settings.cluster_snapshot_location
        self.min_publish_share = settings.min_publish_share
        self.chunk_bytes, self.max_retries, self.backoff_s = chunk_bytes, max_retries, backoff_s
        self._bulk_concurrency = bulk_concurrency or settings.cluster_bulk_concurrency
        #: the collection's BM25 parameters: k1/b for the indices of new builds, field weights for their papers
        self.bm25 = settings.bm25(collection)
        #: (when read, whether the published papers index is one-field, whether it has ``supp``, whether it has
        #: title and abstract fields): ``_paper_fields``
        self._layout: tuple[float, bool, bool, bool] | None = None
        self._vectors: ClusterVectors | None = None

    @property
    def replicas(self) -> int:
        """Replica copies of the indices this engine creates: the setting, else by the cluster's data nodes (read
        once: ``Transport.replicas``)."""
        if self._replicas is None:
            self._replicas = self.t.replicas(None)
        return self._replicas

    # ---- plumbing -------------------------------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None,
                 what: str | None = None, ndjson: bool = False) -> Any:
        """A request whose 429/5xx answers mean 'try later' (503 + Retry-After) and whose 404 on an alias means
        'no index yet'."""
        try:
            return self.t.request(method, path, body, params, ndjson=ndjson, what=what or f"{method} {path}")
        except ClusterRequestError as e:
            if e.http_status in RETRYABLE:
                raise Unavailable(f"The search cluster is overloaded or recovering ({e.message}). Retry later.",
                                  retry_after=2, details=e.details) from None
            if e.error_type == "index_not_found_exception":
                raise index_missing(self.collection, f"Collection {self.collection!r} has no index on the cluster yet "
                                    f"({e.message}): run `flysift index corpus …` first.", details=e.details) from None
            if "Result window is too large" in e.message:
                raise LimitExceeded(f"Pages beyond 10,000 hits are not served; use the export (search_after). "
                                    f"{e.message}") from None
            raise

    def _index(self, kind: str, version: str) -> str:
        return f"{self.base}-{kind}-{version}"

    def new_index(self, kind: str) -> str:
        """The name of a new versioned index of ``kind`` (vectors: ``search.engines.cluster.knn``)."""
        return self._index(kind, new_version())

    def alias(self, kind: str) -> str:
        return f"{self.base}-{kind}"

    def _alias_targets(self, alias: str) -> list[str]:
        try:
            return sorted(self.t.request("GET", f"/_alias/{alias}", what="reading aliases"))
        except ClusterRequestError as e:
            if e.http_status == 404:
                return []
            raise

    def _versions(self, kind: str) -> list[str]:
        """Existing versioned indices of one kind, oldest first (versions are timestamps)."""
        return sorted(self._request("GET", f"/{self.base}-{kind}-2*/_settings/index.creation_date",
                                    params={"allow_no_indices": "true"}))

    def _ensure_templates(self) -> None:
        """Index templates for both kinds: analysis, BM25, shards and strict mappings of every future version."""
        for kind, mapping in (("papers", self._paper_mapping()), ("passages", PASSAGE_MAPPING)):
            self._request("PUT", f"/_index_template/{self.base}-{kind}", {
                "index_patterns": [f"{self.base}-{kind}-2*"], "priority": 100,
                "template": {"settings": self._index_settings(similarity(self.bm25.k1, self.bm25.b)),
                             "mappings": mapping}}, what="index template")
        try:
            self.t.request("PUT", f"/{self.builds_index}", {
                "settings": {"number_of_shards": 1, "number_of_replicas": self.replicas},
                "mappings": BUILDS_MAPPING})
        except ClusterRequestError as e:
            if not index_exists_error(e):
                raise

    def _index_settings(self, sim: dict[str, Any] = SIMILARITY) -> dict[str, Any]:
        return {"number_of_shards": self.shards, "number_of_replicas": self.replicas,
                "similarity": sim, "analysis": analysis_settings()}

    def _paper_mapping(self) -> dict[str, Any]:
        return paper_mapping(self.bm25.repeats())

    def _weights_of(self, index: str) -> dict[str, float] | None:
        """The field weights a papers index (or the one behind an alias) was written with; None before the one-field
        layout."""
        res = self._request("GET", f"/{index}/_mapping", what=f"reading the mapping of {index}")
        return written_weights(next(iter(res.values()), {}))

    def _layout_of(self, index: str) -> int | None:
        res = self._request("GET", f"/{index}/_mapping", what=f"reading the mapping of {index}")
        return written_layout(next(iter(res.values()), {}))

    def _paper_fields(self, source: str | None = None) -> dict[str, float]:
        """What paper queries search: ``text`` on a one-field index, else each field (``Bm25Params.per_field``),
        with ``supp`` under the ``source`` filter (``paper_fields``). Read from the published index at most every
        ``LAYOUT_TTL_S`` seconds."""
        now = time.monotonic()
        if self._layout is None or now - self._layout[0] > LAYOUT_TTL_S:
            res = self._request("GET", f"/{self.alias('papers')}/_mapping", what="reading the papers mapping")
            mapping: dict[str, Any] = next(iter(res.values()), {})
            one_field = written_weights(mapping) is not None
            self._layout = (now, one_field, has_supplements(mapping),
                            not one_field or (written_layout(mapping) or 0) >= FIELDED_LAYOUT)
        return paper_fields(PAPER_TEXT if self._layout[1] else self.bm25.per_field(), self._layout[2], source)

    def _fielded(self) -> bool:
        """Whether the published papers index has the title and abstract fields (read with ``_paper_fields``)."""
        self._paper_fields()
        return self._layout is not None and self._layout[3]

    def _similarity_of(self, index: str) -> tuple[float, float] | None:
        """(k1, b) an existing index was created with."""
        res = self._request("GET", f"/{index}/_settings/index.similarity.*", what=f"reading the similarity of {index}")
        return read_similarity(next(iter(res.values()), {}))

    def _check_mappings(self, *indices: str) -> None:
        """Apply the current mappings to a resumed build's indices; a conflict names the field."""
        for index in indices:
            mapping = self._paper_mapping() if "-papers-" in index else PASSAGE_MAPPING
            try:
                self.t.request("PUT", f"/{index}/_mapping", mapping, what=f"mapping of {index}")
            except ClusterRequestError as e:
                field = e.details.get("field")
                raise FlysiftError(f"The mapping of {index} conflicts with this version of flysift at field "
                                   f"{field!r}: {e.message}. Start a new build (resume=False).",
                                   code="mapping_conflict", status=409,
                                   details={"index": index, "field": field}) from None

    def _builds(self, **match: str) -> list[dict[str, Any]]:
        terms = [{"term": {k: v}} for k, v in {"collection": self.collection, **match}.items()]
        try:
            res = self.t.request("POST", f"/{self.builds_index}/_search", {
                "query": {"bool": {"filter": terms}}, "size": 1000, "sort": [{"created": "desc"}]})
        except ClusterRequestError as e:
            if e.error_type == "index_not_found_exception":
                return []
            raise
        return [{"id": h["_id"], **h["_source"]} for h in res["hits"]["hits"]]

    def _find_build(self, fingerprint: str) -> dict[str, Any] | None:
        """The newest unpublished build of the same input whose indices still exist."""
        existing = set(self._versions("papers"))
        for b in self._builds(status="building", fingerprint=fingerprint):
            if self._index("papers", b["id"]) in existing:
                return b
        return None

    def _drop(self, version: str) -> None:
        names = [self._index(k, version) for k in ("papers", "passages")]
        self._request("DELETE", "/" + ",".join(names), params={"ignore_unavailable": "true"}, what="dropping a version")
        try:
            self.t.request("DELETE", f"/{self.builds_index}/_doc/{version}", params={"refresh": "true"})
        except ClusterRequestError as e:
            if e.http_status != 404:
                raise

    def _drop_abandoned(self, keep: str | None) -> None:
        """Unfinished builds of other inputs can never be published: drop them (one writer per collection)."""
        for b in self._builds(status="building"):
            if b["id"] != keep:
                self._drop(b["id"])

    def _drop_old_versions(self) -> None:
        live = {i.rsplit("-papers-", 1)[1] for i in self._alias_targets(self.alias("papers"))}
        published = [b["id"] for b in self._builds(status="published")]  # newest first
        for version in published[max(self.keep, 1):]:
            if version not in live:
                self._drop(version)

    def live_count(self) -> int:
        """Papers in the published version (0 when there is none)."""
        try:
            return self._request("GET", f"/{self._live_index('papers')}/_count")["count"]
        except IndexMissing:
            return 0

    def _live_index(self, kind: str) -> str:
        targets = self._alias_targets(self.alias(kind))
        if not targets:
            raise index_missing(self.collection, f"Collection {self.collection!r} has no published index on the "
                                f"cluster (alias {self.alias(kind)}): run `flysift index corpus …` first.")
        return targets[0]

    # ---- write side -----------------------------------------------------------------------------------------------
    def preparer(self) -> Callable[[Paper, list[Passage]], Prepared]:
        return functools.partial(_prepare, repeats=self.bm25.repeats())   # picklable: a module function and a dict

    def bulk_concurrency(self) -> int:
        """``_bulk`` requests a build keeps in flight: the setting, else ``BULK_PER_DATA_NODE`` per data node that
        holds a primary being written (a build writes the papers and passages indices, ``shards`` primaries each:
        more requests than those nodes index at once only queue up in their memory, and a node answers 429 beyond
        its indexing pressure limit, 10 % of its heap)."""
        if self._bulk_concurrency is None:
            nodes = min(self._data_nodes(), 2 * self.shards)
            self._bulk_concurrency = min(max(MIN_BULK_CONCURRENCY, BULK_PER_DATA_NODE * nodes),
                                         POOL_SIZE)
        return self._bulk_concurrency

    def _data_nodes(self) -> int:
        return self.t.data_nodes()

    def open_build(self, fingerprint: str, resume: bool = True) -> ClusterBuild:
        return ClusterBuild(self, fingerprint, resume)

    # ---- read side ------------------------------------------------------------------------------------------------
    def _search(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", f"/{self.alias(kind)}/_search", body, what=f"searching {kind}")

    def search_papers(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                      snippets: bool = False, highlight: HighlightSpec | None = None) -> PaperSearchResults:
        t0 = time.perf_counter()
        # ties by pmcid, as the export pages them: the order of equal scores must not depend on which bulk request
        # (several run in parallel) reached the shard first
        res = self._search_papers(lambda fields: {
            "query": compile_query(query, fields, "section_types", paper_fields=self._fielded(),
                                   concepts=self._concepts_of("papers")),
            "from": offset, "size": limit,
            "track_total_hits": True, "sort": [{"_score": "desc"}, {"pmcid": "asc"}],
            "_source": HEAD_FIELDS}, source=query.filters.source)
        hits = [self._paper_hit(h, query) for h in res["hits"]["hits"]]
        if snippets or highlight is not None:
            abstracts = {h["_source"]["pmcid"]: h["_source"].get("abstract", "") for h in res["hits"]["hits"]}
            self._add_snippets(hits, query, snippets, highlight, abstracts)
        self._with_mentions("papers", hits, query)
        return PaperSearchResults(total=res["hits"]["total"]["value"], offset=offset, limit=limit, hits=hits,
                                  took_ms=(time.perf_counter() - t0) * 1000)

    def search_passages(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                        snippets: bool = True, highlight: HighlightSpec | None = None) -> PassageSearchResults:
        t0 = time.perf_counter()
        body = {"query": compile_query(query, PASSAGE_FIELDS, "section_type", kind="passages",
                                       concepts=self._concepts_of("passages")), "from": offset,
                "size": limit, "track_total_hits": True, "sort": [{"_score": "desc"}, {"id": "asc"}]}
        if snippets:
            body["highlight"] = unified_highlight(query, PASSAGE_FIELDS)
        res = self._search("passages", body)
        hits = [self._passage_hit(h, query) for h in res["hits"]["hits"]]
        if highlight is not None:
            hls = Highlighters(query.clauses)
            for hit in hits:
                hit.highlight = passage_highlight(hls, highlight, hit.text, hit.section_type)
        self._with_mentions("passages", hits, query)
        return PassageSearchResults(total=res["hits"]["total"]["value"], offset=offset, limit=limit, hits=hits,
                                    took_ms=(time.perf_counter() - t0) * 1000)

    def _search_papers(self, body: Callable[[dict[str, float]], dict[str, Any]], index: str | None = None,
                       source: str | None = None) -> dict[str, Any]:
        """A papers search whose body is made for the fields the published layout searches (``_paper_fields``). A
        per-field query on a one-field build published since the layout was read is refused by the cluster (its
        fields are not indexed): the layout is read again and the search retried once."""
        path = f"/{index or self.alias('papers')}/_search"
        try:
            return self._request("POST", path, body(self._paper_fields(source)), what="searching papers")
        except ClusterRequestError as e:
            if self._layout is None or self._layout[1] or "not indexed" not in e.message:
                raise
            self._layout = None
            return self._request("POST", path, body(self._paper_fields(source)), what="searching papers")

    def _add_snippets(self, hits: list[PaperHit], query: EngineQuery, snippets: bool = True,
                      highlight: HighlightSpec | None = None, abstracts: dict[str, str] | None = None) -> None:
        """Paper snippets and highlights as the embedded engine makes them (``search.text.snippets.paper_snippets``,
        ``search.text.highlight.paper_highlight``): from the title, the abstract (shown; whole, for highlights) and
        the paper's best passage (one ``_msearch`` for the page)."""
        if not hits:
            return
        ndjson = ""
        for h in hits:
            # the positive clauses OR-ed (a tree's AND need not hold within one passage)
            scoped = query.model_copy(update={"tree": None,
                                              "filters": query.filters.model_copy(update={"pmcids": [h.pmcid]})})
            ndjson += "{}\n" + json.dumps({"query": compile_query(scoped, PASSAGE_FIELDS, "section_type",
                                                                   kind="passages"), "size": 1,
                                            "sort": [{"_score": "desc"}, {"id": "asc"}]}) + "\n"
        answers = self._request("POST", f"/{self.alias('passages')}/_msearch", ndjson, what="best passages",
                                ndjson=True)
        hl = Highlighter(query.clauses, stem)
        hls = Highlighters(query.clauses)
        for h, res in zip(hits, answers["responses"], strict=True):
            found = res.get("hits", {}).get("hits", []) if "error" not in res else []
            best = Passage(**found[0]["_source"]) if found else None
            if snippets:
                h.snippets = paper_snippets(hl, h.title, h.abstract, best)
            if highlight is not None:
                h.highlight, h.best_passage = paper_highlight(hls, highlight, h.title,
                                                              (abstracts or {}).get(h.pmcid, h.abstract), best)
            if best is not None and best.supplement is not None:
                h.supplement = SupplementPlace.model_validate(best.supplement.model_dump(exclude={"numbers", "items"}))

    @staticmethod
    def _matched(hit: dict[str, Any], query: EngineQuery) -> list[str]:
        names = hit.get("matched_queries") or []
        return [c.name for c in query.named() if c.name is not None and c.name in names]

    def _paper_hit(self, h: dict[str, Any], query: EngineQuery) -> PaperHit:
        s = h["_source"]
        return PaperHit(pmcid=s["pmcid"], title=s.get("title", ""), abstract=s.get("abstract", "")[:500],
                        year=s.get("year"), journal=s.get("journal"), score=h["_score"] or 0.0,
                        matched=self._matched(h, query), pmid=s.get("pmid"), doi=s.get("doi"),
                        authors=s.get("authors") or [])

    def _passage_hit(self, h: dict[str, Any], query: EngineQuery) -> PassageHit:
        p = Passage(**h["_source"])
        where = SupplementPlace.model_validate(p.supplement.model_dump(exclude={"numbers", "items"})) \
            if p.supplement else None
        return PassageHit(passage_id=p.id, pmcid=p.pmcid, section_type=p.section_type, section_index=p.section_index,
                          paragraph_index=p.paragraph_index, start=p.start, end=p.end, text=p.text,
                          score=h["_score"] or 0.0, year=p.year, snippet=snippet("text", h.get("highlight", {})),
                          matched=self._matched(h, query), source=p.source, supplement=where)

    def export_papers(self, query: EngineQuery, limit: int | None = None,
                      batch_size: int = EXPORT_BATCH) -> Iterator[PaperHit]:
        """Every matching paper (the first ``limit``), best first, past the 10,000-hit window (``search_after``, no
        snippets)."""
        self._layout = None   # read the layout now: an export pages one index for a long time
        body = {"query": compile_query(query, self._paper_fields(query.filters.source), "section_types",
                                       paper_fields=self._fielded(), concepts=self._concepts_of("papers")),
                "_source": HEAD_FIELDS}
        for h in self._export("papers", body, "pmcid", batch_size, limit):
            yield self._paper_hit(h, query)

    def export_passages(self, query: EngineQuery, limit: int | None = None,
                        batch_size: int = EXPORT_BATCH) -> Iterator[PassageHit]:
        body = {"query": compile_query(query, PASSAGE_FIELDS, "section_type", kind="passages",
                                       concepts=self._concepts_of("passages"))}
        for h in self._export("passages", body, "id", batch_size, limit):
            yield self._passage_hit(h, query)

    def _export(self, kind: str, body: dict[str, Any], key: str, batch_size: int,
                limit: int | None = None) -> Iterator[dict[str, Any]]:
        """Pages with ``search_after`` over the concrete index behind the alias: a published version never changes,
        so the pages are consistent without a point-in-time (whose API differs between the flavours)."""
        index = self._live_index(kind)
        after = None
        left = limit
        while left is None or left > 0:
            size = batch_size if left is None else min(batch_size, left)
            page = {**body, "size": size, "sort": [{"_score": "desc"}, {key: "asc"}], "track_total_hits": False}
            if after:
                page["search_after"] = after
            hits = self._request("POST", f"/{index}/_search", page, what=f"exporting {kind}")["hits"]["hits"]
            yield from hits
            if left is not None:
                left -= len(hits)
            if len(hits) < size:
                return
            after = hits[-1]["sort"]

    def scan_passages(self, batch_size: int = EXPORT_BATCH) -> Iterator[tuple[Passage, str]]:
        """Every passage of the published version with its paper's title, by passage id."""
        titles = {h["_source"]["pmcid"]: h["_source"].get("title", "")
                  for h in self._export("papers", {"query": {"match_all": {}}, "_source": ["pmcid", "title"]},
                                        "pmcid", batch_size)}
        articles = {"bool": {"must_not": [{"term": {"source": "supplement"}}]}}   # the dense index: prose only
        for h in self._export("passages", {"query": articles}, "id", batch_size):
            p = Passage(**h["_source"])
            yield p, titles.get(p.pmcid, "")

    def vector_store(self) -> ClusterVectors:
        """Passage vectors in the cluster's k-NN indices (``search.engines.cluster.knn``), one store per engine."""
        if self._vectors is None:
            self._vectors = ClusterVectors(self)
        return self._vectors

    def has_index(self) -> bool:
        return bool(self._alias_targets(self.alias("papers")))

    def published_files(self) -> PublishedBuild:
        raise NotImplementedError("a cluster build is a set of indices, not a folder (capabilities.local_builds)")

    def outdated(self) -> str | None:
        return None   # every build is written with the mappings of this version

    def scan_papers(self) -> Iterator[Paper]:
        raise NotImplementedError("no cluster build needs rewriting (outdated() is always None)")

    def get_paper(self, pmcid: str) -> Paper | None:
        try:
            res = self.t.request("GET", f"/{self.alias('papers')}/_doc/{quote(pmcid, safe='')}",
                                 params={"_source_excludes": "supp,text"}, what="fetching a paper")
        except ClusterRequestError as e:
            if e.http_status == 404 and e.error_type is None:
                return None
            self._request("GET", f"/{self.alias('papers')}/_count")  # raises the right error (missing index…)
            raise
        return paper_from_doc(res["_source"]) if res.get("found") else None

    def supplement_chunks(self, pmcid: str, file_index: int, part: int, start: int,
                          limit: int) -> list[SupplementChunk]:
        """A part's chunks covering numbers ``start`` on, in order, at most ``limit``."""
        res = self._search("passages", {
            "query": {"bool": {"filter": [{"term": {"pmcid": pmcid}}, {"term": {"supp_file": file_index}},
                                          {"term": {"supp_part": part}}, {"range": {"supp_last": {"gte": start}}}]}},
            "sort": [{"supp_chunk": "asc"}], "size": limit, "_source": ["supplement"]})
        return [SupplementChunk.model_validate(h["_source"]["supplement"]) for h in res["hits"]["hits"]]

    def bm25_parameters(self, kind: Literal["papers", "passages"] = "papers") -> dict[str, Any]:
        """The published index's k1/b (an index keeps those it was created with, whatever is configured now; the
        cluster's defaults, tantivy's constants, for one without ours; the configured ones before the first
        publish) and the field weights its papers were written with (for an index before the one-field layout, the
        boosts it is searched with: ``Bm25Params.per_field``)."""
        try:
            live = self._live_index(kind)
        except IndexMissing:
            return self.bm25.report(kind)
        k1, b = self._similarity_of(live) or (BM25_K1, BM25_B)
        update: dict[str, Any] = {"k1": k1, "b": b}
        if kind == "papers":
            update["field_weights"] = self._weights_of(live) or self.bm25.per_field()
        return self.bm25.model_copy(update=update).report(kind)

    def stats(self) -> IndexStats:
        terms = self._term_counts()
        bm25 = self.bm25.with_next_build(self.bm25_parameters())
        try:
            papers, passages = self._live_index("papers"), self._live_index("passages")
        except IndexMissing:
            return IndexStats(engine=self.name, papers=0, passages=0, index_bytes=0, terms=terms, bm25=bm25)
        st = self._request("GET", f"/{papers},{passages}/_stats/docs,store")["indices"]
        return IndexStats(engine=self.name, papers=st[papers]["primaries"]["docs"]["count"],
                          passages=st[passages]["primaries"]["docs"]["count"],
                          index_bytes=sum(st[i]["primaries"]["store"]["size_in_bytes"] for i in (papers, passages)),
                          build=papers.rsplit("-papers-", 1)[1], terms=terms, bm25=bm25)

    # ---- operations: readiness and backups (every index of the prefix: all collections and the session store) ----
    def health(self) -> ClusterHealth:
        """Readiness from the health of the prefix's indices (``search.engines.cluster.health``)."""
        return cluster_health(self.t, self.prefix)

    def readiness(self, deep: bool = False) -> list[Check]:
        """``/v1/ready``'s part: the health of the prefix's indices as one check (``health.as_checks``)."""
        return as_checks(self.health(), self.t.flavour)

    def close(self) -> None:
        self.t.close()
