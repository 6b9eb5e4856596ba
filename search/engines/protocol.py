"""The ``Engine`` and ``Build`` protocols: everything outside ``search/engines/`` reaches an engine through these.

Write side: ``open_build`` returns a ``Build`` that papers (with their passages) are added to; ``publish`` makes it
the live index atomically (a killed build leaves the previous one serving). Read side: paper and passage search
from an ``EngineQuery``, paper fetch, a scan of every passage (the dense index embeds them), stats and whether an
index exists. Ontology terms live in their own per-ontology index, replaced as a whole by ``write_terms`` and
searched by ``search_terms`` as ``search.text.term_search`` defines it, identically in every engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal, Protocol

from search.core.models import (
    IndexStats,
    Paper,
    PaperSearchResults,
    Passage,
    PassageSearchResults,
    Reject,
    Term,
    TermHit,
)
from search.core.query import EngineQuery
from search.core.supplements import SupplementChunk


class Build(Protocol):
    """An index version being written. Adds are upserts by pmcid, so re-adding after a resume is harmless."""

    id: str
    #: opaque resume state saved with the last commit (e.g. how many input records were consumed)
    state: dict[str, Any]
    #: papers the engine refused since the caller last cleared the list (one ``Reject`` naming the field each);
    #: the caller records them as rejects and clears the list. Always empty where the engine refuses nothing.
    failures: list[Reject]

    def add(self, paper: Paper, passages: list[Passage]) -> None:
        """Same as ``add_prepared(preparer(paper, passages))``, all in the calling process."""

    def add_prepared(self, prepared: Any) -> None:
        """Add one paper prepared by the engine's ``preparer`` (possibly in another process)."""

    def flush(self) -> None:
        """Send what is buffered and wait for it, so that ``failures`` holds every refusal of the papers added so
        far (the caller records them before ``commit`` saves the resume state)."""

    def commit(self, state: dict[str, Any]) -> None: ...
    def count(self) -> int: ...

    def publish(self, *, allow_shrink: bool = False) -> None:
        """Make this build live, unless ``publish_refusal`` objects (``BuildRefused``; the build stays open)."""

    def abort(self, *, discard: bool = False) -> None:
        """Stop writing; keep the partial build for a resume, or remove it (``discard``) so it holds no disk."""


class TermEngine(Protocol):
    """The term side of an engine: what the term service needs."""

    def write_terms(self, ontology: str, terms: Iterable[Term]) -> int:
        """Replace the ontology's term index with ``terms`` (atomically); returns how many were indexed."""

    def search_terms(self, ontology: str, query: str, *, aspect: str | None = None, limit: int = 10,
                     exclude_ids: set[str] | frozenset[str] = frozenset(),
                     include_obsolete: bool = False) -> list[TermHit]:
        """Terms best matching ``query`` (``search.text.term_search``); ``exclude_ids`` and other aspects never
        come back, whatever ``limit`` is."""

    def term_candidates(self, ontology: str, queries: Sequence[tuple[str, int]], *, aspect: str | None = None,
                        exclude_ids: set[str] | frozenset[str] = frozenset(),
                        include_obsolete: bool = False) -> list[list[tuple[str, float]]]:
        """For each ``(query, limit)``, the ``(id, score)`` pairs ``search_terms`` would return, in one call and
        without building hits (the term re-ranker reads many candidates and returns few)."""

    def term_hits(self, ontology: str, ids: Sequence[str], tokens: Iterable[str] = ()) -> list[TermHit]:
        """The terms ``ids`` as hits (score 0, ``matched_synonym`` against ``tokens``), in that order; unknown ids
        are left out."""


class Engine(TermEngine, Protocol):
    name: str

    def open_build(self, fingerprint: str, resume: bool = True) -> Build: ...

    def preparer(self) -> Callable[[Paper, list[Passage]], Any]:
        """A picklable module-level function doing the per-paper work that needs no writer (analysis,
        serialisation, compression). The indexer runs it in worker processes and hands its picklable result to
        ``Build.add_prepared``, so that work uses every core while one process writes."""


    def search_papers(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                      snippets: bool = True) -> PaperSearchResults: ...
    def search_passages(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                        snippets: bool = True) -> PassageSearchResults: ...
    def get_paper(self, pmcid: str) -> Paper | None: ...

    def supplement_chunks(self, pmcid: str, file_index: int, part: int, start: int,
                          limit: int) -> list[SupplementChunk]:
        """The chunks of one part of a paper's supplementary file (``search.core.supplements``) whose last
        row/paragraph/page is ``start`` or later, in order, at most ``limit``; none for a build without them."""

    def scan_passages(self) -> Iterator[tuple[Passage, str]]:
        """Every passage of the published build with its paper's title, in the same order on every call for one
        build (the dense index embeds them and resumes by position). ``IndexMissing`` before the first publish."""

    def has_index(self) -> bool:
        """Whether the collection has a published build (health answers with it; no error when it has none)."""

    def bm25_parameters(self, kind: Literal["papers", "passages"] = "papers") -> dict[str, Any]:
        """k1, b and field weights that searches of ``kind`` run under now (``explain``, ``stats``): the published
        index's k1/b where an engine sets them per index, the collection's configured weights."""

    def stats(self) -> IndexStats: ...
    def close(self) -> None: ...
