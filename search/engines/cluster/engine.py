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
analyzers (pattern tokenizers, lowercase, Snowball English) and scoring is BM25 (k1=1.2, b=0.75), as in the
embedded engine, so both rank alike (``tests/engines/test_parity.py``).

Only client construction, the raw request call and the clients' exception types differ between the flavours
(``Transport``); every request body and path is the same for Elasticsearch 8 and OpenSearch.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import quote

from search.text import analysis
from search.engines import MIN_PUBLISH_SHARE, BuildRefused, publish_refusal
from search.core.errors import FlysiftError, IndexMissing, LimitExceeded, Unavailable, index_missing
from search.core.models import (
    IndexStats, Paper, PaperHit, PaperSearchResults, Passage, PassageHit, PassageSearchResults, Reject, Section,
    Snippet, Term, TermHit,
)
from search.core.query import FIELD_BOOSTS, Clause, EngineQuery

PASSAGE_FIELDS = {"text": 1.0}
VIEW_SUBFIELD = {"word": "", "symbol": ".s"}
SNIPPET_CHARS = 240
EXPORT_BATCH = 1000
POOL_SIZE = 32
#: highlighter markers: private-use characters that do not occur in papers
PRE, POST = "\ue000", "\ue001"
RETRYABLE = frozenset({429, 502, 503, 504})


# ---- errors --------------------------------------------------------------------------------------------------------
class ClusterRequestError(FlysiftError):
    """The cluster answered a request with an error status; ``http_status`` and ``body`` are the cluster's."""

    status = 502
    code = "cluster_error"

    def __init__(self, http_status: int, body: Any, what: str):
        self.http_status, self.body = http_status, body
        err = body.get("error") if isinstance(body, dict) else None
        self.error_type = err.get("type") if isinstance(err, dict) else None
        reason = _error_reason(err) if isinstance(err, dict) else str(body)[:500]
        super().__init__(f"{what}: the cluster answered {http_status}: {reason}",
                         details={"cluster_status": http_status, "type": self.error_type, "field": _error_field(err)})


def _error_reason(err: dict[str, Any]) -> str:
    """The most specific reason in a cluster error (root causes and ``caused_by`` nest)."""
    causes = [err, *(err.get("root_cause") or [])]
    cause = err.get("caused_by")
    while isinstance(cause, dict):
        causes.append(cause)
        cause = cause.get("caused_by")
    return "; ".join(dict.fromkeys(f"{c.get('type')}: {c.get('reason')}" for c in causes if c.get("reason")))


_FIELD_RES = (re.compile(r"failed to parse field \[([^\]]+)\]"), re.compile(r"introduction of \[([^\]]+)\]"),
              re.compile(r"mapper \[([^\]]+)\]"), re.compile(r"field \[([^\]]+)\]"))


def _error_field(err: Any) -> str | None:
    """The document field a cluster error is about (mapping conflicts, strict mappings, bad values), if it names one."""
    if not isinstance(err, dict):
        return None
    text = json.dumps(err)
    for rx in _FIELD_RES:
        m = rx.search(text)
        if m:
            return m.group(1)
    return None


