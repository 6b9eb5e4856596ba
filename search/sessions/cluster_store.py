"""The shared session store for several API replicas: documents in the Elasticsearch/OpenSearch cluster.

One document per session holds its counters (budget used, trace and submission sequence numbers) and its lists
(papers read, registered names). Every change to it is a read-modify-write guarded by optimistic concurrency: the
write carries the ``_seq_no``/``_primary_term`` it read (``if_seq_no``/``if_primary_term``) and the cluster refuses it
with 409 if anyone wrote in between; then the change is redone on the fresh document. So two replicas charging the
last unit of a budget cannot both win, exactly as with SQLite's writer lock. A read's unit is reserved in the
document (``pending``, with its trace event's number) and spent only after its trace event document is written,
so a call whose answer was never recorded is never charged. Trace events and submissions are their
own documents with ids ``<session>:<seq>``, created with ``op_type=create`` after the counter was taken, and read
back by id (real-time GET, no refresh). Teams and keys are documents keyed by name and key id.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from search.core.config import Settings
from search.core.errors import NotFound, Unavailable
from search.engines.cluster.transport import ClusterRequestError, Transport
from search.schema.sessions import Session, Submission, TraceEvent
from search.sessions.keys import ApiKey
from search.sessions.models import RESERVATION_TTL_S, Conflict, ReadCharge, Reservation, session_not_found
from search.sessions.policy import commit_decision, require_open, reserve_decision

T = TypeVar("T")
MAX_ATTEMPTS = 200
MGET_BATCH = 1000
KINDS = ("sessions", "trace", "submissions", "teams", "keys")
_MAPPINGS: dict[str, dict[str, Any]] = {
    "sessions": {"team": {"type": "keyword"}, "created_at": {"type": "double"}},
    "trace": {"session_id": {"type": "keyword"}, "seq": {"type": "long"}},
    "submissions": {"session_id": {"type": "keyword"}, "seq": {"type": "long"}},
    "teams": {"name": {"type": "keyword"}},
    "keys": {"team": {"type": "keyword"}, "created_at": {"type": "double"}},
}


class _NoWrite(Exception):
    """Raised by an update function to return a value without writing."""

    def __init__(self, value: Any):
        self.value = value


class ClusterStore:
    """``SessionStore`` over cluster documents; indices ``<prefix>-sessions-<kind>`` are created on first use."""

    def __init__(self, transport: Transport, prefix: str = "flysift", replicas: int = 0,
                 reservation_ttl_s: float = RESERVATION_TTL_S):
        self.t = transport
        self.reservation_ttl_s = reservation_ttl_s
        self.prefix = prefix
        self.replicas = replicas
        self._ready = False
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> ClusterStore:
        return cls(Transport(settings), settings.cluster_index_prefix, settings.cluster_replicas)

    def index(self, kind: str) -> str:
        return f"{self.prefix}-sessions-{kind}"

    def _req(self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None) -> Any:
        self._ensure()
        return self.t.request(method, path, body=body, params=params, what="session store")

    def _ensure(self) -> None:
        if self._ready:
            return
        with self._lock:
            if self._ready:
                return
            for kind in KINDS:
                body = {"settings": {"number_of_shards": 1, "number_of_replicas": self.replicas},
                        "mappings": {"dynamic": False, "properties": _MAPPINGS[kind]}}
                try:
                    self.t.request("PUT", f"/{self.index(kind)}", body=body, what="session store setup")
                except ClusterRequestError as e:
                    if e.error_type != "resource_already_exists_exception":
                        raise
            self._ready = True

    def close(self) -> None:
        self.t.close()

    def drop(self) -> None:
        """Delete the store's indices (tests, teardown)."""
        for kind in KINDS:
            try:
                self.t.request("DELETE", f"/{self.index(kind)}", what="session store drop")
            except ClusterRequestError as e:
                if e.http_status != 404:
                    raise
        self._ready = False

    # ---- documents --------------------------------------------------------------------------------------------
    def _get(self, kind: str, doc_id: str) -> dict[str, Any] | None:
        try:
            return self._req("GET", f"/{self.index(kind)}/_doc/{doc_id}")
        except ClusterRequestError as e:
            if e.http_status == 404:
                return None
            raise

    def _create(self, kind: str, doc_id: str, doc: dict[str, Any]) -> bool:
        """Create a document; False when the id exists."""
        try:
            self._req("PUT", f"/{self.index(kind)}/_create/{doc_id}", body=doc)
            return True
        except ClusterRequestError as e:
            if e.http_status == 409:
                return False
            raise

    def _update(self, kind: str, doc_id: str, change: Callable[[dict[str, Any]], T], missing: Exception) -> T:
        """Apply ``change`` to the document and write it only if nobody wrote since we read it; else redo."""
        for attempt in range(MAX_ATTEMPTS):
            got = self._get(kind, doc_id)
            if got is None:
                raise missing
            doc = got["_source"]
            try:
                value = change(doc)
            except _NoWrite as nw:
                return nw.value
            try:
                self._req("PUT", f"/{self.index(kind)}/_doc/{doc_id}", body=doc,
                          params={"if_seq_no": str(got["_seq_no"]), "if_primary_term": str(got["_primary_term"])})
                return value
            except ClusterRequestError as e:
                if e.http_status != 409:
                    raise
            time.sleep(random.uniform(0, min(0.05, 0.002 * (attempt + 1))))
        raise Unavailable(f"{kind} {doc_id} is changed by too many writers at once; retry.", retry_after=1)

    def _mget(self, kind: str, ids: list[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i in range(0, len(ids), MGET_BATCH):
            res = self._req("POST", f"/{self.index(kind)}/_mget", body={"ids": ids[i:i + MGET_BATCH]})
            out += [d["_source"] for d in res["docs"] if d.get("found")]
        return out

    def _search(self, kind: str, query: dict[str, Any], sort: list, size: int, offset: int = 0) -> list[dict]:
        self._req("POST", f"/{self.index(kind)}/_refresh")
        res = self._req("POST", f"/{self.index(kind)}/_search",
                        body={"query": query, "sort": sort, "size": size, "from": offset})
        return [h["_source"] for h in res["hits"]["hits"]]

    # ---- teams and keys ---------------------------------------------------------------------------------------
    def create_team(self, name: str) -> None:
        if not self._create("teams", name, {"name": name, "created_at": time.time()}):
            raise Conflict(f"Team {name!r} already exists.", details={"team": name})

    def list_teams(self) -> list[str]:
        return [d["name"] for d in self._search("teams", {"match_all": {}}, [{"name": "asc"}], 10_000)]

    def add_key(self, key: ApiKey) -> None:
        if self._get("teams", key.team) is None:
            raise NotFound(f"Team {key.team!r} does not exist; create it with `flysift admin create-team`.",
                           details={"team": key.team})
        self._create("keys", key.id, {**key.model_dump(), "hash": key.hash})

    def get_key(self, key_id: str) -> ApiKey | None:
        got = self._get("keys", key_id)
        return ApiKey(**got["_source"]) if got else None

    def list_keys(self, team: str | None = None) -> list[ApiKey]:
        query = {"term": {"team": team}} if team else {"match_all": {}}
        return [ApiKey(**d) for d in self._search("keys", query, [{"created_at": "asc"}], 10_000)]

    def revoke_key(self, key_id: str) -> ApiKey:
        def change(doc: dict[str, Any]) -> None:
            if doc.get("revoked_at") is not None:
                raise _NoWrite(None)
            doc["revoked_at"] = time.time()

        self._update("keys", key_id, change, NotFound(f"No API key with id {key_id!r}.", details={"key_id": key_id}))
        return self.get_key(key_id)  # type: ignore[return-value]

    # ---- sessions ---------------------------------------------------------------------------------------------
    def create_session(self, session: Session) -> None:
        doc = {**session.model_dump(mode="json"), "trace_seq": 0, "submission_seq": 0}
        if not self._create("sessions", session.id, doc):
            raise Conflict(f"Session {session.id} already exists.")

    @staticmethod
    def _session(doc: dict[str, Any]) -> Session:
        return Session.model_validate({k: v for k, v in doc.items() if k in Session.model_fields})

    def get_session(self, session_id: str) -> Session | None:
        got = self._get("sessions", session_id)
        return self._session(got["_source"]) if got else None

    def list_sessions(self, team: str, limit: int = 100, offset: int = 0) -> list[Session]:
        docs = self._search("sessions", {"term": {"team": team}}, [{"created_at": "desc"}], limit, offset)
        return [self._session(d) for d in docs]

    def _change(self, session_id: str, change: Callable[[dict[str, Any]], T]) -> T:
        return self._update("sessions", session_id, change, session_not_found(session_id))

    def close_session(self, session_id: str) -> Session:
        def change(doc: dict[str, Any]) -> None:
            if doc["status"] != "open":
                raise _NoWrite(None)
            doc["status"], doc["closed_at"] = "closed", time.time()

        self._change(session_id, change)
        return self.get_session(session_id)  # type: ignore[return-value]

    def charge_read(self, session_id: str, pmcid: str, continuation: bool = False) -> ReadCharge:
        """Reserve and spend at once (for callers that hold the answer already)."""
        charge = self.reserve_read(session_id, pmcid, continuation, traced=False)
        self.commit_read(session_id, charge)
        return charge.model_copy(update={"token": None})

    @staticmethod
    def _reservations(doc: dict[str, Any]) -> list[Reservation]:
        return [Reservation(**r) for r in doc.get("pending", [])]

    def reserve_read(self, session_id: str, pmcid: str, continuation: bool = False,
                     traced: bool = True) -> ReadCharge:
        """Hold the read's unit in the session document (raises at the limit) and, if ``traced``, number its trace
        event; ``commit_read`` spends the unit."""
        token = secrets.token_urlsafe(12)

        def change(doc: dict[str, Any]) -> ReadCharge:
            now = time.time()
            live = [r for r in self._reservations(doc) if r.expires_at > now]
            unit, held = reserve_decision(session_id, doc["status"], doc["budget_policy"], doc["max_papers"],
                                          doc["budget_used"], live, set(doc["papers_read"]), pmcid, continuation)
            live.append(Reservation(token, pmcid, unit, now + self.reservation_ttl_s))
            doc["pending"] = [vars(r) for r in live]
            if traced:
                doc["trace_seq"] += 1
            return ReadCharge(pmcid=pmcid, charged=bool(unit), used=held, max_papers=doc["max_papers"],
                              continuation=continuation, token=token, seq=doc["trace_seq"] if traced else None)

        return self._change(session_id, change)

    def commit_read(self, session_id: str, charge: ReadCharge, event: TraceEvent | None = None,
                    answered: bool = True) -> int | None:
        """Write the call's trace ``event`` (under the number reserved for it), then, in one document write, drop the
        reservation and spend its unit if the call was ``answered``. Returns the event's seq."""
        seq = charge.seq
        if event is not None:
            if seq is None:
                seq = self._next(session_id, "trace_seq", check_open=False)
            self._put_event(session_id, seq, event)

        def change(doc: dict[str, Any]) -> None:
            pending = self._reservations(doc)
            doc["pending"] = [vars(r) for r in pending if r.token != charge.token]
            if answered:
                read = set(doc["papers_read"])
                if commit_decision(doc["budget_policy"], doc["max_papers"], doc["budget_used"], pending, read,
                                   charge.token, charge.pmcid, charge.continuation, time.time()):
                    doc["budget_used"] += 1
                if charge.pmcid not in read:
                    doc["papers_read"].append(charge.pmcid)

        self._change(session_id, change)
        return seq if event is not None else None

    def register_names(self, session_id: str, names: list[str]) -> list[str]:
        def change(doc: dict[str, Any]) -> list[str]:
            require_open(session_id, doc["status"])
            doc["registered_names"] = list(dict.fromkeys([*doc["registered_names"], *names]))
            return doc["registered_names"]

        return self._change(session_id, change)

    def _next(self, session_id: str, counter: str, check_open: bool) -> int:
        def change(doc: dict[str, Any]) -> int:
            if check_open:
                require_open(session_id, doc["status"])
            doc[counter] += 1
            if counter == "submission_seq":
                doc["submissions"] = doc[counter]
            return doc[counter]

        return self._change(session_id, change)

    def append_trace(self, session_id: str, event: TraceEvent) -> int:
        seq = self._next(session_id, "trace_seq", check_open=False)
        self._put_event(session_id, seq, event)
        return seq

    def _put_event(self, session_id: str, seq: int, event: TraceEvent) -> None:
        event = event.model_copy(update={"seq": seq})
        self._create("trace", f"{session_id}:{seq:09d}",
                     {"session_id": session_id, "seq": seq, "event": event.model_dump()})

    def _numbered(self, kind: str, session_id: str, counter: str, after: int, limit: int) -> list[dict]:
        got = self._get("sessions", session_id)
        if got is None:
            return []
        last = min(got["_source"][counter], after + limit)
        return self._mget(kind, [f"{session_id}:{i:09d}" for i in range(after + 1, last + 1)])

    def trace(self, session_id: str, after: int = 0, limit: int = 1000) -> list[TraceEvent]:
        docs = self._numbered("trace", session_id, "trace_seq", after, limit)
        return [TraceEvent.model_validate(d["event"]) for d in docs]

    def add_submission(self, session_id: str, submission: Submission) -> int:
        seq = self._next(session_id, "submission_seq", check_open=True)
        self._create("submissions", f"{session_id}:{seq:09d}",
                     {"session_id": session_id, "seq": seq,
                      "body": submission.model_copy(update={"seq": seq}).model_dump(mode="json")})
        return seq

    def submissions(self, session_id: str) -> list[Submission]:
        docs = self._numbered("submissions", session_id, "submission_seq", 0, 1_000_000)
        return [Submission.model_validate(d["body"]) for d in docs]
