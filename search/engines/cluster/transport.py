"""The cluster transport: the official client of the configured flavour (Elasticsearch 8 or OpenSearch) and one raw
request with it, with the cluster's error answers as ``ClusterRequestError`` and a down cluster as ``Unavailable``.

The client is given every node URL of ``FLYSIFT_CLUSTER_URL`` and sends requests to them in turn. A request that
cannot connect, times out or is answered 502/503/504 is sent once more, to the next node (``max_retries=1``; the
client marks the failed node dead and tries it again after a while), so a search survives the loss of the node it
went to. Writes are retried the same way, which is why every write flysift sends is idempotent or checks its own
outcome (bulk ``index`` by id; the session store's ``_create`` compares what exists, its updates carry an operation
id: ``search.sessions.cluster_store``). ``data_nodes`` and ``replicas`` give the default copies per node count.

The one module below ``search.engines`` that code outside the engines may import: the cluster session store
(``search.sessions.cluster_store``) shares it. Every request body and path is the same for both flavours; only client
construction, the raw call and the clients' exception types differ, and they differ here only.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from search.core.errors import FlysiftError, Unavailable
from search.core.extras import require

POOL_SIZE = 32
#: times a request is sent again, to the next node, after a connection failure, a timeout or a 502/503/504 answer
CLIENT_RETRIES = 1
log = logging.getLogger(__name__)
#: statuses that mean "try again later" (the bulk loader retries them; a search answers 503 + Retry-After)
RETRYABLE = frozenset({429, 502, 503, 504})


class ClusterRequestError(FlysiftError):
    """The cluster answered a request with an error status; ``http_status`` and ``body`` are the cluster's."""

    status = 502
    code = "cluster_error"

    def __init__(self, http_status: int, body: Any, what: str):
        self.http_status, self.body = http_status, body
        err = body.get("error") if isinstance(body, dict) else None
        self.error_type = err.get("type") if isinstance(err, dict) else None
        reason = error_reason(err) if isinstance(err, dict) else str(body)[:500]
        super().__init__(f"{what}: the cluster answered {http_status}: {reason}",
                         details={"cluster_status": http_status, "type": self.error_type, "field": error_field(err)})


def error_reason(err: dict[str, Any]) -> str:
    """The most specific reason in a cluster error (root causes and ``caused_by`` nest)."""
    causes = [err, *(err.get("root_cause") or [])]
    cause = err.get("caused_by")
    while isinstance(cause, dict):
        causes.append(cause)
        cause = cause.get("caused_by")
    return "; ".join(dict.fromkeys(f"{c.get('type')}: {c.get('reason')}" for c in causes if c.get("reason")))


_FIELD_RES = (re.compile(r"failed to parse field \[([^\]]+)\]"), re.compile(r"introduction of \[([^\]]+)\]"),
              re.compile(r"mapper \[([^\]]+)\]"), re.compile(r"field \[([^\]]+)\]"))


def error_field(err: Any) -> str | None:
    """The document field a cluster error is about (mapping conflicts, strict mappings, bad values), if it names one."""
    if not isinstance(err, dict):
        return None
    text = json.dumps(err)
    for rx in _FIELD_RES:
        m = rx.search(text)
        if m:
            return m.group(1)
    return None


def index_exists_error(e: ClusterRequestError) -> bool:
    """Whether creating an index failed because its name is taken: by an index, or by an alias (a restore replaces
    plain indices by aliases of the same name: ``search.engines.cluster.snapshots``)."""
    return e.error_type == "resource_already_exists_exception" or (
        e.error_type == "invalid_index_name_exception" and "already exists as alias" in e.message)


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
        # the official clients of the two flavours share no base class: typed by what this class calls on them
        self.client: Any
        self._api_error: Any
        self._down_error: Any
        if self.flavour == "elasticsearch":
            elasticsearch = require("elasticsearch", "cluster", "the Elasticsearch engine")
            import elastic_transport

            ApiError, Elasticsearch = elasticsearch.ApiError, elasticsearch.Elasticsearch

            auth: dict[str, Any] = {}
            if api_key:
                auth["api_key"] = api_key
            elif settings.cluster_username:
                auth["basic_auth"] = (settings.cluster_username, password)
            self.client = Elasticsearch(self.urls, request_timeout=self.timeout, max_retries=CLIENT_RETRIES,
                                        retry_on_timeout=True, connections_per_node=POOL_SIZE, **auth, **tls)
            self._api_error, self._down_error = ApiError, elastic_transport.TransportError
        else:
            opensearchpy = require("opensearchpy", "cluster", "the OpenSearch engine")

            auth = {}
            if api_key:  # e.g. behind a proxy or a managed service that takes API keys
                auth["headers"] = {"Authorization": f"ApiKey {api_key}"}
            elif settings.cluster_username:
                auth["http_auth"] = (settings.cluster_username, password)
            self.client = opensearchpy.OpenSearch(self.urls, timeout=self.timeout, max_retries=CLIENT_RETRIES,
                                                  retry_on_timeout=True,
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

    def data_nodes(self) -> int:
        """Nodes holding data (Elasticsearch's data tiers count); 1 where the credentials may not list nodes."""
        try:
            nodes = self.request("GET", "/_nodes", params={"filter_path": "nodes.*.roles"},
                                 what="counting data nodes").get("nodes", {})
        except ClusterRequestError as e:
            if e.http_status not in (401, 403):
                raise
            log.info("cannot list the cluster's nodes (%s); assuming one data node", e.http_status)
            return 1
        return max(1, sum(any(r == "data" or r.startswith("data_") for r in n.get("roles", []))
                          for n in nodes.values()))

    def replicas(self, configured: int | None) -> int:
        """Replica copies for a new index: ``configured`` (``FLYSIFT_CLUSTER_REPLICAS``), else one where there are two
        data nodes or more (any one node may then be lost without losing data or answers), else none (a replica
        that can never be assigned would keep the index yellow)."""
        if configured is not None:
            return configured
        return 1 if self.data_nodes() >= 2 else 0

    def close(self) -> None:
        self.client.close()

