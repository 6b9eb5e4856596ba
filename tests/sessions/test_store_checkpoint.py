"""The SQLite store's write path (issue #13): a background thread checkpoints the WAL, so requests do not pay for
the checkpoint's sync, and it stops when the store is closed."""

from __future__ import annotations

import time

from search.core.models import Gene
from search.schema.sessions import Session, TraceEvent
from search.sessions import store as store_mod
from search.sessions.store import SqliteStore


def test_wal_is_checkpointed_in_the_background_and_the_thread_stops(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "CHECKPOINT_EVERY_S", 0.05)
    st = SqliteStore(tmp_path / "s.sqlite")
    assert st._checkpointer is None  # a reader starts nothing
    st.create_session(Session(id="ses_a", team="t", gene=Gene(id="FBgn0000001", symbol="x"), max_papers=4,
                              created_at=time.time()))
    ev = TraceEvent(time=time.time(), tool="search_papers", arguments={}, returned_ids=[], latency_ms=1.0, status=200)
    for _ in range(50):
        st.append_trace("ses_a", ev)
    thread = st._checkpointer
    assert thread is not None and thread.is_alive()
    wal = tmp_path / "s.sqlite-wal"
    first = wal.stat().st_size
    writes = 50
    for _ in range(20):  # on a loaded machine the thread may need more than one pause to run
        time.sleep(0.5)  # the background thread copies every frame into the database...
        for _ in range(50):  # ...so these writes start the WAL over instead of growing it
            st.append_trace("ses_a", ev)
        writes += 50
        if wal.stat().st_size <= first:
            break
    assert wal.stat().st_size <= first  # without the checkpoint thread the WAL grows by every round of writes
    assert [e.seq for e in st.trace("ses_a")] == list(range(1, writes + 1))
    st.close()
    thread.join(timeout=5)
    assert not thread.is_alive()
