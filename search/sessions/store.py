"""The session store: sessions, reads (the budget), registered names, traces, submissions, teams and API keys.

``SessionStore`` is the protocol; ``SqliteStore`` (``<data_dir>/sessions.sqlite``, WAL) serves one machine, any
number of API processes included: a read's unit is reserved inside one ``BEGIN IMMEDIATE`` transaction (SQLite's
writer lock, shared by every process that opens the file), so two concurrent reads for the last unit cannot both
win, and spent in the transaction that appends the call's trace event (see ``search.sessions.policy``: at most
once, never for nothing).
``search.sessions.cluster_store.ClusterStore`` is the shared store for several machines. ``open_store`` picks one.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from search.core.config import Settings
from search.core.errors import NotFound
from search.schema.sessions import Session, Submission, TraceEvent
from search.sessions.keys import ApiKey
from search.sessions.models import RESERVATION_TTL_S, Conflict, ReadCharge, Reservation, session_not_found
from search.sessions.policy import commit_decision, require_open, reserve_decision


class SessionStore(Protocol):
    # teams and keys
    def create_team(self, name: str) -> None: ...
    def list_teams(self) -> list[str]: ...
    def add_key(self, key: ApiKey) -> None: ...
    def get_key(self, key_id: str) -> ApiKey | None: ...
    def list_keys(self, team: str | None = None) -> list[ApiKey]: ...
    def revoke_key(self, key_id: str) -> ApiKey: ...
    # sessions
    def create_session(self, session: Session) -> None: ...
    def get_session(self, session_id: str) -> Session | None: ...
    def list_sessions(self, team: str, limit: int = 100, offset: int = 0) -> list[Session]: ...
    def close_session(self, session_id: str) -> Session: ...
    def charge_read(self, session_id: str, pmcid: str, continuation: bool = False) -> ReadCharge: ...
    def reserve_read(self, session_id: str, pmcid: str, continuation: bool = False,
                     traced: bool = True) -> ReadCharge: ...
    def commit_read(self, session_id: str, charge: ReadCharge, event: TraceEvent | None = None,
                    answered: bool = True) -> int | None: ...
    def register_names(self, session_id: str, names: list[str]) -> list[str]: ...
    def append_trace(self, session_id: str, event: TraceEvent) -> int: ...
    def trace(self, session_id: str, after: int = 0, limit: int = 1000) -> list[TraceEvent]: ...
    def add_submission(self, session_id: str, submission: Submission) -> int: ...
    def submissions(self, session_id: str) -> list[Submission]: ...
    def close(self) -> None: ...


def open_store(settings: Settings, *, shared: bool = False) -> SessionStore:
    """The store ``settings.session_store`` names; by default the cluster store where the index is ``shared`` by
    several machines (``Capabilities.shared`` of the engine: ``search.services.Services.store`` passes it), else
    SQLite in the data directory."""
    kind = settings.session_store or ("cluster" if shared else "sqlite")
    if kind == "cluster":
        from search.sessions.cluster_store import ClusterStore

        return ClusterStore.from_settings(settings)
    return SqliteStore(settings.session_db or Path(settings.data_dir) / "sessions.sqlite")


_SCHEMA = """
CREATE TABLE IF NOT EXISTS teams (name TEXT PRIMARY KEY, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS api_keys (id TEXT PRIMARY KEY, team TEXT NOT NULL REFERENCES teams(name), name TEXT,
    scopes TEXT NOT NULL, hash TEXT NOT NULL, created_at REAL NOT NULL, revoked_at REAL);
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, team TEXT NOT NULL, created_at REAL NOT NULL,
    status TEXT NOT NULL, closed_at REAL, budget_used INTEGER NOT NULL DEFAULT 0,
    trace_seq INTEGER NOT NULL DEFAULT 0, submission_seq INTEGER NOT NULL DEFAULT 0, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_team ON sessions(team, created_at);
CREATE TABLE IF NOT EXISTS reads (session_id TEXT NOT NULL, pmcid TEXT NOT NULL, n INTEGER NOT NULL,
    first_at REAL NOT NULL, ord INTEGER NOT NULL, PRIMARY KEY (session_id, pmcid));
CREATE TABLE IF NOT EXISTS pending (token TEXT PRIMARY KEY, session_id TEXT NOT NULL, pmcid TEXT NOT NULL,
    unit INTEGER NOT NULL, expires_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS pending_session ON pending(session_id);
CREATE TABLE IF NOT EXISTS names (session_id TEXT NOT NULL, name TEXT NOT NULL, ord INTEGER NOT NULL,
    PRIMARY KEY (session_id, name));
CREATE TABLE IF NOT EXISTS trace (session_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT NOT NULL,
    PRIMARY KEY (session_id, seq));
CREATE TABLE IF NOT EXISTS submissions (session_id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq));
"""

#: a background thread of each process checkpoints the WAL this often, so that a request's write does not pay for a
#: checkpoint's fsync (SQLite's own checkpoint at 1,000 WAL pages stays as the backstop)
CHECKPOINT_EVERY_S = 0.5

#: sessions whose budget policy and size a store keeps parsed (emptied when full)
LIMIT_CACHE = 10_000

#: fields of Session kept in the ``data`` column (the rest are columns or child tables)
_LIVE_FIELDS = {"status", "closed_at", "budget_used", "papers_read", "registered_names", "submissions"}


class SqliteStore:
    """SQLite in WAL mode; one connection per thread, writes in ``BEGIN IMMEDIATE`` transactions (synchronous=NORMAL:
    a commit writes the WAL without fsync; the background checkpoint, ``CHECKPOINT_EVERY_S``, syncs)."""

    def __init__(self, path: str | Path, reservation_ttl_s: float = RESERVATION_TTL_S):
        self.path = Path(path)
        self.reservation_ttl_s = reservation_ttl_s
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        # one writer per process at a time: threads of one worker queue here and are woken as soon as the writer is
        # done, instead of polling SQLite's lock in its busy handler's sleeps of 1–100 ms (a third of a worker's time
        # under 64 agents); SQLite's lock still orders the workers
        self._write = threading.Lock()
        self._limit_cache: dict[str, tuple[str, int]] = {}
        self._conn().executescript(_SCHEMA)
        self._checkpointer: threading.Thread | None = None
        self._stop = threading.Event()

    def _start_checkpointer(self) -> None:
        """On the first write: a daemon thread that checkpoints the WAL until the store is closed or collected."""
        if self._checkpointer is not None:
            return
        ref, stop = weakref.ref(self), self._stop

        def run() -> None:
            while not stop.wait(CHECKPOINT_EVERY_S):
                store = ref()
                if store is None:
                    return
                with contextlib.suppress(sqlite3.Error):   # busy or closed: the next tick, or SQLite's own, does it
                    store._conn().execute("PRAGMA wal_checkpoint(PASSIVE)")
                del store

        self._checkpointer = threading.Thread(target=run, name="flysift-wal-checkpoint", daemon=True)
        self._checkpointer.start()

    def _conn(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA busy_timeout=60000")
            self._local.db = db
        return db

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; ``BEGIN IMMEDIATE`` takes the database's writer lock before reading."""
        db = self._conn()
        if self._checkpointer is None:
            self._start_checkpointer()
        with self._write:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def close(self) -> None:
        self._stop.set()
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # ---- teams and keys ---------------------------------------------------------------------------------------
    def create_team(self, name: str) -> None:
        with self._tx() as db:
            if db.execute("SELECT 1 FROM teams WHERE name=?", (name,)).fetchone():
                raise Conflict(f"Team {name!r} already exists.", details={"team": name})
            db.execute("INSERT INTO teams VALUES (?, ?)", (name, time.time()))

    def list_teams(self) -> list[str]:
        return [r[0] for r in self._conn().execute("SELECT name FROM teams ORDER BY name")]

    def add_key(self, key: ApiKey) -> None:
        with self._tx() as db:
            if not db.execute("SELECT 1 FROM teams WHERE name=?", (key.team,)).fetchone():
                raise NotFound(f"Team {key.team!r} does not exist; create it with `flysift admin create-team`.",
                               details={"team": key.team})
            db.execute("INSERT INTO api_keys VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (key.id, key.team, key.name, json.dumps(key.scopes), key.hash, key.created_at, key.revoked_at))

    @staticmethod
    def _key(row: sqlite3.Row | tuple[Any, ...]) -> ApiKey:
        return ApiKey(id=row[0], team=row[1], name=row[2] or "", scopes=json.loads(row[3]), hash=row[4],
                      created_at=row[5], revoked_at=row[6])

    def get_key(self, key_id: str) -> ApiKey | None:
        row = self._conn().execute("SELECT * FROM api_keys WHERE id=?", (key_id,)).fetchone()
        return self._key(row) if row else None

    def list_keys(self, team: str | None = None) -> list[ApiKey]:
        sql, args = "SELECT * FROM api_keys", tuple[str, ...]()
        if team:
            sql, args = sql + " WHERE team=?", (team,)
        return [self._key(r) for r in self._conn().execute(sql + " ORDER BY created_at", args)]

    def revoke_key(self, key_id: str) -> ApiKey:
        with self._tx() as db:
            cur = db.execute("UPDATE api_keys SET revoked_at=? WHERE id=? AND revoked_at IS NULL",
                             (time.time(), key_id))
            if cur.rowcount == 0 and not db.execute("SELECT 1 FROM api_keys WHERE id=?", (key_id,)).fetchone():
                raise NotFound(f"No API key with id {key_id!r}.", details={"key_id": key_id})
        return self.get_key(key_id)  # type: ignore[return-value]

    # ---- sessions ---------------------------------------------------------------------------------------------
    def create_session(self, session: Session) -> None:
        data = session.model_dump_json(exclude=_LIVE_FIELDS)
        with self._tx() as db:
            db.execute("INSERT INTO sessions (id, team, created_at, status, data) VALUES (?, ?, ?, 'open', ?)",
                       (session.id, session.team, session.created_at, data))

    def _session(self, db: sqlite3.Connection, row: tuple[Any, ...]) -> Session:
        sid, _team, _created, status, closed_at, used, _tseq, nsub, data = row
        reads = [r[0] for r in db.execute("SELECT pmcid FROM reads WHERE session_id=? ORDER BY ord", (sid,))]
        names = [r[0] for r in db.execute("SELECT name FROM names WHERE session_id=? ORDER BY ord", (sid,))]
        return Session.model_validate({**json.loads(data), "status": status, "closed_at": closed_at,
                                       "budget_used": used, "papers_read": reads, "registered_names": names,
                                       "submissions": nsub})

    def get_session(self, session_id: str) -> Session | None:
        db = self._conn()
        db.execute("BEGIN")  # one snapshot for the row and its children
        try:
            row = db.execute("SELECT * FROM sessions WHERE id=?", (session_id,)).fetchone()
            return self._session(db, row) if row else None
        finally:
            db.execute("COMMIT")

    def list_sessions(self, team: str, limit: int = 100, offset: int = 0) -> list[Session]:
        db = self._conn()
        db.execute("BEGIN")
        try:
            rows = db.execute("SELECT * FROM sessions WHERE team=? ORDER BY created_at DESC LIMIT ? OFFSET ?",
                              (team, limit, offset)).fetchall()
            return [self._session(db, r) for r in rows]
        finally:
            db.execute("COMMIT")

    def _row(self, db: sqlite3.Connection, session_id: str) -> tuple[Any, ...]:
        row = db.execute("SELECT status, budget_used, data FROM sessions WHERE id=?", (session_id,)).fetchone()
        if row is None:
            raise session_not_found(session_id)
        return row

    def close_session(self, session_id: str) -> Session:
        with self._tx() as db:
            self._row(db, session_id)
            db.execute("UPDATE sessions SET status='closed', closed_at=? WHERE id=? AND status='open'",
                       (time.time(), session_id))
        return self.get_session(session_id)  # type: ignore[return-value]

    def charge_read(self, session_id: str, pmcid: str, continuation: bool = False) -> ReadCharge:
        """Reserve and spend at once (for callers that hold the answer already)."""
        charge = self.reserve_read(session_id, pmcid, continuation)
        self.commit_read(session_id, charge)
        return charge.model_copy(update={"token": None})

    def _limits(self, db: sqlite3.Connection, session_id: str) -> tuple[str, int]:
        """A session's budget policy and size: fixed at creation, so parsed from its ``data`` once per process."""
        found = self._limit_cache.get(session_id)
        if found is None:
            row = db.execute("SELECT data FROM sessions WHERE id=?", (session_id,)).fetchone()
            if row is None:
                raise session_not_found(session_id)
            meta = json.loads(row[0])
            found = meta["budget_policy"], meta["max_papers"]
            if len(self._limit_cache) >= LIMIT_CACHE:
                self._limit_cache.clear()
            self._limit_cache[session_id] = found
        return found

    @staticmethod
    def _budget(db: sqlite3.Connection, session_id: str, pmcid: str, now: float
                ) -> tuple[str, int, list[Reservation], set[str]]:
        """Status, units spent, live reservations, and which of the papers the budget rules ask about (``pmcid``
        and the reserved ones) were read: two statements, whatever the number of papers read."""
        row = db.execute("SELECT status, budget_used, EXISTS(SELECT 1 FROM reads WHERE session_id=?1 AND pmcid=?2) "
                         "FROM sessions WHERE id=?1", (session_id, pmcid)).fetchone()
        if row is None:
            raise session_not_found(session_id)
        status, used, is_read = row
        live, read = [], {pmcid} if is_read else set()
        for token, held, unit, expires_at, held_read in db.execute(
                "SELECT token, pmcid, unit, expires_at, EXISTS(SELECT 1 FROM reads r WHERE r.session_id=p.session_id "
                "AND r.pmcid=p.pmcid) FROM pending p WHERE session_id=? AND expires_at>?", (session_id, now)):
            live.append(Reservation(token, held, unit, expires_at))
            if held_read:
                read.add(held)
        return status, used, live, read

    def reserve_read(self, session_id: str, pmcid: str, continuation: bool = False,
                     traced: bool = True) -> ReadCharge:
        """Hold the read's unit (raises at the limit); ``commit_read`` spends it with the answer's record (the trace
        event is numbered then: ``traced`` matters to the cluster store only). A read that can never cost (a paper
        already read under ``distinct``, a continuation page of one under ``flyaoc``) holds nothing and writes
        nothing: its token is None."""
        now = time.time()
        with self._tx() as db:
            policy, max_papers = self._limits(db, session_id)
            status, used, live, read = self._budget(db, session_id, pmcid, now)
            unit, held = reserve_decision(session_id, status, policy, max_papers, used, live, read, pmcid,
                                          continuation)
            token = None
            if unit or pmcid not in read:   # a unit, or a share in the unit of a pending first read (distinct)
                token = secrets.token_urlsafe(12)
                db.execute("INSERT INTO pending VALUES (?, ?, ?, ?, ?)",
                           (token, session_id, pmcid, unit, now + self.reservation_ttl_s))
        return ReadCharge(pmcid=pmcid, charged=bool(unit), used=held, max_papers=max_papers,
                          continuation=continuation, token=token)

    def commit_read(self, session_id: str, charge: ReadCharge, event: TraceEvent | None = None,
                    answered: bool = True) -> int | None:
        """In one transaction: drop the reservation (and the session's lapsed ones), spend its unit if the call was
        ``answered``, and append the call's trace ``event``; returns the event's seq."""
        now = time.time()
        with self._tx() as db:
            policy, max_papers = self._limits(db, session_id)
            _, used, live, read = self._budget(db, session_id, charge.pmcid, now)
            db.execute("DELETE FROM pending WHERE session_id=? AND (token=? OR expires_at<=?)",
                       (session_id, charge.token, now))
            spend = False
            if answered:
                spend = commit_decision(policy, max_papers, used, live, read, charge.token, charge.pmcid,
                                        charge.continuation, now)
                db.execute("INSERT INTO reads VALUES (?1, ?2, 1, ?3, (SELECT COUNT(*) FROM reads WHERE session_id=?1)) "
                           "ON CONFLICT (session_id, pmcid) DO UPDATE SET n=n+1", (session_id, charge.pmcid, now))
            if event is not None:
                return self._append(db, session_id, event, int(spend))
            if spend:
                db.execute("UPDATE sessions SET budget_used=budget_used+1 WHERE id=?", (session_id,))
            return None

    def register_names(self, session_id: str, names: list[str]) -> list[str]:
        with self._tx() as db:
            status, _, _ = self._row(db, session_id)
            require_open(session_id, status)
            for name in names:
                db.execute("INSERT OR IGNORE INTO names VALUES (?, ?, (SELECT COUNT(*) FROM names WHERE session_id=?))",
                           (session_id, name, session_id))
            return [r[0] for r in db.execute("SELECT name FROM names WHERE session_id=? ORDER BY ord", (session_id,))]

    def append_trace(self, session_id: str, event: TraceEvent) -> int:
        with self._tx() as db:
            return self._append(db, session_id, event)

    @staticmethod
    def _append(db: sqlite3.Connection, session_id: str, event: TraceEvent, spend: int = 0) -> int:
        """Number and store ``event``, spending ``spend`` units, in one update of the session's row."""
        row = db.execute("UPDATE sessions SET trace_seq=trace_seq+1, budget_used=budget_used+? WHERE id=? "
                         "RETURNING trace_seq", (spend, session_id)).fetchone()
        if row is None:
            raise session_not_found(session_id)
        db.execute("INSERT INTO trace VALUES (?, ?, ?)",
                   (session_id, row[0], event.model_copy(update={"seq": row[0]}).model_dump_json()))
        return row[0]

    def trace(self, session_id: str, after: int = 0, limit: int = 1000) -> list[TraceEvent]:
        rows = self._conn().execute("SELECT event FROM trace WHERE session_id=? AND seq>? ORDER BY seq LIMIT ?",
                                    (session_id, after, limit))
        return [TraceEvent.from_stored(r[0]) for r in rows]  # tolerates what older versions stored

    def add_submission(self, session_id: str, submission: Submission) -> int:
        with self._tx() as db:
            status, _, _ = self._row(db, session_id)
            require_open(session_id, status)
            seq = db.execute("UPDATE sessions SET submission_seq=submission_seq+1 WHERE id=? RETURNING submission_seq",
                             (session_id,)).fetchone()[0]
            db.execute("INSERT INTO submissions VALUES (?, ?, ?)",
                       (session_id, seq, submission.model_copy(update={"seq": seq}).model_dump_json()))
        return seq

    def submissions(self, session_id: str) -> list[Submission]:
        rows = self._conn().execute("SELECT body FROM submissions WHERE session_id=? ORDER BY seq", (session_id,))
        return [Submission.from_stored(r[0]) for r in rows]
