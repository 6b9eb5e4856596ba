"""The composition root: every service of one configuration, wired in one place.

``Services.open(settings)`` is what the app factory (``search.api.app``), the CLI commands, the indexer and the
benchmarks call; nothing else constructs a service from another. Each service is made on first use (a ``flysift
terms`` call loads the term service and its engine, never the session store or the HTTP stack):

- ``search``: ``SearchService``, the read side; it opens the configured engine of each collection (``engine``);
- ``terms``: ``TermService`` over the configured engine of the default collection (term indexes live there);
- ``store`` and ``sessions``: the session store the settings choose (by default a shared one when the engine's index
  is shared), and ``SessionService`` over it;
- ``builds``: ``BuildService``, the one write path (the REST routes and the indexer's runs are its adapters).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from search.core.config import Settings, load_settings
from search.core.names import DEFAULT_COLLECTION
from search.engines import capabilities_of, check_settings

if TYPE_CHECKING:
    from search.builds.service import BuildService
    from search.engines import Engine
    from search.ontology.service import TermService
    from search.retrieval.service import SearchService
    from search.sessions.service import SessionService
    from search.sessions.store import SessionStore

T = TypeVar("T")


class Services:
    """The services of one configuration (see the module docstring). Each is made once, on first use, whatever
    thread asks first."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._lock = threading.RLock()
        self._made: dict[str, Any] = {}

    @classmethod
    def open(cls, settings: Settings | None = None) -> Services:
        """The services of ``settings`` (default: the environment and ``FLYSIFT_CONFIG``). A bad value, or one the
        chosen engine cannot apply, is a one-line ``config_error`` here, before anything starts."""
        return cls(check_settings(settings if settings is not None else load_settings()))

    def _once(self, name: str, make: Callable[[], T]) -> T:
        with self._lock:
            if name not in self._made:
                self._made[name] = make()
            return cast(T, self._made[name])

    # the imports are local: a command pays only for the services it uses
    @property
    def search(self) -> SearchService:
        from search.retrieval.service import SearchService

        return self._once("search", lambda: SearchService(self.settings))

    def engine(self, collection: str = DEFAULT_COLLECTION) -> Engine:
        """The configured engine of ``collection`` (opened once; the name is checked)."""
        return self.search.engine(collection)

    @property
    def terms(self) -> TermService:
        from search.ontology.service import TermService

        return self._once("terms", lambda: TermService(self.settings.data_dir, self.engine(),
                                                       max_limit=self.settings.max_page_size,
                                                       max_query_chars=self.settings.max_query_chars))

    @property
    def store(self) -> SessionStore:
        from search.sessions.store import open_store

        return self._once("store", lambda: open_store(self.settings, shared=capabilities_of(self.settings).shared))

    @property
    def sessions(self) -> SessionService:
        from search.sessions.service import SessionService

        return self._once("sessions", lambda: SessionService(self.store, self.settings, terms=self.terms))

    @property
    def builds(self) -> BuildService:
        from search.builds.service import BuildService

        return self._once("builds", lambda: BuildService(self.engine,
                                                         idle_timeout_s=self.settings.build_idle_timeout_s))