# ---- the two clients -----------------------------------------------------------------------------------------------
class Transport:
    """The flavour-specific part: building the official client and sending one raw request with it."""

    def __init__(self, settings: Any):
        self.urls = [u.strip().rstrip("/") for u in (settings.cluster_url or "").split(",") if u.strip()]
        if not self.urls:
            raise FlysiftError("the cluster engine needs FLYSIFT_CLUSTER_URL (comma-separated node URLs)",
                               code="config_error", status=500)
        self.flavour = settings.cluster_flavour
        self.timeout = settings.cluster_timeout_s
        # credentials are SecretStr in Settings: unwrapped only here, where the client needs them
        api_key = settings.cluster_api_key.get_secret_value() if settings.cluster_api_key else None
        password = settings.cluster_password.get_secret_value() if settings.cluster_password else ""
        tls: dict[str, Any] = {"verify_certs": settings.cluster_verify_certs}
        if settings.cluster_ca_file:
            tls["ca_certs"] = str(settings.cluster_ca_file)
        if self.flavour == "elasticsearch":
            import elastic_transport
            from elasticsearch import ApiError, Elasticsearch

            auth: dict[str, Any] = {}
            if api_key:
                auth["api_key"] = api_key
            elif settings.cluster_username:
                auth["basic_auth"] = (settings.cluster_username, password)
            self.client = Elasticsearch(self.urls, request_timeout=self.timeout, max_retries=1, retry_on_timeout=True,
                                        connections_per_node=POOL_SIZE, **auth, **tls)
            self._api_error, self._down_error = ApiError, elastic_transport.TransportError
        else:
            import opensearchpy

            auth = {}
            if api_key:  # e.g. behind a proxy or a managed service that takes API keys
                auth["headers"] = {"Authorization": f"ApiKey {api_key}"}
            elif settings.cluster_username:
                auth["http_auth"] = (settings.cluster_username, password)
            self.client = opensearchpy.OpenSearch(self.urls, timeout=self.timeout, max_retries=1, retry_on_timeout=True,
                                                  pool_maxsize=POOL_SIZE, ssl_show_warn=False, **auth, **tls)
            self._api_error, self._down_error = opensearchpy.TransportError, opensearchpy.ConnectionError

    def request(self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None,
                ndjson: bool = False, what: str = "cluster request") -> Any:
        """Send one request; connection failures become ``Unavailable``, error statuses ``ClusterRequestError``."""
        headers = {"accept": "application/json"}
        if body is not None:
            headers["content-type"] = "application/x-ndjson" if ndjson else "application/json"
        try:
            if self.flavour == "elasticsearch":
                return self.client.perform_request(method, path, params=params, headers=headers, body=body).body
            return self.client.transport.perform_request(method, path, params=params, body=body, headers=headers)
        except self._api_error as e:
            status = e.meta.status if self.flavour == "elasticsearch" else e.status_code
            if isinstance(status, int):
                raise ClusterRequestError(status, e.body if self.flavour == "elasticsearch" else e.info, what) from None
            raise self._down(e) from None
        except self._down_error as e:
            raise self._down(e) from None

    def _down(self, e: Exception) -> Unavailable:
        return Unavailable(f"The search cluster ({self.flavour} at {', '.join(self.urls)}) cannot be reached: "
                           f"{type(e).__name__}: {e}. Retry later.", retry_after=5,
                           details={"engine": "cluster", "urls": self.urls})

    def close(self) -> None:
        self.client.close()


# ---- index definitions ---------------------------------------------------------------------------------------------
def analysis_settings() -> dict[str, Any]:
    """``search.text.analysis`` as Elasticsearch/OpenSearch analyzers (pattern tokenizer and snowball: analysis-common)."""
    return {
        "tokenizer": {
            "fs_word_tok": {"type": "pattern", "pattern": analysis.WORD_PATTERN, "group": 0},
            "fs_symbol_tok": {"type": "pattern", "pattern": analysis.SYMBOL_PATTERN, "group": 0},
        },
        # tantivy's remove_long drops tokens of MAX_TOKEN_CHARS bytes or more; `length` counts characters
        "filter": {"fs_max_len": {"type": "length", "max": analysis.MAX_TOKEN_CHARS - 1},
                   "fs_stem": {"type": "snowball", "language": "English"}},
        "analyzer": {
            analysis.WORD_ANALYZER: {"type": "custom", "tokenizer": "fs_word_tok",
                                     "filter": ["fs_max_len", "lowercase", "fs_stem"]},
            analysis.SYMBOL_ANALYZER: {"type": "custom", "tokenizer": "fs_symbol_tok", "filter": ["fs_max_len"]},
        },
    }


def _text_field() -> dict[str, Any]:
    """A text field in both views: the word view is the field itself, the symbol view its ``.s`` sub-field."""
    return {"type": "text", "analyzer": analysis.WORD_ANALYZER, "index_options": "offsets",
            "fields": {"s": {"type": "text", "analyzer": analysis.SYMBOL_ANALYZER, "index_options": "offsets"}}}


_KEYWORD = {"type": "keyword"}
_INT = {"type": "integer"}
_STORED_INT = {"type": "integer", "index": False, "doc_values": False}

PAPER_MAPPING: dict[str, Any] = {"dynamic": "strict", "properties": {
    "pmcid": _KEYWORD, "pmid": _KEYWORD, "doi": _KEYWORD, "year": _INT, "journal": _KEYWORD,
    "title": _text_field(), "abstract": _text_field(), "body": _text_field(), "section_types": _KEYWORD,
    # section structure without the text: paragraph lengths cut ``body`` back into paragraphs (no second copy)
    "sections": {"type": "object", "enabled": False},
}}
PASSAGE_MAPPING: dict[str, Any] = {"dynamic": "strict", "properties": {
    "id": _KEYWORD, "pmcid": _KEYWORD, "year": _INT, "section_type": _KEYWORD, "section_index": _STORED_INT,
    "paragraph_index": _STORED_INT, "start": _STORED_INT, "end": _STORED_INT, "text": _text_field(),
}}
BUILDS_MAPPING: dict[str, Any] = {"dynamic": "strict", "properties": {
    "collection": _KEYWORD, "fingerprint": _KEYWORD, "status": _KEYWORD, "created": {"type": "double"},
    "updated": {"type": "double"}, "state": {"type": "object", "enabled": False},
}}


