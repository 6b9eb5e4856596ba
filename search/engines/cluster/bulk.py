"""Bulk loading: streaming ``_bulk`` requests in bounded chunks, retries with backoff, whole-paper refusals."""

from __future__ import annotations

import json
import time
from typing import Any

from search.core.errors import Unavailable
from search.core.models import Reject
from search.engines.cluster.transport import RETRYABLE, ClusterRequestError, Transport, error_field, error_reason


class Bulk:
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
            for k, item in zip(pending, resp["items"], strict=True):  # the cluster answers every item, in order
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
                                  f"still refused ({error_reason(errors[pending[0]])})", retry_after=30)
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
            self.failures.append(Reject(source=f"cluster:{docs[0][0]}", pmcid=pmcid, field=error_field(err),
                                        reason=f"refused by the cluster: {error_reason(err)}"))
            deletes += [json.dumps({"delete": {"_index": i, "_id": d}}).encode() + b"\n" for i, d in docs]
        if deletes:
            self.t.request("POST", "/_bulk", body=b"".join(deletes), ndjson=True, what="removing refused papers")

