"""The reloading cache both term-search encoders keep (search.ontology.loaded)."""

from __future__ import annotations

import threading

import pytest

from search.ontology.loaded import ReloadingCache

#: (name, key, what a load would give, what get answers): loaded once per name and key, again when the key changes
STEPS = [
    ("go", 1, "go v1", "go v1"),
    ("go", 1, "unused", "go v1"),
    ("fbbt", 1, "fbbt v1", "fbbt v1"),      # names are kept apart
    ("go", 2, "go v2", "go v2"),
    ("go", 2, "unused", "go v2"),
    ("fbbt", 1, "unused", "fbbt v1"),
    ("go", 1, "go v1 again", "go v1 again"),   # back to an older key is a change too, not remembered
]


def test_a_name_is_loaded_once_per_key_and_again_when_it_changes():
    cache: ReloadingCache[str] = ReloadingCache()
    loaded: list[str] = []

    def loader(value: str):
        def load() -> str:
            loaded.append(value)
            return value
        return load

    answers = [cache.get(name, key, loader(offered)) for name, key, offered, _ in STEPS]
    assert answers == [want for *_, want in STEPS]
    assert loaded == ["go v1", "fbbt v1", "go v2", "go v1 again"]


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
