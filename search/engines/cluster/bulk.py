"""Bulk loading: ``_bulk`` requests in bounded chunks, several in flight, retries with backoff, whole-group refusals.

The NDJSON of a group (a paper and its passages, or one term) is made by ``prepare_group`` without the build's index
names, so the indexer's worker processes can do the JSON work; the writer only prefixes each document with its index.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, NamedTuple

from search.core.errors import Unavailable
from search.core.models import Reject
from search.engines.cluster.transport import RETRYABLE, ClusterRequestError, Transport, error_field, error_reason

#: the longest single backoff, seconds
MAX_BACKOFF_S = 30.0


class Prepared(NamedTuple):
    """One group as bulk NDJSON, picklable: ``docs`` holds ``(kind, id, tail)``, where ``tail`` is the end of the
    action line after its ``_index`` (the ``_id``) and the source line; ``Bulk.add`` puts the index name in front."""

    key: str
    docs: list[tuple[str, str, bytes]]


def source_tail(doc_id: str, source: bytes) -> bytes:
    """The action line's end (``_id``) and the source line of one document; ``source`` is its JSON."""
    return json.dumps(doc_id).encode() + b"}}\n" + source + b"\n"


def prepare_group(key: str, docs: Iterable[tuple[str, str, dict[str, Any]]]) -> Prepared:
    """A group of ``(kind, id, source)`` documents as ``Prepared`` (the JSON dumps: the expensive part)."""
    return Prepared(key, [(kind, doc_id, source_tail(doc_id, json.dumps(source, ensure_ascii=False).encode()))
                          for kind, doc_id, source in docs])


class _Chunk(NamedTuple):
    keys: list[str]  # group keys, in order
    docs: list[tuple[int, str, str, bytes]]  # (group, index, id, action + source lines)


class _Stopped(Exception):
    """A request given up because the writer is stopping (another request failed, or the build was aborted)."""


