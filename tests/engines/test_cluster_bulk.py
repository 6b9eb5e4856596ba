"""Cluster bulk loading with several requests in flight, against a real node: the same index as one request at a
time (papers prepared in worker processes, a duplicate paper, the last one wins), per-document refusals still named
by paper, a 429 holding back the whole writer, failures surfacing from the threads, abort stopping retries, and the
default concurrency from the node count. Busy answers come from a real HTTP proxy in front of the node."""

from __future__ import annotations

import hashlib
import http.client
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

from indexer.synthetic import SyntheticConfig, generate
from search.core.config import Settings
from search.core.errors import Unavailable
from search.core.models import Paper, Section
from search.engines.cluster.engine import ClusterEngine
from search.text.passages import split_passages

from helpers import ClusterNode

pytestmark = pytest.mark.cluster


# ---- a real proxy that can answer for the node -------------------------------------------------------------------
class BusyProxy:
    """An HTTP proxy on a loopback port forwarding everything to the node, except that ``answer(n, method, path)``
    may return a status to answer instead (``n`` counts ``_bulk`` requests from 1; other requests get ``n`` 0).
    ``log`` lists every ``_bulk`` request in arrival order as (status answered by the proxy or None, body digest)."""

    def __init__(self, upstream: str, answer: Callable[[int, str, str], int | None]):
        self.upstream = urlsplit(upstream)
        self.answer = answer
        self.log: list[tuple[int | None, str]] = []
        self.lock = threading.Lock()
        self.seen = threading.Condition(self.lock)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def handle_one(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                n, bulk = 0, self.path.split("?")[0].endswith("/_bulk") and self.command == "POST"
                with proxy.lock:
                    if bulk:
                        n = len(proxy.log) + 1
                    status = proxy.answer(n, self.command, self.path)
                    if bulk:
                        proxy.log.append((status, hashlib.sha1(body).hexdigest()))
                        proxy.seen.notify_all()
                if status is not None:
                    payload = (b'{"error":{"type":"es_rejected_execution_exception","reason":"the test proxy says '
                               b'busy"},"status":%d}' % status)
                    self._reply(status, [("content-type", "application/json")], payload)
                    return
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                keep = [(k, v) for k, v in resp.getheaders()
                        if k.lower() not in ("transfer-encoding", "connection", "content-length")]
                self._reply(resp.status, keep, data)

            def _reply(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_one

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> BusyProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for_bulks(self, n: int) -> None:
        """Until ``n`` distinct bulk bodies have come: a client may repeat a 429 at once, so counting requests could
        return before every chunk was sent (CI saw one chunk twice and the third not yet)."""
        with self.seen:
            assert self.seen.wait_for(lambda: len({d for _, d in self.log}) >= n, timeout=60), self.log


def _through(settings: Settings, proxy: BusyProxy) -> Settings:
    return settings.model_copy(update={"cluster_url": proxy.url})


# ---- data ----------------------------------------------------------------------------------------------------------
def _papers(n: int, seed: int = 3) -> list[Paper]:
    return list(generate(SyntheticConfig(n_papers=n, words_per_paper=300, seed=seed, vocabulary=2000)))


def _year_paper(pmcid: str, year: int) -> Paper:
    return Paper(pmcid=pmcid, year=year, title=f"Paper {pmcid}", abstract="Wingless signalling in discs.",
                 sections=[Section(type="RESULTS", paragraphs=[f"Paragraph {i} about wg and dpp." for i in range(5)])])


def _documents(node: ClusterNode, index: str) -> dict[str, Any]:
    node.call("POST", f"/{index}/_refresh")
    res = node.call("POST", f"/{index}/_search", {"size": 10_000, "query": {"match_all": {}}})
    return {h["_id"]: h["_source"] for h in res["hits"]["hits"]}


def _bulk_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("flysift-bulk")}


@pytest.fixture(autouse=True)
def threads_before() -> Iterator[set[threading.Thread]]:
    """The sending threads alive before the test (other modules' unclosed builds); none may be added by it."""
    before = _bulk_threads()
    yield before
    assert _bulk_threads() - before == set(), "a build left its sending threads running"


# ---- the tests -----------------------------------------------------------------------------------------------------
def test_parallel_bulk_from_worker_processes_gives_the_index_of_one_request_at_a_time(cluster_node: ClusterNode,
                                                                                      cluster_settings: Settings):
    papers = _papers(60)
    again = papers[10].model_copy(update={"title": "Replaced", "sections": papers[10].sections[:1]})
    inputs = [*papers[:30], again, *papers[30:]]  # a duplicate in the middle: its older passages must go
    one = ClusterEngine(cluster_settings, "one", chunk_bytes=4_000, bulk_concurrency=1)
    four = ClusterEngine(cluster_settings, "four", chunk_bytes=4_000, bulk_concurrency=4)

    serial = one.open_build("same", resume=False)
    for p in inputs:
        serial.add(p, split_passages(p))
    serial.commit({})

    prepare = four.preparer()
    parallel = four.open_build("same", resume=False)
    assert parallel._bulk.concurrency == 4
    # the indexer's shape: per-paper work in workers (the pool pickles the preparer and its weights), one writer
    with ProcessPoolExecutor(2) as pool:
        for prepared in pool.map(prepare, inputs, [split_passages(p) for p in inputs], chunksize=8):
            parallel.add_prepared(prepared)
    parallel.commit({})

    assert serial.failures == parallel.failures == []
    for kind in ("papers_index", "passages_index"):
        want, got = _documents(cluster_node, getattr(serial, kind)), _documents(cluster_node, getattr(parallel, kind))
        assert got == want and len(got) >= 60, kind
    assert _documents(cluster_node, parallel.papers_index)[again.pmcid]["title"] == "Replaced"
    assert {d["pmcid"] for d in _documents(cluster_node, parallel.passages_index).values()} == {p.pmcid for p in papers}
    parallel.publish()
    assert four.get_paper(again.pmcid) == again and four.stats().papers == 60


def test_refusals_with_requests_in_flight_name_their_papers(cluster_node: ClusterNode, cluster_settings: Settings):
    engine = ClusterEngine(cluster_settings, chunk_bytes=2_500, bulk_concurrency=4)
    papers = [_year_paper(f"PMC2{i:05d}", 2000 + i % 20) for i in range(60)]
    bad = {5, 17, 33, 58}
    for i in bad:
        papers[i] = _year_paper(f"PMC2{i:05d}", 10**12)  # does not fit the integer mapping of `year`
    build = engine.open_build("rejects", resume=False)
    for p in papers:
        build.add(p, split_passages(p))
    build.commit({})
    assert sorted((r.pmcid, r.field) for r in build.failures) == [(f"PMC2{i:05d}", "year") for i in sorted(bad)]
    assert all("year" in r.reason for r in build.failures)
    assert build.count() == 60 - len(bad)
    passages = _documents(cluster_node, build.passages_index)
    assert {d["pmcid"] for d in passages.values()} == {p.pmcid for i, p in enumerate(papers) if i not in bad}
    build.abort(discard=True)


def test_a_429_holds_back_the_whole_writer_and_every_paper_arrives(cluster_settings: Settings):
    busy = 5  # the fifth _bulk request is answered 429 (and the sixth: Elasticsearch's client retries a 429 once)
    with BusyProxy(cluster_settings.cluster_url or "", lambda n, m, p: 429 if n in (busy, busy + 1) else None) as proxy:
        engine = ClusterEngine(_through(cluster_settings, proxy), chunk_bytes=3_000, backoff_s=2.0,
                               bulk_concurrency=4)
        build = engine.open_build("busy", resume=False)
        papers = _papers(80)
        for p in papers:
            build.add(p, split_passages(p))
        build.commit({})
        assert build.failures == [] and build.retries >= 1
        assert build.count() == 80
        build.abort(discard=True)
    status, digest = proxy.log[busy - 1]
    assert status == 429
    retry = next(i for i, (s, d) in enumerate(proxy.log) if d == digest and i > busy - 1)
    # between the 429 and its retry only requests already on their way (one per other thread), and each thread's
    # first one after the pause, may arrive; a writer that kept the other threads sending would send dozens
    assert retry - busy <= 2 * (4 - 1), proxy.log


def test_retries_running_out_in_a_thread_fail_the_load(cluster_settings: Settings):
    with BusyProxy(cluster_settings.cluster_url or "", lambda n, m, p: 429 if n else None) as proxy:
        engine = ClusterEngine(_through(cluster_settings, proxy), chunk_bytes=3_000, max_retries=1, backoff_s=0.05,
                               bulk_concurrency=3)
        build = engine.open_build("down", resume=False)
        with pytest.raises(Unavailable) as e:
            for p in _papers(12):
                build.add(p, split_passages(p))
            build.commit({})
        assert "gave up after 2 tries" in e.value.message and e.value.status == 503
        build.abort(discard=True)


def test_abort_stops_retries_in_flight(cluster_settings: Settings, threads_before: set[threading.Thread]):
    with BusyProxy(cluster_settings.cluster_url or "", lambda n, m, p: 429 if n else None) as proxy:
        # six retries from 5 s on would keep a thread busy for minutes
        engine = ClusterEngine(_through(cluster_settings, proxy), chunk_bytes=1_000, max_retries=6, backoff_s=5.0,
                               bulk_concurrency=3)
        build = engine.open_build("stop", resume=False)
        for p in _papers(4):  # three chunks sent (one paper each, one per thread), the fourth paper buffered
            build.add(p, split_passages(p))
        proxy.wait_for_bulks(3)
        build.abort(discard=True)
        assert _bulk_threads() - threads_before == set()
    # three requests, none tried again after its backoff (Elasticsearch's client may repeat a 429 once at once)
    assert len({d for _, d in proxy.log}) == 3 and len(proxy.log) <= 6, proxy.log


def test_default_concurrency_comes_from_the_data_nodes(cluster_node: ClusterNode, cluster_settings: Settings):
    nodes = cluster_node.call("GET", "/_nodes?filter_path=nodes.*.roles")["nodes"]
    data = sum(any(r == "data" or r.startswith("data_") for r in n["roles"]) for n in nodes.values())
    # two per data node that holds a primary being written (papers and passages: 2 × shards primaries)
    assert ClusterEngine(cluster_settings).bulk_concurrency() == max(2, 2 * min(data, 2))
    three = cluster_settings.model_copy(update={"cluster_shards": 3})
    assert ClusterEngine(three).bulk_concurrency() == max(2, 2 * min(data, 6))
    assert ClusterEngine(cluster_settings.model_copy(update={"cluster_bulk_concurrency": 5})).bulk_concurrency() == 5
    # credentials that may not list nodes: the default for one node, not an error
    def refuse(n: int, method: str, path: str) -> int | None:
        return 403 if path.startswith("/_nodes") else None

    with BusyProxy(cluster_settings.cluster_url or "", refuse) as proxy:
        assert ClusterEngine(_through(cluster_settings, proxy)).bulk_concurrency() == 2

