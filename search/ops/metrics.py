"""Prometheus metrics of a service (prometheus-client), served at ``/metrics``.

Per request (``search.ops.requestlog.OpsMiddleware`` records them for every route, whatever its module):

- ``flysift_requests_total{route, method, status, team}`` and ``flysift_request_seconds{route, method}``: the route
  is the matched path template (``/v1/papers/{pmcid}``), ``unmatched`` for paths no route takes, so a fuzzer cannot
  make a label per URL; the team is the caller's (``-`` before authentication);
- ``flysift_engine_seconds{operation}``: time inside the engine per search or paper fetch
  (``search.core.request_context.engine_time``);
- ``flysift_errors_total{code}``: error answers by ``error.code``: storage (``storage_full``, ``storage_read_only``,
  ``store_corrupt``), engine (``unavailable``, ``index_missing``, ``index_corrupt``), clients
  (``invalid_request``, ``rate_limited``, …);
- ``flysift_budget_charges_total`` (read units spent) and ``flysift_budget_refusals_total`` (``budget_exhausted``).

Read when scraped (``StateCollector``, at most every ``STATE_TTL_S``): ``flysift_sessions_open``,
``flysift_ready``, and per collection ``flysift_collection_papers``, ``flysift_collection_published_timestamp_seconds``,
``flysift_collection_builds_unfinished`` with ``flysift_collection_build_records`` (an indexing run's progress) and
``flysift_api_builds_open``.

With several worker processes (``flysift serve --workers N`` sets ``PROMETHEUS_MULTIPROC_DIR``), counters and
histograms are kept in prometheus-client's shared files and a scrape of any worker sums every worker's.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
    values,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from search.core.checks import Check

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: what the state metrics read (engine readiness, the store) is read at most this often
STATE_TTL_S = 15.0


class StateCollector(Collector):
    """Gauges read from the service's state when scraped (cached ``STATE_TTL_S``)."""

    def __init__(self, checks: Callable[[], list[Check]], open_sessions: Callable[[], int | None],
                 api_builds: Callable[[], dict[str, int]]):
        self._checks, self._open_sessions, self._api_builds = checks, open_sessions, api_builds
        self._cache: tuple[float, list[Metric]] | None = None
        self._lock = threading.Lock()

    def describe(self) -> list[Metric]:
        return []   # registering must not read the state (it would be cached before the service served anything)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            now = time.monotonic()
            if self._cache is None or now - self._cache[0] > STATE_TTL_S:
                self._cache = (now, self._read())
            yield from self._cache[1]

    def _read(self) -> list[Metric]:
        checks = self._checks()
        ready = GaugeMetricFamily("flysift_ready", "1 when no readiness check fails (see /v1/ready)")
        ready.add_metric([], 0 if any(c.state == "fail" for c in checks) else 1)
        papers = GaugeMetricFamily("flysift_collection_papers", "Papers in the published build", labels=["collection"])
        published = GaugeMetricFamily("flysift_collection_published_timestamp_seconds",
                                      "When the published build was published (Unix time)", labels=["collection"])
        unfinished = GaugeMetricFamily("flysift_collection_builds_unfinished",
                                       "Builds being written (or left by a killed run)", labels=["collection"])
        records = GaugeMetricFamily("flysift_collection_build_records",
                                    "Input records the unfinished builds have committed", labels=["collection"])
        for c in checks:
            d = c.data or {}
            coll = d.get("collection")
            if not coll:
                continue
            if "papers" in d:
                papers.add_metric([coll], d["papers"])
            if d.get("published"):
                published.add_metric([coll], d["published"])
            if "building" in d:
                unfinished.add_metric([coll], d["building"])
                records.add_metric([coll], d.get("records", 0))
        out: list[Metric] = [ready, papers, published, unfinished, records]
        n = self._open_sessions()
        if n is not None:
            sessions = GaugeMetricFamily("flysift_sessions_open", "Sessions not closed")
            sessions.add_metric([], n)
            out.append(sessions)
        builds = GaugeMetricFamily("flysift_api_builds_open", "Builds open over the API in this process",
                                   labels=["collection"])
        for coll, count in sorted(self._api_builds().items()):
            builds.add_metric([coll], count)
        out.append(builds)
        return out


class Metrics:
    """The metrics of one app. Counters and histograms are made per app (no global registry: tests make many
    apps), or kept in the shared files of ``PROMETHEUS_MULTIPROC_DIR`` when it is set."""

    def __init__(self, state: StateCollector | None = None):
        disable_created_metrics()   # no *_created series: they double every series and no dashboard reads them
        # prometheus-client picks its value store when it is imported: shared files only if the variable was set then
        self.multiproc = (os.environ.get(MULTIPROC_ENV) or None) if values.ValueClass is not values.MutexValue \
            else None
        self.registry = CollectorRegistry(auto_describe=True)
        target = None if self.multiproc else self.registry
        self.requests = Counter("flysift_requests", "Requests answered", ["route", "method", "status", "team"],
                                registry=target)
        self.latency = Histogram("flysift_request_seconds", "Time to answer a request", ["route", "method"],
                                 buckets=LATENCY_BUCKETS, registry=target)
        self.engine = Histogram("flysift_engine_seconds", "Time inside the engine per call", ["operation"],
                                buckets=LATENCY_BUCKETS, registry=target)
        self.errors = Counter("flysift_errors", "Error answers by error code", ["code"], registry=target)
        self.charges = Counter("flysift_budget_charges", "Reading budget units spent", registry=target)
        self.refusals = Counter("flysift_budget_refusals", "Reads refused with budget_exhausted", registry=target)
        self.state = state
        if state is not None and not self.multiproc:
            self.registry.register(state)

    def observe_engine(self, operation: str, seconds: float) -> None:
        self.engine.labels(operation).observe(seconds)

    def observe_request(self, route: str, method: str, status: int, team: str, seconds: float,
                        error_code: str | None, charged: bool) -> None:
        self.requests.labels(route, method, str(status), team).inc()
        self.latency.labels(route, method).observe(seconds)
        if error_code:
            self.errors.labels(error_code).inc()
            if error_code == "budget_exhausted":
                self.refusals.inc()
        if charged:
            self.charges.inc()

    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text of every metric (of every worker in multiprocess mode)."""
        if not self.multiproc:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=self.multiproc)
        if self.state is not None:
            registry.register(self.state)
        return generate_latest(registry), CONTENT_TYPE_LATEST


def open_sessions_of(store: Any) -> Callable[[], int | None]:
    """A reader of the store's open-session count (None for a store that cannot count them)."""
    def read() -> int | None:
        count = getattr(store, "open_sessions", None)
        if count is None:
            return None
        try:
            return int(count())
        except Exception:  # noqa: BLE001  (a scrape must not fail on a store that is down: /v1/ready says why)
            return None

    return read