def _term_mapping() -> dict[str, Any]:
    from search.engines.embedded.terms import FIELD_BOOSTS as TERM_FIELDS

    word = {"type": "text", "analyzer": analysis.WORD_ANALYZER}
    return {"dynamic": "strict", "properties": {
        "id": _KEYWORD, "ids": _KEYWORD, "key": _KEYWORD, "syn_key": _KEYWORD, "namespace": _KEYWORD,
        "aspect": _KEYWORD, "obsolete": {"type": "boolean"}, **{f: word for f in TERM_FIELDS}}}


def _version() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def _paper_doc(p: Paper) -> dict[str, Any]:
    doc = p.model_dump(exclude={"sections"}, exclude_none=True)
    doc["body"] = p.body_text()
    doc["section_types"] = p.section_types()
    doc["sections"] = [{"type": s.type, "title": s.title, "lengths": [len(x) for x in s.paragraphs]}
                       for s in p.sections]
    return doc


def _paper_from_doc(doc: dict[str, Any]) -> Paper:
    """Inverse of ``_paper_doc``: ``body`` is the paragraphs joined by blank lines, cut by the stored lengths."""
    body, pos, sections = doc.pop("body", ""), 0, []
    for s in doc.pop("sections", []):
        paragraphs = []
        for n in s["lengths"]:
            paragraphs.append(body[pos:pos + n])
            pos += n + 2
        sections.append(Section(type=s["type"], title=s.get("title"), paragraphs=paragraphs))
    doc.pop("section_types", None)
    return Paper(**doc, sections=sections)


def _has_tokens(clause: Clause) -> bool:
    """Whether the clause's text analyses to at least one token (an empty clause is skipped, as in embedded)."""
    spans = analysis.word_spans(clause.text) if clause.view == "word" else analysis.symbol_spans(clause.text)
    return any(len(t.encode()) < analysis.MAX_TOKEN_CHARS for _, _, t in spans)


def compile_query(query: EngineQuery, fields: dict[str, float], section_field: str) -> dict[str, Any]:
    """The engine-neutral query as query DSL: optional clauses OR-ed (at least one must match when present),
    required clauses must match, filters do not score. Mirrors ``EmbeddedEngine._compile``."""
    shoulds, musts = [], []
    for clause in query.clauses:
        if _has_tokens(clause):
            (musts if clause.required else shoulds).append(_clause(clause, fields))
    if shoulds:
        musts.append(shoulds[0] if len(shoulds) == 1 else {"bool": {"should": shoulds}})
    if not musts:
        return {"match_none": {}}
    f, filters = query.filters, []
    if f.year_from is not None or f.year_to is not None:
        filters.append({"range": {"year": {k: v for k, v in (("gte", f.year_from), ("lte", f.year_to)) if v is not None}}})
    if f.section_types:
        filters.append({"terms": {section_field: f.section_types}})
    if f.pmcids:
        filters.append({"terms": {"pmcid": f.pmcids}})
    return {"bool": {"must": musts, "filter": filters}}


def _clause(clause: Clause, fields: dict[str, float]) -> dict[str, Any]:
    """One clause over every field in the clause's view; field scores add up (``most_fields``), as in embedded."""
    sub = VIEW_SUBFIELD[clause.view]
    if clause.phrase:
        q: dict[str, Any] = {"bool": {"should": [
            {"match_phrase": {f + sub: {"query": clause.text, "boost": b}}} for f, b in fields.items()]}}
        inner = q["bool"]
    else:
        q = {"multi_match": {"query": clause.text, "type": "most_fields", "operator": "or",
                             "fields": [f"{f}{sub}^{b}" for f, b in fields.items()]}}
        inner = q["multi_match"]
    if clause.boost != 1.0:
        inner["boost"] = clause.boost
    if clause.name:
        inner["_name"] = clause.name
    return q


def _highlight(query: EngineQuery, fields: Iterable[str]) -> dict[str, Any]:
    views = {c.view for c in query.clauses}
    return {"type": "unified", "pre_tags": [PRE], "post_tags": [POST], "fragment_size": SNIPPET_CHARS,
            "number_of_fragments": 1, "require_field_match": True,
            "fields": {f + VIEW_SUBFIELD[v]: {} for f in fields for v in ("word", "symbol") if v in views}}


