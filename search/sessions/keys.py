"""API keys, teams, scopes and the per-key rate limit.

A key looks like ``fsk_<key id>_<secret>``; the store keeps only its id and the SHA-256 of the whole key (keys are
256-bit random, so a fast hash is enough: there is nothing to brute-force). A key belongs to one team and has scopes:
``agent`` (search, read, sessions) and ``admin`` (additionally indexing endpoints). A team sees only its own
sessions. Auth is off unless ``FLYSIFT_AUTH=true``; then every caller is the team ``local`` with every scope, which
is for a local demo only.

The rate limit is a token bucket per key and per API process (``FLYSIFT_RATE_LIMIT_PER_MINUTE``, burst
``FLYSIFT_RATE_LIMIT_BURST``); with N worker processes a key can reach N times the rate, so divide accordingly or
limit at the load balancer.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from typing import Literal

import regex
from pydantic import BaseModel, Field

from search.core.errors import FlysiftError, InvalidRequest

Scope = Literal["agent", "admin"]
SCOPES: tuple[str, ...] = ("agent", "admin")
LOCAL_TEAM = "local"
#: matched in full (``fullmatch``): with ``$`` a trailing newline got through, and ``lab1\n`` was another team
TEAM_NAME = regex.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
_KEY = regex.compile(r"^fsk_([0-9a-f]{12})_[A-Za-z0-9_\-]{20,}$")


class Unauthorized(FlysiftError):
    status = 401
    code = "unauthorized"

    def __init__(self, message: str):
        super().__init__(message, headers={"WWW-Authenticate": "Bearer"})


class Forbidden(FlysiftError):
    status = 403
    code = "forbidden"


class RateLimited(FlysiftError):
    status = 429
    code = "rate_limited"

    def __init__(self, retry_after: float, rate: float):
        secs = max(1, int(retry_after + 0.999))
        super().__init__(f"Rate limit of {rate:g} requests per minute for this key reached; retry in {secs} s.",
                         details={"retry_after_s": secs}, headers={"Retry-After": str(secs)})


class ApiKey(BaseModel):
    id: str
    team: str
    name: str = ""
    scopes: list[str] = Field(default_factory=lambda: ["agent"])
    hash: str = Field("", exclude=True)
    created_at: float
    revoked_at: float | None = None


class Principal(BaseModel):
    """Who is calling: the team, the key's scopes (all of them when auth is off) and the key id."""

    team: str
    scopes: list[str]
    key_id: str | None = None

    def require(self, scope: str) -> None:
        if scope not in self.scopes:
            raise Forbidden(f"This endpoint needs the {scope!r} scope; the key has {self.scopes}. Ask an operator "
                            f"for a key with `flysift admin create-key --team {self.team} --scope {scope}`.",
                            details={"needed": scope, "scopes": self.scopes})


LOCAL = Principal(team=LOCAL_TEAM, scopes=list(SCOPES))


def check_team_name(name: str) -> str:
    if not isinstance(name, str) or not TEAM_NAME.fullmatch(name):
        raise InvalidRequest(f"Invalid team name {name!r}: 1-64 letters, digits, '.', '-' or '_'.",
                             details={"field": "team"})
    return name


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key(team: str, scopes: list[str], name: str = "") -> tuple[str, ApiKey]:
    """A fresh key (shown once) and the record to store."""
    bad = [s for s in scopes if s not in SCOPES]
    if bad or not scopes:
        raise InvalidRequest(f"Unknown scope(s) {bad}; valid scopes are {list(SCOPES)}.", details={"field": "scopes"})
    key_id = secrets.token_hex(6)
    key = f"fsk_{key_id}_{secrets.token_urlsafe(32)}"
    return key, ApiKey(id=key_id, team=team, name=name, scopes=list(dict.fromkeys(scopes)), hash=hash_key(key),
                       created_at=time.time())


def key_id_of(key: str) -> str:
    """The id part of a key, or Unauthorized when the string is not shaped like one of our keys."""
    m = _KEY.match(key)
    if not m:
        raise Unauthorized("Malformed API key: expected 'Authorization: Bearer fsk_…' as issued by "
                           "`flysift admin create-key`.")
    return m.group(1)


def verify(key: str, record: ApiKey | None) -> Principal:
    """The principal of a presented key, given the stored record of its id."""
    if record is None or not hmac.compare_digest(record.hash, hash_key(key)):
        raise Unauthorized("Unknown API key.")
    if record.revoked_at is not None:
        raise Unauthorized(f"API key {record.id} was revoked; ask an operator for a new one.")
    return Principal(team=record.team, scopes=record.scopes, key_id=record.id)


#: buckets a limiter keeps at most; past it, full buckets are dropped first, then the longest idle ones
MAX_BUCKETS = 50_000
#: the limiter looks for full buckets to drop after this many new buckets
PRUNE_EVERY = 1_000


class RateLimiter:
    """Token buckets per key: ``burst`` tokens, refilled at ``per_minute / 60`` tokens a second.

    A bucket that has refilled is the same as no bucket, so it is dropped: every :data:`PRUNE_EVERY` new buckets the
    full ones go, and the map never holds more than ``max_buckets`` (then the longest idle go first). Without this,
    calls with random key ids (each one a failed-auth bucket) grew a worker's memory without bound."""

    def __init__(self, per_minute: float, burst: int, max_buckets: int = MAX_BUCKETS):
        self.rate = per_minute / 60.0
        self.per_minute = per_minute
        self.burst = max(1, burst)
        self.max_buckets = max(1, max_buckets)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._added = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._buckets)

    def _prune(self, now: float) -> None:
        """Drop the buckets that are full again; then, if still too many, the least recently used (the dict keeps
        insertion order and ``hit`` re-inserts a bucket it uses, so the first keys are the longest idle)."""
        full = [k for k, (tokens, last) in self._buckets.items()
                if tokens + (now - last) * self.rate >= self.burst]
        for k in full:
            del self._buckets[k]
        excess = len(self._buckets) - self.max_buckets + 1
        if excess > 0:
            for k in list(self._buckets)[:excess]:
                del self._buckets[k]

    def hit(self, key: str, now: float | None = None) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic() if now is None else now
        with self._lock:
            found = self._buckets.pop(key, None)
            if found is None:
                self._added += 1
                if self._added >= PRUNE_EVERY or len(self._buckets) >= self.max_buckets:
                    self._added = 0
                    self._prune(now)
            tokens, last = found or (float(self.burst), now)
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                raise RateLimited((1.0 - tokens) / self.rate, self.per_minute)
            self._buckets[key] = (tokens - 1.0, now)