class Bulk:
    """``_bulk`` in chunks of at most ``chunk_bytes`` (one group never split), up to ``concurrency`` in flight.

    A group is indexed whole or not at all: if any of its documents is refused, the rest of the group is deleted and
    one ``Reject`` naming the field goes to ``failures`` (only ever appended in the caller's thread, between its
    calls). 429 and 5xx answers (whole request or single items) are retried with exponential backoff per request; a
    429 also pauses every request of this writer for that long, since the cluster is saying it is full. When retries
    run out the load stops with ``Unavailable`` (nothing is dropped: the caller's last commit is the resume point) and
    the other requests in flight are stopped. Later chunks are always sent after per-document errors.

    With ``concurrency`` 1 every request is sent in the caller's thread; above 1 a thread pool sends them while the
    caller fills the next chunk. ``flush`` returns when everything added has been answered, ``discard`` drops what is
    buffered and stops what is in flight, ``close`` ends the threads.
    """

    def __init__(self, transport: Transport, chunk_bytes: int, max_retries: int, backoff_s: float,
                 concurrency: int = 1):
        self.t, self.chunk_bytes, self.max_retries, self.backoff_s = transport, chunk_bytes, max_retries, backoff_s
        self.concurrency = max(1, concurrency)
        self.failures: list[Reject] = []
        self.retries = 0
        self._keys: list[str] = []
        self._docs: list[tuple[int, str, str, bytes]] = []
        self.size = 0
        self._heads: dict[str, bytes] = {}
        self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="flysift-bulk") \
            if self.concurrency > 1 else None
        self._in_flight: set[Future[list[Reject]]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._paused_until = 0.0  # time.monotonic() before which no request of this writer is sent (after a 429)

    # ---- the caller's side ----------------------------------------------------------------------------------------
    def add(self, group: Prepared, indices: dict[str, str]) -> None:
        """Buffer one prepared group, each document going to ``indices[kind]``; sends a chunk when it is full."""
        docs = [(index, doc_id, self._head(index) + tail)
                for index, doc_id, tail in ((indices[kind], d, t) for kind, d, t in group.docs)]
        size = sum(len(d[2]) for d in docs)
        if self._docs and self.size + size > self.chunk_bytes:
            self._send()
        g = len(self._keys)
        self._keys.append(group.key)
        self._docs += [(g, index, doc_id, lines) for index, doc_id, lines in docs]
        self.size += size

    def add_group(self, key: str, docs: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Buffer ``(index, id, source)`` documents as one group (prepared in this process)."""
        self.add(prepare_group(key, docs), {index: index for index, _, _ in docs})

    def flush(self) -> None:
        """Send what is buffered and wait until every request is answered; the first error is raised here."""
        self._send()
        self._settle(0)

    def discard(self) -> None:
        """Drop what is buffered and stop what is in flight (requests already sent finish; retries do not start)."""
        self._keys, self._docs, self.size = [], [], 0
        if not self._in_flight:
            return
        self._stop.set()
        for f in self._in_flight:
            f.cancel()
        wait(self._in_flight)
        self._in_flight.clear()
        self._stop.clear()

    def close(self) -> None:
        """End the sending threads (after ``flush`` or ``discard``)."""
        if self._pool is not None:
            self.discard()
            self._pool.shutdown(wait=True)
            self._pool = None
            self.concurrency = 1

    def _head(self, index: str) -> bytes:
        head = self._heads.get(index)
        if head is None:
            head = self._heads[index] = b'{"index":{"_index":' + json.dumps(index).encode() + b',"_id":'
        return head

    def _send(self) -> None:
        if not self._docs:
            return
        chunk = _Chunk(self._keys, self._docs)
        self._keys, self._docs, self.size = [], [], 0
        if self._pool is None:
            self.failures += self._load(chunk)
            return
        self._settle(self.concurrency - 1)
        self._in_flight.add(self._pool.submit(self._load, chunk))

    def _settle(self, most: int) -> None:
        """Collect answered requests, waiting until at most ``most`` are in flight; a failed request stops the others
        and its error is raised once they have ended."""
        while self._in_flight:
            done = {f for f in self._in_flight if f.done()}
            if not done:
                if len(self._in_flight) <= most:
                    return
                done, _ = wait(self._in_flight, return_when=FIRST_COMPLETED)
            self._in_flight -= done
            errors = [e for f in done if (e := f.exception()) is not None]
            if errors:
                self._stop.set()  # the others give up their retries; what they had loaded still counts
                wait(self._in_flight)
                done |= self._in_flight
                self._in_flight.clear()
                self._stop.clear()
            for f in done:
                if not f.cancelled() and f.exception() is None:
                    self.failures += f.result()  # refusals are real (their groups were deleted): always reported
            if errors:
                raise errors[0]

    # ---- one request (in a sending thread, or the caller's with concurrency 1) ------------------------------------
    def _load(self, chunk: _Chunk) -> list[Reject]:
        errors: dict[int, dict[str, Any]] = {}
        pending = list(range(len(chunk.docs)))
        for attempt in range(self.max_retries + 1):
            self._wait_turn()
            body = b"".join(chunk.docs[k][3] for k in pending)
            try:
                resp = self.t.request("POST", "/_bulk", body=body, ndjson=True, what="bulk indexing")
            except (ClusterRequestError, Unavailable) as e:
                if isinstance(e, ClusterRequestError) and e.http_status not in RETRYABLE:
                    raise
                if attempt == self.max_retries:
                    raise Unavailable(f"bulk indexing gave up after {attempt + 1} tries: {e.message}",
                                      retry_after=30) from e
                self._back_off(attempt, full=isinstance(e, ClusterRequestError) and e.http_status == 429)
                continue
            retry, full = [], False
            for k, item in zip(pending, resp["items"], strict=True):  # the cluster answers every item, in order
                result = next(iter(item.values()))
                status = result.get("status", 500)
                if status in RETRYABLE or status >= 500:
                    retry.append(k)
                    errors[k] = result.get("error", {})
                    full = full or status == 429
                elif status >= 300:
                    errors[k] = result.get("error", {})
                else:
                    errors.pop(k, None)
            pending = retry
            if not pending:
                break
            if attempt == self.max_retries:
                raise Unavailable(f"bulk indexing gave up after {attempt + 1} tries: {len(pending)} documents "
                                  f"still refused ({error_reason(errors[pending[0]])})", retry_after=30)
            self._back_off(attempt, full=full)
        return self._reject_groups(chunk, errors)

    def _back_off(self, attempt: int, *, full: bool) -> None:
        """Wait before this request's next try; a 429 (``full``) holds back every request of the writer as long."""
        delay = min(self.backoff_s * 2 ** attempt, MAX_BACKOFF_S)
        with self._lock:
            self.retries += 1
            if full:
                self._paused_until = max(self._paused_until, time.monotonic() + delay)
        if self._stop.wait(delay):
            raise _Stopped

    def _wait_turn(self) -> None:
        while (left := self._paused_until - time.monotonic()) > 0 or self._stop.is_set():
            if self._stop.wait(max(left, 0)):
                raise _Stopped

    def _reject_groups(self, chunk: _Chunk, errors: dict[int, dict[str, Any]]) -> list[Reject]:
        failed: dict[int, dict[str, Any]] = {}
        for k, err in errors.items():
            failed.setdefault(chunk.docs[k][0], err)
        rejects, deletes = [], []
        for g, err in sorted(failed.items()):
            docs = [(index, doc_id) for group, index, doc_id, _ in chunk.docs if group == g]
            rejects.append(Reject(source=f"cluster:{docs[0][0]}", pmcid=chunk.keys[g], field=error_field(err),
                                  reason=f"refused by the cluster: {error_reason(err)}"))
            deletes += [json.dumps({"delete": {"_index": i, "_id": d}}).encode() + b"\n" for i, d in docs]
        if deletes:
            self.t.request("POST", "/_bulk", body=b"".join(deletes), ndjson=True, what="removing refused papers")
        return rejects