def _snippet(field: str, highlight: dict[str, list[str]]) -> Snippet | None:
    """The highlighted fragment of ``field`` (either view; the one with more highlights) as text + ranges."""
    best: Snippet | None = None
    for view in ("word", "symbol"):
        frags = highlight.get(field + VIEW_SUBFIELD[view])
        if not frags:
            continue
        text: list[str] = []
        spans, start = [], 0
        for ch in frags[0]:
            if ch == PRE:
                start = len(text)
            elif ch == POST:
                spans.append((start, len(text)))
            else:
                text.append(ch)
        snip = Snippet(field=field, text="".join(text), highlights=spans)
        if best is None or len(spans) > len(best.highlights):
            best = snip
    return best


# ---- bulk loading --------------------------------------------------------------------------------------------------
class _Bulk:
    """Streaming ``_bulk`` in chunks of at most ``chunk_bytes`` (one paper and its passages never split).

    A paper is indexed whole or not at all: if any document of a paper's group is refused, the rest of the group is
    deleted and one ``Reject`` naming the field goes to ``failures``. 429 and 5xx answers (whole request or single
    items) are retried with exponential backoff; when retries run out the load stops with ``Unavailable`` (nothing is
    dropped: the caller's last commit is the resume point). Later chunks are always sent after per-document errors.
    """

    def __init__(self, transport: Transport, chunk_bytes: int, max_retries: int, backoff_s: float):
        self.t, self.chunk_bytes, self.max_retries, self.backoff_s = transport, chunk_bytes, max_retries, backoff_s
        self.lines: list[bytes] = []
        self.groups: list[tuple[str, list[tuple[str, str]]]] = []  # (pmcid, [(index, id)]) in buffer order
        self.size = 0
        self.failures: list[Reject] = []
        self.retries = 0

    def add_group(self, pmcid: str, docs: list[tuple[str, str, dict[str, Any]]]) -> None:
        lines = []
        for index, doc_id, source in docs:
            lines.append(json.dumps({"index": {"_index": index, "_id": doc_id}}).encode() + b"\n")
            lines.append(json.dumps(source, ensure_ascii=False).encode() + b"\n")
        size = sum(map(len, lines))
        if self.lines and self.size + size > self.chunk_bytes:
            self.flush()
        self.lines += lines
        self.groups.append((pmcid, [(i, d) for i, d, _ in docs]))
        self.size += size

    def flush(self) -> None:
        if not self.lines:
            return
        items = [(g, i) for g, (_, docs) in enumerate(self.groups) for i in range(len(docs))]
        errors: dict[int, dict[str, Any]] = {}
        pending = list(range(len(items)))
        for attempt in range(self.max_retries + 1):
            body = b"".join(self.lines[2 * k] + self.lines[2 * k + 1] for k in pending)
            try:
                resp = self.t.request("POST", "/_bulk", body=body, ndjson=True, what="bulk indexing")
            except (ClusterRequestError, Unavailable) as e:
                if isinstance(e, ClusterRequestError) and e.http_status not in RETRYABLE:
                    raise
                if attempt == self.max_retries:
                    raise Unavailable(f"bulk indexing gave up after {attempt + 1} tries: {e.message}",
                                      retry_after=30) from e
                self.retries += 1
                time.sleep(min(self.backoff_s * 2 ** attempt, 30.0))
                continue
            retry = []
            for k, item in zip(pending, resp["items"]):
                result = next(iter(item.values()))
                status = result.get("status", 500)
                if status in RETRYABLE or status >= 500:
                    retry.append(k)
                    errors[k] = result.get("error", {})
                elif status >= 300:
                    errors[k] = result.get("error", {})
                else:
                    errors.pop(k, None)
            pending = retry
            if not pending:
                break
            if attempt == self.max_retries:
                raise Unavailable(f"bulk indexing gave up after {attempt + 1} tries: {len(pending)} documents "
                                  f"still refused ({_error_reason(errors[pending[0]])})", retry_after=30)
            self.retries += 1
            time.sleep(min(self.backoff_s * 2 ** attempt, 30.0))
        self._reject_groups(items, errors)
        self.discard()

    def discard(self) -> None:
        self.lines, self.groups, self.size = [], [], 0

    def _reject_groups(self, items: list[tuple[int, int]], errors: dict[int, dict[str, Any]]) -> None:
        failed: dict[int, dict[str, Any]] = {}
        for k, err in errors.items():
            failed.setdefault(items[k][0], err)
        deletes = []
        for g, err in failed.items():
            pmcid, docs = self.groups[g]
            self.failures.append(Reject(source=f"cluster:{docs[0][0]}", pmcid=pmcid, field=_error_field(err),
                                        reason=f"refused by the cluster: {_error_reason(err)}"))
            deletes += [json.dumps({"delete": {"_index": i, "_id": d}}).encode() + b"\n" for i, d in docs]
        if deletes:
            self.t.request("POST", "/_bulk", body=b"".join(deletes), ndjson=True, what="removing refused papers")


