"""The ``Engine`` protocol and the factory that picks an implementation from the settings.

Write side: ``open_build`` returns a ``Build`` that papers (with their passages) are added to; ``publish`` makes it
the live index atomically (a killed build leaves the previous one serving). Read side: paper and passage search
from an ``EngineQuery``, paper fetch, term search and stats. Ontology terms live in their own per-ontology index,
replaced as a whole by ``write_terms``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from search.models import IndexStats, Paper, PaperSearchResults, Passage, PassageSearchResults, Term, TermHit
from search.query import EngineQuery

if TYPE_CHECKING:
    from search.config import Settings


class Build(Protocol):
    """An index version being written. Adds are upserts by pmcid, so re-adding after a resume is harmless."""

    id: str
    #: opaque resume state saved with the last commit (e.g. how many input records were consumed)
    state: dict[str, Any]

    def add(self, paper: Paper, passages: list[Passage]) -> None: ...
    def commit(self, state: dict[str, Any]) -> None: ...
    def publish(self) -> None: ...
    def abort(self) -> None: ...
    def count(self) -> int: ...


class Engine(Protocol):
    name: str

    def open_build(self, fingerprint: str, resume: bool = True) -> Build: ...

    def search_papers(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                      snippets: bool = True) -> PaperSearchResults: ...
    def search_passages(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                        snippets: bool = True) -> PassageSearchResults: ...
    def get_paper(self, pmcid: str) -> Paper | None: ...
    def stats(self) -> IndexStats: ...

    def write_terms(self, ontology: str, terms: Iterable[Term]) -> int: ...
    def search_terms(self, ontology: str, query: str, *, aspect: str | None = None, limit: int = 10,
                     exclude_ids: set[str] | frozenset[str] = frozenset(),
                     include_obsolete: bool = False) -> list[TermHit]: ...
    def close(self) -> None: ...


def open_engine(settings: "Settings", *, collection: str = "default") -> Engine:
    """The engine the settings ask for: embedded unless a cluster URL (or ``engine = "cluster"``) is configured.

    A collection is an independent corpus (the FlyAOC papers are ``default``; IR test collections get their own).
    """
    if settings.engine_kind == "cluster":
        from search.engines.cluster import ClusterEngine

        return ClusterEngine(settings, collection=collection)
    from search.engines.embedded import EmbeddedEngine

    return EmbeddedEngine(settings.data_dir, collection=collection)
