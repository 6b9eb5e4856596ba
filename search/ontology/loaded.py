"""Files loaded per name and loaded again when they change: the one cache both term-search encoders keep (the term
encoder's artefact, search.ontology.encoder.runtime, and the dense term index, search.ontology.dense_terms).

Each caller says what identifies the files it would load (a key: their ``stat``s, the served ontology's identity);
a name is loaded on first use and again only when its key differs from the one it was loaded under, so a search pays
a dict look-up, and a load (with whatever it logs) happens once per change, not once per request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class ReloadingCache(Generic[V]):
    """``name`` → the value ``load()`` gave under ``key``; loaded again when the key changes.

    Thread-safe: the hit path takes no lock; a miss loads under the lock and checks again first, so requests that
    see the same change at once load it once. A ``load`` that raises caches nothing (the next call tries again)."""

    def __init__(self) -> None:
        self._loaded: dict[str, tuple[object, V]] = {}
        self._lock = threading.Lock()

    def get(self, name: str, key: object, load: Callable[[], V]) -> V:
        """The value of ``name`` loaded under ``key``, calling ``load()`` if there is none yet or it had another."""
        cached = self._loaded.get(name)
        if cached is None or cached[0] != key:
            with self._lock:
                cached = self._loaded.get(name)
                if cached is None or cached[0] != key:
                    cached = (key, load())
                    self._loaded[name] = cached
        return cached[1]
