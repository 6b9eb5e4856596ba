"""The store protocol, held to the same behaviour on SQLite and on the cluster (optimistic concurrency)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from search.core.errors import NotFound
from search.core.models import Gene
from search.schema.sessions import Session, Submission, TraceEvent
from search.sessions.keys import new_key
from search.sessions.models import BudgetExhausted, SessionClosed
from search.sessions.store import Conflict, SqliteStore


def _session(sid: str, team: str = "t", max_papers: int = 2, policy: str = "distinct") -> Session:
    return Session(id=sid, team=team, gene=Gene(id="FBgn0000463", symbol="Dl"), max_papers=max_papers,
                   budget_policy=policy, created_at=time.time())


def _try(store, sid, pmcid) -> bool:
    try:
        return store.charge_read(sid, pmcid).charged
    except BudgetExhausted:
        return False


class StoreContract:
    """What every store must do; subclasses provide the ``store`` fixture."""

    def test_budget_rules(self, store):
        store.create_session(_session("a"))
        assert store.charge_read("a", "P1").charged
        assert not store.charge_read("a", "P1").charged
        assert store.charge_read("a", "P2").used == 2
        with pytest.raises(BudgetExhausted) as e:
            store.charge_read("a", "P3")
        assert e.value.message == "Paper limit reached (2/2). Submit your annotations."
        store.create_session(_session("b", policy="flyaoc"))
        assert store.charge_read("b", "P1").used == 1
        assert not store.charge_read("b", "P1", continuation=True).charged
        assert store.charge_read("b", "P1").used == 2
        with pytest.raises(BudgetExhausted):
            store.charge_read("b", "P1")
        assert store.get_session("b").papers_read == ["P1"]
        with pytest.raises(NotFound):
            store.charge_read("nope", "P1")


    def test_reservations_hold_the_last_unit_then_lapse_without_overspending(self, store):
        """A read's unit is held from its answer until the answer is recorded (``commit_read``); a failed call
        releases it, a killed process's reservation lapses, and a late commit never spends past the budget."""
        store.create_session(_session("r", max_papers=1))
        p1 = store.reserve_read("r", "P1")
        with pytest.raises(BudgetExhausted):  # the unit is held by P1's answer, not yet spent
            store.reserve_read("r", "P2")
        shared = store.reserve_read("r", "P1")
        assert shared.charged is False  # a second read of the pending paper shares its unit
        store.commit_read("r", p1, answered=False)  # P1's first call failed: nothing spent, the other still holds
        with pytest.raises(BudgetExhausted):
            store.reserve_read("r", "P2")
        store.commit_read("r", shared, answered=False)
        assert store.get_session("r").budget_used == 0
        store.reservation_ttl_s = 0.0  # reservations lapse at once from here on
        late = store.reserve_read("r", "P3")
        p4 = store.reserve_read("r", "P4")  # P3's reservation lapsed
        ev = TraceEvent(time=time.time(), tool="get_paper", latency_ms=1.0, status=200, returned_ids=["P4"])
        seq = store.commit_read("r", p4, ev)
        assert [(e.seq, e.returned_ids) for e in store.trace("r")] == [(seq, ["P4"])]
        store.commit_read("r", late)  # its answer came too late to be charged: the budget is spent
        s = store.get_session("r")
        assert s.budget_used == 1 and s.papers_read == ["P4", "P3"]

    def test_concurrent_charges_in_one_process(self, store):
        store.create_session(_session("c", max_papers=5))
        with ThreadPoolExecutor(10) as pool:
            results = list(pool.map(lambda i: _try(store, "c", f"P{i}"), range(20)))
        assert sum(results) == 5 and store.get_session("c").budget_used == 5


    def test_names_trace_submissions_close_and_listing(self, store):
        store.create_session(_session("d", team="lab1"))
        store.create_session(_session("e", team="lab2"))
        assert store.register_names("d", ["x", "y"]) == ["x", "y"]
        assert store.register_names("d", ["y", "z"]) == ["x", "y", "z"]
        for i in range(3):
            ev = TraceEvent(time=time.time(), tool=f"t{i}", latency_ms=1.0, status=200, returned_ids=[f"P{i}"])
            assert store.append_trace("d", ev) == i + 1
        assert [e.tool for e in store.trace("d")] == ["t0", "t1", "t2"]
        assert [e.seq for e in store.trace("d", after=1, limit=1)] == [2]
        sub = Submission(time=time.time(), annotations={"gene_id": "FBgn0000463"}, report={"valid": True}, valid=True)
        assert store.add_submission("d", sub) == 1 and store.add_submission("d", sub) == 2
        assert [s.seq for s in store.submissions("d")] == [1, 2] and store.get_session("d").submissions == 2
        assert [s.id for s in store.list_sessions("lab1")] == ["d"]
        assert store.close_session("d").status == "closed"
        for call in (lambda: store.charge_read("d", "P9"), lambda: store.register_names("d", ["w"]),
                     lambda: store.add_submission("d", sub)):
            with pytest.raises(SessionClosed):
                call()
        assert store.append_trace("d", ev) == 4  # a refused call on a closed session is still traced
        assert store.get_session("nope") is None and store.trace("nope") == []


    def test_teams_and_keys(self, store):
        store.create_team("lab1")
        with pytest.raises(Conflict):
            store.create_team("lab1")
        key, rec = new_key("lab1", ["agent"])
        store.add_key(rec)
        assert store.get_key(rec.id).hash == rec.hash
        with pytest.raises(NotFound):
            store.add_key(new_key("nope", ["agent"])[1])
        assert [k.id for k in store.list_keys("lab1")] == [rec.id] and store.list_keys("lab2") == []
        assert store.revoke_key(rec.id).revoked_at is not None
        with pytest.raises(NotFound):
            store.revoke_key("000000000000")
        assert store.list_teams() == ["lab1"]


class TestSqliteStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path):
        return SqliteStore(tmp_path / "sessions.sqlite")

    def test_a_read_that_cannot_cost_holds_and_writes_nothing(self, store):
        """A re-read under ``distinct`` and a continuation page of a read paper under ``flyaoc`` reserve nothing:
        no reservation row, no change to the file; recording them spends nothing and traces the call."""
        db = store._conn()
        for sid, policy, continuation in (("x", "distinct", False), ("y", "flyaoc", True)):
            store.create_session(_session(sid, max_papers=1, policy=policy))
            store.charge_read(sid, "P1")
            changes = db.total_changes
            again = store.reserve_read(sid, "P1", continuation)
            assert db.total_changes == changes and again.token is None and not again.charged and again.used == 1
            ev = TraceEvent(time=time.time(), tool="get_paper", latency_ms=1.0, status=200, returned_ids=["P1"])
            assert store.commit_read(sid, again, ev) == 1
            s = store.get_session(sid)
            assert s.budget_used == 1 and s.papers_read == ["P1"] and [e.seq for e in store.trace(sid)] == [1]
        assert db.execute("SELECT COUNT(*) FROM pending").fetchone()[0] == 0
        with pytest.raises(BudgetExhausted):   # a new paper still needs a unit
            store.reserve_read("x", "P2")

    def test_a_pending_first_read_is_still_shared_and_lapsed_reservations_are_dropped(self, store):
        store.create_session(_session("z", max_papers=1))
        first = store.reserve_read("z", "P1")
        second = store.reserve_read("z", "P1")   # shares the pending unit: it must hold a reservation of its own
        assert second.token is not None and not second.charged
        store.commit_read("z", first, answered=False)   # the first call failed; the second's answer spends the unit
        store.commit_read("z", second)
        assert store.get_session("z").budget_used == 1
        store.reservation_ttl_s = 0.0
        store.create_session(_session("w", max_papers=3))
        lapsed = [store.reserve_read("w", f"P{i}") for i in range(2)]
        store.commit_read("w", store.reserve_read("w", "P9"))
        assert store._conn().execute("SELECT COUNT(*) FROM pending WHERE session_id='w'").fetchone()[0] == 0
        assert all(c.token for c in lapsed)

    def test_tracing_into_a_missing_session_is_not_found(self, store):
        ev = TraceEvent(time=time.time(), tool="t", latency_ms=1.0, status=200)
        with pytest.raises(NotFound):
            store.append_trace("nope", ev)


@pytest.mark.cluster
class TestClusterStore(StoreContract):
    @pytest.fixture
    def store(self, cluster_settings):
        from search.sessions.cluster_store import ClusterStore

        s = ClusterStore.from_settings(cluster_settings)
        yield s
        s.drop()
