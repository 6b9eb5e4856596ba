"""The cluster session store stays exactly-once when answers are lost or writes are run twice, as they are when a node
dies and a primary moves: the real store on a real node, with the transport losing or repeating what a failover
loses or repeats (the three-node kill itself is in tests/engines/test_cluster_nodes.py and bench/chaos_cluster.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from search.core.errors import Unavailable
from search.core.models import Gene
from search.engines.cluster.transport import ClusterRequestError, Transport
from search.schema.sessions import Session, TraceEvent

pytestmark = pytest.mark.cluster


class Faulty:
    """The real transport, except that ``fault(method, path)`` may say what goes wrong with one request:
    ``"lose"`` (sent and applied, the answer lost), ``"twice"`` (sent twice, the second answer returned: a replay on a
    promoted primary), ``"down"`` (not sent: no connection), ``"503"`` (not sent: the cluster answers 503)."""

    def __init__(self, real: Transport, fault: Callable[[str, str], str | None]):
        self.real, self.fault, self.faults = real, fault, 0

    def request(self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None,
                ndjson: bool = False, what: str = "") -> Any:
        kind = self.fault(method, path)
        if kind is not None:
            self.faults += 1
        if kind == "down":
            raise Unavailable("no connection (injected)")
        if kind == "503":
            raise ClusterRequestError(503, {"error": {"type": "unavailable_shards_exception", "reason": "injected"}},
                                      what)
        answer = self.real.request(method, path, body, params, ndjson=ndjson, what=what)
        if kind == "twice":
            return self.real.request(method, path, body, params, ndjson=ndjson, what=what)
        if kind == "lose":
            raise Unavailable("the answer was lost (injected)")
        return answer

    def replicas(self, configured: int | None) -> int:
        return self.real.replicas(configured)

    def close(self) -> None:
        self.real.close()


def every_other(kind: str, method: str, marker: str) -> Callable[[str, str], str | None]:
    n = {"i": 0}

    def fault(m: str, path: str) -> str | None:
        if m == method and marker in path:
            n["i"] += 1
            return kind if n["i"] % 2 else None
        return None

    return fault


@pytest.fixture
def make_store(cluster_settings):
    from search.sessions.cluster_store import ClusterStore

    made = []

    def make(fault: Callable[[str, str], str | None], patience_s: float = 30.0) -> tuple[ClusterStore, Faulty]:
        t = Faulty(Transport(cluster_settings), fault)
        store = ClusterStore(t, cluster_settings.cluster_index_prefix, patience_s=patience_s)  # type: ignore[arg-type]
        made.append(store)
        return store, t

    yield make
    if made:
        made[0].drop()


def _session(store, sid: str, budget: int = 20) -> None:
    store.create_session(Session(id=sid, team="t", gene=Gene(id="FBgn0000463", symbol="Dl"), max_papers=budget,
                                 created_at=time.time()))


def _event(i: int) -> TraceEvent:
    return TraceEvent(time=time.time(), tool=f"call{i}", latency_ms=1.0, status=200)


@pytest.mark.parametrize("kind", ["lose", "twice"])
def test_session_updates_apply_once_when_answers_are_lost_or_writes_replayed(make_store, kind):
    store, t = make_store(every_other(kind, "PUT", "-sessions-sessions/_doc/"))
    _session(store, "ses_a")
    for i in range(6):
        charge = store.reserve_read("ses_a", f"PMC{i}")
        store.commit_read("ses_a", charge, _event(i))
    assert t.faults >= 6
    s = store.get_session("ses_a")
    assert s.budget_used == 6 and s.papers_read == [f"PMC{i}" for i in range(6)]
    trace = store.trace("ses_a")
    assert [e.seq for e in trace] == [1, 2, 3, 4, 5, 6] and [e.tool for e in trace] == [f"call{i}" for i in range(6)]
    assert store.register_names("ses_a", ["x"]) == ["x"]


@pytest.mark.parametrize("kind", ["lose", "twice"])
def test_creates_whose_answer_is_lost_count_as_done(make_store, kind):
    store, t = make_store(every_other(kind, "PUT", "/_create/"))
    _session(store, "ses_b")
    for i in range(4):
        store.append_trace("ses_b", _event(i))
    assert t.faults >= 3
    assert [e.seq for e in store.trace("ses_b")] == [1, 2, 3, 4]
    store.create_team("team-x")   # its answer lost or replayed: still created once, no "already exists"
    store.create_team("team-y")
    assert store.list_teams() == ["team-x", "team-y"]


def test_transient_failures_are_retried_then_answer_503_with_retry_after(make_store):
    left = {"n": 3}

    def flaky(method: str, path: str) -> str | None:
        if method == "GET" and "/_doc/" in path and left["n"] > 0:
            left["n"] -= 1
            return "down" if left["n"] % 2 else "503"
        return None

    store, _ = make_store(flaky)
    _session(store, "ses_c")
    assert store.charge_read("ses_c", "PMC1").charged and left["n"] == 0

    down, _ = make_store(lambda m, p: "503" if m == "GET" and "/_doc/" in p else None, patience_s=0.5)
    with pytest.raises(Unavailable) as err:
        down.get_session("ses_c")
    assert err.value.status == 503 and "Retry-After" in err.value.headers
