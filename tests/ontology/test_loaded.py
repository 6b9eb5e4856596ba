"""The reloading cache both term-search encoders keep (search.ontology.loaded)."""

from __future__ import annotations

import threading

import pytest

from search.ontology.loaded import ReloadingCache


def counting():
    """A list of the values loaded, and ``load(value)``: a loader that records and returns ``value``."""
    calls: list[str] = []

    def load(value: str):
        def go() -> str:
            calls.append(value)
            return value
        return go
    return calls, load


def test_a_name_is_loaded_once_per_key_and_again_when_it_changes():
    cache: ReloadingCache[str] = ReloadingCache()
    calls, load = counting()
    assert cache.get("go", 1, load("first")) == "first"
    assert cache.get("go", 1, load("unused")) == "first"
    assert cache.get("go", 2, load("second")) == "second"
    assert cache.get("go", 2, load("unused")) == "second"
    # back to an older key is a change too: loaded again, not remembered
    assert cache.get("go", 1, load("third")) == "third"
    assert calls == ["first", "second", "third"]


def test_names_are_kept_apart():
    cache: ReloadingCache[str] = ReloadingCache()
    calls, load = counting()
    assert cache.get("go", 1, load("go v1")) == "go v1"
    assert cache.get("fbbt", 1, load("fbbt v1")) == "fbbt v1"
    assert cache.get("go", 1, load("unused")) == "go v1"
    assert calls == ["go v1", "fbbt v1"]


def test_a_failed_load_caches_nothing():
    cache: ReloadingCache[str] = ReloadingCache()

    def broken() -> str:
        raise OSError("disk")

    with pytest.raises(OSError):
        cache.get("go", 1, broken)
    assert cache.get("go", 1, lambda: "loaded") == "loaded"


def test_callers_seeing_the_same_change_at_once_load_it_once():
    cache: ReloadingCache[int] = ReloadingCache()
    loads: list[int] = []
    start = threading.Barrier(8)
    got: list[int] = []

    def load() -> int:
        loads.append(1)
        return len(loads)

    def caller() -> None:
        start.wait()
        got.append(cache.get("go", "v2", load))

    threads = [threading.Thread(target=caller) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == [1]
    assert got == [1] * 8