# ---- builds --------------------------------------------------------------------------------------------------------
class ClusterBuild:
    """A build being written into ``<base>-papers-<id>`` and ``<base>-passages-<id>``; see the module docstring."""

    def __init__(self, engine: ClusterEngine, fingerprint: str, resume: bool):
        self._e = engine
        self.fingerprint = fingerprint
        found = engine._find_build(fingerprint) if resume else None
        self.id = found["id"] if found else _version()
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
        self._bulk = _Bulk(engine.t, engine.chunk_bytes, engine.max_retries, engine.backoff_s)
        self.failures = self._bulk.failures
        self._added: set[str] = set()
        self._published = False

    def _save(self, status: str) -> None:
        self._e._request("PUT", f"/{self._e.builds_index}/_doc/{self.id}", {
            "collection": self._e.collection, "fingerprint": self.fingerprint, "status": status,
            "created": self._created, "updated": time.time(), "state": self.state}, params={"refresh": "true"},
            what="saving build state")

    def add(self, paper: Paper, passages: list[Passage]) -> None:
        if paper.pmcid in self._added:  # a duplicate in the input: its older passages must not survive
            self._bulk.flush()
            self._e._request("POST", f"/{self.passages_index}/_refresh", what="refresh before delete")
            self._e._request("POST", f"/{self.passages_index}/_delete_by_query",
                             {"query": {"term": {"pmcid": paper.pmcid}}}, params={"refresh": "true"},
                             what="replacing a duplicate paper")
        self._added.add(paper.pmcid)
        docs = [(self.papers_index, paper.pmcid, _paper_doc(paper))]
        docs += [(self.passages_index, p.id, p.model_dump(exclude_none=True)) for p in passages]
        self._bulk.add_group(paper.pmcid, docs)

    def commit(self, state: dict[str, Any]) -> None:
        """Send what is buffered (the cluster acknowledges durable writes), then save the caller's resume state."""
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
        """Stop writing: buffered documents are dropped (they come again after the last commit on resume); with
        ``discard`` the build's indices are deleted too, so a failed build holds no disk on the cluster."""
        self._bulk.discard()
        if discard and not self._published:
            self._e._drop(self.id)

    @property
    def retries(self) -> int:
        """Bulk requests retried after 429/5xx answers so far."""
        return self._bulk.retries


# ---- the engine ----------------------------------------------------------------------------------------------------
class ClusterEngine:
    """The ``Engine`` protocol over an Elasticsearch 8 or OpenSearch cluster."""

    name = "cluster"

    def __init__(self, settings: Any, collection: str = "default", *, chunk_bytes: int = 5_000_000,
                 max_retries: int = 6, backoff_s: float = 0.5):
        self.t = Transport(settings)
        self.collection = collection
        self.prefix = settings.cluster_index_prefix
        self.base = self.prefix if collection == "default" else f"{self.prefix}-{collection}"
        self.builds_index = f"{self.prefix}-builds"
        self.shards, self.replicas, self.keep = settings.cluster_shards, settings.cluster_replicas, settings.cluster_keep_versions
        self.min_publish_share = getattr(settings, "min_publish_share", MIN_PUBLISH_SHARE)
        self.chunk_bytes, self.max_retries, self.backoff_s = chunk_bytes, max_retries, backoff_s

    # ---- plumbing -------------------------------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None,
                 what: str | None = None) -> Any:
        """A request whose 429/5xx answers mean 'try later' (503 + Retry-After) and whose 404 on an alias means
        'no index yet'."""
        try:
            return self.t.request(method, path, body, params, what=what or f"{method} {path}")
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
        for kind, mapping in (("papers", PAPER_MAPPING), ("passages", PASSAGE_MAPPING)):
            self._request("PUT", f"/_index_template/{self.base}-{kind}", {
                "index_patterns": [f"{self.base}-{kind}-2*"], "priority": 100,
                "template": {"settings": self._index_settings(), "mappings": mapping}}, what="index template")
        try:
            self.t.request("PUT", f"/{self.builds_index}", {"settings": {"number_of_shards": 1},
                                                            "mappings": BUILDS_MAPPING})
        except ClusterRequestError as e:
            if e.error_type != "resource_already_exists_exception":
                raise

    def _index_settings(self) -> dict[str, Any]:
        return {"number_of_shards": self.shards, "number_of_replicas": self.replicas,
                "similarity": {"default": {"type": "BM25", "k1": 1.2, "b": 0.75}}, "analysis": analysis_settings()}

    def _check_mappings(self, *indices: str) -> None:
        """Apply the current mappings to a resumed build's indices; a conflict names the field."""
        for index in indices:
            mapping = PAPER_MAPPING if "-papers-" in index else PASSAGE_MAPPING
            try:
                self.t.request("PUT", f"/{index}/_mapping", mapping, what=f"mapping of {index}")
            except ClusterRequestError as e:
                field = e.details.get("field")
                raise FlysiftError(f"The mapping of {index} conflicts with this version of flysift at field "
                                   f"{field!r}: {e.message}. Start a new build (resume=False).",
                                   code="mapping_conflict", status=409, details={"index": index, "field": field}) from None

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
    def open_build(self, fingerprint: str, resume: bool = True) -> ClusterBuild:
        return ClusterBuild(self, fingerprint, resume)

    # ---- read side ------------------------------------------------------------------------------------------------
    def _search(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", f"/{self.alias(kind)}/_search", body, what=f"searching {kind}")

    def search_papers(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                      snippets: bool = False) -> PaperSearchResults:
        t0 = time.perf_counter()
        body = {"query": compile_query(query, FIELD_BOOSTS, "section_types"), "from": offset, "size": limit,
                "track_total_hits": True, "_source": ["pmcid", "title", "abstract", "year", "journal"]}
        if snippets:
            body["highlight"] = _highlight(query, FIELD_BOOSTS)
        res = self._search("papers", body)
        hits = [self._paper_hit(h, query) for h in res["hits"]["hits"]]
        return PaperSearchResults(total=res["hits"]["total"]["value"], offset=offset, limit=limit, hits=hits,
                                  took_ms=(time.perf_counter() - t0) * 1000)

    def search_passages(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                        snippets: bool = True) -> PassageSearchResults:
        t0 = time.perf_counter()
        body = {"query": compile_query(query, PASSAGE_FIELDS, "section_type"), "from": offset, "size": limit,
                "track_total_hits": True}
        if snippets:
            body["highlight"] = _highlight(query, PASSAGE_FIELDS)
        res = self._search("passages", body)
        hits = [self._passage_hit(h, query) for h in res["hits"]["hits"]]
        return PassageSearchResults(total=res["hits"]["total"]["value"], offset=offset, limit=limit, hits=hits,
                                    took_ms=(time.perf_counter() - t0) * 1000)

    @staticmethod
    def _matched(hit: dict[str, Any], query: EngineQuery) -> list[str]:
        names = hit.get("matched_queries") or []
        return [c.name for c in query.named() if c.name in names]

    def _paper_hit(self, h: dict[str, Any], query: EngineQuery) -> PaperHit:
        s, hl = h["_source"], h.get("highlight", {})
        snips = [x for x in (_snippet(f, hl) for f in FIELD_BOOSTS) if x]
        return PaperHit(pmcid=s["pmcid"], title=s.get("title", ""), abstract=s.get("abstract", "")[:500],
                        year=s.get("year"), journal=s.get("journal"), score=h["_score"] or 0.0, snippets=snips,
                        matched=self._matched(h, query))

    def _passage_hit(self, h: dict[str, Any], query: EngineQuery) -> PassageHit:
        p = Passage(**h["_source"])
        return PassageHit(passage_id=p.id, pmcid=p.pmcid, section_type=p.section_type, section_index=p.section_index,
                          paragraph_index=p.paragraph_index, start=p.start, end=p.end, text=p.text,
                          score=h["_score"] or 0.0, year=p.year, snippet=_snippet("text", h.get("highlight", {})),
                          matched=self._matched(h, query))

    def export_papers(self, query: EngineQuery, batch_size: int = EXPORT_BATCH) -> Iterator[PaperHit]:
        """Every matching paper, best first, past the 10,000-hit window (``search_after``, no snippets)."""
        body = {"query": compile_query(query, FIELD_BOOSTS, "section_types"),
                "_source": ["pmcid", "title", "abstract", "year", "journal"]}
        for h in self._export("papers", body, "pmcid", batch_size):
            yield self._paper_hit(h, query)

    def export_passages(self, query: EngineQuery, batch_size: int = EXPORT_BATCH) -> Iterator[PassageHit]:
        body = {"query": compile_query(query, PASSAGE_FIELDS, "section_type")}
        for h in self._export("passages", body, "id", batch_size):
            yield self._passage_hit(h, query)

    def _export(self, kind: str, body: dict[str, Any], key: str, batch_size: int) -> Iterator[dict[str, Any]]:
        """Pages with ``search_after`` over the concrete index behind the alias: a published version never changes,
        so the pages are consistent without a point-in-time (whose API differs between the flavours)."""
        index = self._live_index(kind)
        after = None
        while True:
            page = {**body, "size": batch_size, "sort": [{"_score": "desc"}, {key: "asc"}], "track_total_hits": False}
            if after:
                page["search_after"] = after
            hits = self._request("POST", f"/{index}/_search", page, what=f"exporting {kind}")["hits"]["hits"]
            yield from hits
            if len(hits) < batch_size:
                return
            after = hits[-1]["sort"]

    def get_paper(self, pmcid: str) -> Paper | None:
        try:
            res = self.t.request("GET", f"/{self.alias('papers')}/_doc/{quote(pmcid, safe='')}", what="fetching a paper")
        except ClusterRequestError as e:
            if e.http_status == 404 and e.error_type is None:
                return None
            self._request("GET", f"/{self.alias('papers')}/_count")  # raises the right error (missing index…)
            raise
        return _paper_from_doc(res["_source"]) if res.get("found") else None

    def stats(self) -> IndexStats:
        terms = self._term_counts()
        try:
            papers, passages = self._live_index("papers"), self._live_index("passages")
        except IndexMissing:
            return IndexStats(engine=self.name, papers=0, passages=0, index_bytes=0, terms=terms)
        st = self._request("GET", f"/{papers},{passages}/_stats/docs,store")["indices"]
        return IndexStats(engine=self.name, papers=st[papers]["primaries"]["docs"]["count"],
                          passages=st[passages]["primaries"]["docs"]["count"],
                          index_bytes=sum(st[i]["primaries"]["store"]["size_in_bytes"] for i in (papers, passages)),
                          build=papers.rsplit("-papers-", 1)[1], terms=terms)

    # ---- ontology terms (same fields, boosts and scoring as search.engines.embedded.terms) ------------------------
    def _term_alias(self, ontology: str) -> str:
        from search.engines.embedded.terms import NAME_RE

        if not NAME_RE.fullmatch(ontology):
            from search.core.errors import InvalidRequest

            raise InvalidRequest(f"ontology name {ontology!r} must match {NAME_RE.pattern}")
        return f"{self.prefix}-terms-{ontology}"

    def write_terms(self, ontology: str, terms: Iterable[Term]) -> int:
        """Replace the ontology's term index: a new version, then one atomic alias swap, then the old one dropped."""
        from search.engines.embedded.terms import SYNONYM_FIELDS, normalise

        alias = self._term_alias(ontology)
        index = f"{alias}-{_version()}"
        self._request("PUT", f"/{index}", {"settings": {**self._index_settings(), "refresh_interval": "-1"},
                                           "mappings": _term_mapping()}, what=f"creating {index}")
        bulk = _Bulk(self.t, self.chunk_bytes, self.max_retries, self.backoff_s)
        n = 0
        try:
            for term in terms:
                doc: dict[str, Any] = {"id": term.id, "ids": [term.id, *term.alt_ids], "name": term.name,
                                       "key": normalise(term.name), "definition": term.definition,
                                       "obsolete": term.obsolete, "namespace": term.namespace, "aspect": term.aspect,
                                       "syn_key": [normalise(s.text) for s in term.synonyms]}
                for s in term.synonyms:
                    doc.setdefault(SYNONYM_FIELDS[s.scope], []).append(s.text)
                bulk.add_group(term.id, [(index, term.id, {k: v for k, v in doc.items() if v is not None})])
                n += 1
            bulk.flush()
            if bulk.failures:
                f = bulk.failures[0]
                raise FlysiftError(f"{len(bulk.failures)} terms of {ontology} were refused; first: {f.pmcid} "
                                   f"field {f.field}: {f.reason}", code="mapping_conflict", status=409,
                                   details={"field": f.field, "term": f.pmcid})
            self._request("PUT", f"/{index}/_settings", {"index": {"refresh_interval": None}})
            self._request("POST", f"/{index}/_refresh")
        except BaseException:
            self.t.request("DELETE", f"/{index}")
            raise
        old = self._alias_targets(alias)
        self._request("POST", "/_aliases", {"actions": [*({"remove": {"index": i, "alias": alias}} for i in old),
                                                        {"add": {"index": index, "alias": alias}}]})
        if old:
            self._request("DELETE", "/" + ",".join(old))
        return n

    def _term_counts(self) -> dict[str, int]:
        res = self._request("GET", f"/{self.prefix}-terms-*/_stats/docs", params={"allow_no_indices": "true"})
        aliases = self._request("GET", f"/_alias/{self.prefix}-terms-*", params={"allow_no_indices": "true"}) \
            if res.get("indices") else {}
        counts = {}
        for index, info in aliases.items():
            for alias in info.get("aliases", {}):
                counts[alias[len(self.prefix) + 7:]] = res["indices"][index]["primaries"]["docs"]["count"]
        return dict(sorted(counts.items()))

    def search_terms(self, ontology: str, query: str, *, aspect: str | None = None, limit: int = 10,
                     exclude_ids: set[str] | frozenset[str] = frozenset(),
                     include_obsolete: bool = False) -> list[TermHit]:
        from search.engines.embedded import terms as et
        from search.engines.embedded.engine import analyze

        alias = self._term_alias(ontology)
        m = et.ID_QUERY_RE.fullmatch(query)
        tokens: list[str] = []
        if m:
            main: dict[str, Any] = {"term": {"ids": m.group(1)}}
            include_obsolete = True
        else:
            tokens = analyze("word", query)
            if not tokens:
                return []
            main = _term_text_query(tokens)
        filters: list[dict[str, Any]] = [{"term": {"aspect": aspect}}] if aspect else []
        must_not: list[dict[str, Any]] = [] if include_obsolete else [{"term": {"obsolete": True}}]
        if exclude_ids:
            must_not.append({"terms": {"id": sorted(exclude_ids)}})
        body = {"query": {"bool": {"must": [main], "filter": filters, "must_not": must_not}}, "size": max(1, limit)}
        try:
            res = self.t.request("POST", f"/{alias}/_search", body, what="searching terms")
        except ClusterRequestError as e:
            if e.error_type == "index_not_found_exception":
                from search.core.errors import InvalidRequest

                raise InvalidRequest(f"no term index for ontology {ontology!r} on the cluster",
                                     details={"valid": sorted(self._term_counts())}) from None
            raise
        return [et.term_hit(ontology, _term_fields(h["_source"]), h["_score"], set(tokens)) for h in res["hits"]["hits"]]

    def close(self) -> None:
        self.t.close()


def _term_text_query(tokens: list[str]) -> dict[str, Any]:
    """``embedded_terms._text_query`` in query DSL: dis-max over the fields, exact-key bonuses, word coverage."""
    from search.engines.embedded import terms as et

    def terms(field: str) -> dict[str, Any]:
        return ({"term": {field: tokens[0]}} if len(tokens) == 1 else
                {"bool": {"should": [{"term": {field: t}} for t in tokens]}})

    per_field = [{"bool": {"should": [terms(f)], "boost": b}} for f, b in et.FIELD_BOOSTS.items()]
    key = " ".join(tokens)
    shoulds: list[dict[str, Any]] = [
        {"dis_max": {"queries": per_field, "tie_breaker": et.TIE}},
        {"term": {"key": {"value": key, "boost": et.NAME_KEY_BOOST}}},
        {"term": {"syn_key": {"value": key, "boost": et.SYNONYM_KEY_BOOST}}},
    ]
    if len(tokens) > 1:
        labels = ["name", *et.SYNONYM_FIELDS.values()]
        every_word = {"bool": {"must": [{"bool": {"should": [{"term": {f: t}} for f in labels]}}
                                        for t in dict.fromkeys(tokens)]}}
        shoulds.append({"constant_score": {"filter": every_word, "boost": et.COVERAGE_BOOST}})
    return {"bool": {"should": shoulds}}


def _term_fields(source: dict[str, Any]) -> dict[str, list[Any]]:
    """A term's ``_source`` in the shape of the embedded term index's stored fields, so that term hits are built by
    the one function both engines use (``embedded_terms.term_hit``)."""
    fields = {k: v if isinstance(v, list) else [v] for k, v in source.items() if k not in ("ids", "key", "syn_key")}
    fields["obsolete"] = ["1" if source.get("obsolete") else "0"]
    return fields
