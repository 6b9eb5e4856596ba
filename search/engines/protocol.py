"""The ``Engine`` and ``Build`` protocols: everything outside ``search/engines/`` reaches an engine through these.

Write side: ``open_build`` returns a ``Build`` that papers (with their passages) are added to; ``publish`` makes it
the live index atomically (a killed build leaves the previous one serving). Read side: paper and passage search
from an ``EngineQuery``, paper fetch, a scan of every passage (the dense index embeds them), stats and whether an
index exists. Ontology terms live in their own per-ontology index, replaced as a whole by ``write_terms`` and
searched by ``search_terms`` as ``search.text.term_search`` defines it, identically in every engine.

Code above the engines never asks which engine it has: it reads the engine's :class:`Capabilities`, and what must
live beside a published build (the dense index, ``search.engines.dense``) reaches the build's folder through
``Engine.published_files``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from search.core.checks import Check
from search.core.models import (
    ConceptMention,
    IndexStats,
    Paper,
    PaperHit,
    PaperSearchResults,
    Passage,
    PassageHit,
    PassageSearchResults,
    Reject,
    Term,
    TermHit,
)
from search.core.query import EngineQuery, HighlightSpec
from search.core.supplements import SupplementChunk


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do, for the code above it that must choose (never a branch on the engine's name)."""

    #: a published build is a folder of this machine's data directory (``Engine.published_files``): files that
    #: belong to one build (the dense index) can live beside it
    local_builds: bool
    #: a search is CPU work on files this process has open, with no network wait: the API may answer it on the event
    #: loop instead of a worker thread
    in_process: bool
    #: the index is shared by every machine that serves it: sessions default to a store they share as well
    shared: bool
    #: BM25's k1 and b can be set per collection (field weights work in every engine)
    bm25_params: bool


class PublishedBuild(NamedTuple):
    """The published build of a collection: its id and its folder (what lives there belongs to this build alone)."""

    build: str
    path: Path


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


class VectorWriter(Protocol):
    """Passage vectors being written for the published build (``VectorStore.writer``), resumable."""

    #: passages of the scan already written by an interrupted run of the same model (skip them)
    done: int

    def write(self, rows: Sequence[tuple[str, str, str, int | None, Sequence[str]]], vectors: Any) -> None:
        """``(passage_id, pmcid, section_type, year, the paper's section types)`` per row, and one unit-length
        float32 vector per row."""

    def checkpoint(self, done: int) -> None:
        """Make what was written durable and remember that the first ``done`` passages are in."""

    def publish(self, meta: dict[str, Any]) -> None:
        """Make these vectors the ones searched (atomically), recording ``meta`` (model, backend, counts)."""


class VectorStore(Protocol):
    """An engine's own passage vectors and their nearest-neighbour search (the cluster's k-NN). The embedded engine
    has none: its dense index is files beside its builds (``search.engines.dense``)."""

    def writer(self, meta: dict[str, Any], *, resume: bool = True) -> VectorWriter:
        """A writer of vectors for the published build; ``meta`` names model, dim, backend and dtype (a resumed run
        must match them). ``DenseUnavailable`` where the cluster cannot hold vectors (no k-NN plugin)."""

    def meta(self) -> dict[str, Any]:
        """What the vectors of the published build were made with; ``DenseUnavailable`` when there are none."""

    def search(self, vector: Sequence[float], k: int, filters: Any = None,
               paper_level: bool = False) -> list[tuple[str, str, float]]:
        """The ``k`` nearest passages ``(passage_id, pmcid, cosine)``, best first, within ``filters`` (a
        ``search.core.query.Filters``; with ``paper_level`` a section filter keeps every passage of a paper that has
        such a section, as the paper search's filter means)."""


class ConceptWriter(Protocol):
    """Writes the concept index of a collection's published build (``flysift index concepts``): the mentions of
    ontology terms in its passages, each with its term's ancestors. ``done`` holds the papers an interrupted earlier
    run finished; nothing is searched until ``publish``."""

    done: set[str]

    def add(self, pmcid: str, rows: Iterable[tuple[str, str, int, int, str, str, Sequence[str]]]) -> None:
        """One paper's mentions: (passage id, term id, start, end, text, via, the term and its ancestors)."""

    def commit(self) -> None: ...

    def publish(self, meta: dict[str, Any]) -> dict[str, Any]:
        """Make it the build's concept index (atomically); returns ``meta`` with the counts and bytes."""

    def abort(self) -> None: ...


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
    #: a label for people (health, stats, banners); code chooses by ``capabilities``
    name: str
    capabilities: Capabilities
    #: the collection this engine serves
    collection: str

    def open_build(self, fingerprint: str, resume: bool = True) -> Build: ...

    def preparer(self) -> Callable[[Paper, list[Passage]], Any]:
        """A picklable module-level function doing the per-paper work that needs no writer (analysis,
        serialisation, compression). The indexer runs it in worker processes and hands its picklable result to
        ``Build.add_prepared``, so that work uses every core while one process writes."""


    def search_papers(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                      snippets: bool = True, highlight: HighlightSpec | None = None) -> PaperSearchResults:
        """``highlight``: fragments of title, abstract and best passage (``search.text.highlight``, the same
        function in every engine)."""

    def search_passages(self, query: EngineQuery, limit: int = 10, offset: int = 0,
                        snippets: bool = True, highlight: HighlightSpec | None = None) -> PassageSearchResults: ...
    def get_paper(self, pmcid: str) -> Paper | None: ...

    # ---- browsing (each engine's ``browse`` module): facets, exports, heads, document frequencies -------------
    def facets(self, kind: Literal["papers", "passages"], query: EngineQuery,
               names: Iterable[str]) -> dict[str, dict[str, int]]:
        """For ``names`` among ``year`` and ``section``: how many of all matching papers (passages) have each value
        (papers: a body section of that type); values without any are left out. The same counts in every engine."""

    def export_papers(self, query: EngineQuery, limit: int = 10_000) -> Iterator[PaperHit]:
        """The first ``limit`` matching papers, best first, without snippets, read as they are consumed (bounded
        memory whatever ``limit`` is)."""

    def export_passages(self, query: EngineQuery, limit: int = 10_000) -> Iterator[PassageHit]: ...

    def paper_heads(self, pmcids: Iterable[str]) -> dict[str, PaperHit]:
        """Title, year, journal, pmid and doi of these papers (score 0; unknown ones left out)."""

    def doc_freqs(self, tokens: Iterable[str]) -> tuple[int, dict[str, int]]:
        """The number of papers, and how many hold each word-view token (more-like-this weighs terms by it)."""

    def open_concepts(self, resume: bool = True) -> tuple[ConceptWriter, str]:
        """A writer of the published build's concept index, and that build's id."""

    def concepts_info(self) -> dict[str, Any] | None:
        """What the published build's concept index holds (ontologies, papers, mentions, terms, bytes), or None."""

    def paper_concepts(self, pmcid: str) -> list[ConceptMention]:
        """Every concept mention of a paper, in text order (``concepts_missing`` without a concept index)."""

    def concept_counts(self, kind: Literal["papers", "passages"], term_ids: Sequence[str]) -> dict[str, int]:
        """The papers (pmcid) or passages (id) that mention one of ``term_ids`` or a descendant, with how many
        mentions; ``concepts_missing`` (409) without a concept index for the published build."""

    def supplement_chunks(self, pmcid: str, file_index: int, part: int, start: int,
                          limit: int) -> list[SupplementChunk]:
        """The chunks of one part of a paper's supplementary file (``search.core.supplements``) whose last
        row/paragraph/page is ``start`` or later, in order, at most ``limit``; none for a build without them."""

    def scan_passages(self) -> Iterator[tuple[Passage, str]]:
        """Every passage of the published build with its paper's title, in the same order on every call for one
        build (the dense index embeds them and resumes by position). ``IndexMissing`` before the first publish."""

    def vector_store(self) -> VectorStore | None:
        """The engine's own vector store for dense search, or None where dense vectors live outside the engine."""

    def has_index(self) -> bool:
        """Whether the collection has a published build (health answers with it; no error when it has none)."""

    def outdated(self) -> str | None:
        """Why the published build should be rewritten (an on-disk layout this engine reads only for now, to stop
        reading after a deprecation): one line naming ``flysift upgrade``; None when it is current or absent."""

    def scan_papers(self) -> Iterator[Paper]:
        """Every paper of the published build (``flysift upgrade`` rewrites an outdated build from them); only asked
        of an engine whose ``outdated()`` said so."""

    def published_files(self) -> PublishedBuild:
        """The published build's id and folder, for an engine with ``capabilities.local_builds`` (others raise
        ``NotImplementedError``); ``IndexMissing`` before the first publish. The folder changes with every publish."""

    def bm25_parameters(self, kind: Literal["papers", "passages"] = "papers") -> dict[str, Any]:
        """k1, b and field weights that searches of ``kind`` run under now (``explain``, ``stats``): the published
        index's k1/b where an engine sets them per index, the collection's configured weights."""

    def stats(self) -> IndexStats: ...

    def readiness(self, deep: bool = False) -> list[Check]:
        """What this engine needs to serve, checked now: the embedded engine every collection and term index of its
        data dir (files present, published builds open); the cluster engine that the cluster answers. ``deep``
        (``flysift doctor``) may take longer (a query per build, integrity checks). ``/v1/ready`` is not ready while
        any check fails."""

    def close(self) -> None: ...


@runtime_checkable
class Backupable(Protocol):
    """An engine whose indexes ``flysift backup`` copies itself. The embedded engine copies (hard-links) its
    published builds and term indexes; an engine without this capability keeps its own backups (a cluster's snapshot
    repository), and ``flysift backup`` says so in the backup's manifest."""

    def backup(self, dest: Path, link: bool = True) -> dict[str, Any]:
        """Copy the published state into ``dest`` in the data dir's layout, consistently, while serving; returns
        what was copied (for the manifest)."""


@runtime_checkable
class Snapshotting(Protocol):
    """An engine that keeps its indexes, and a session store beside them, in a cluster that backs them up itself (the
    snapshot API into a repository the nodes share): ``flysift backup`` asks it for a snapshot and records the
    snapshot's name in the backup's manifest, then checks and restores it by that name."""

    def create_snapshot(self) -> dict[str, Any]:
        """Snapshot every index of the deployment (collections, term indexes, the session store) and wait for it;
        returns at least ``snapshot``, ``repository``, ``indices`` and ``documents``."""

    def check_snapshot(self, name: str, indices: list[str]) -> dict[str, Any]:
        """The snapshot ``name`` after checking that it exists, ended SUCCESS and holds every one of ``indices``;
        raises a ``FlysiftError`` naming what is wrong."""

    def live_indexes(self) -> list[str]:
        """The deployment's indexes in the cluster now (what a restore would replace)."""

    def restore_snapshot(self, name: str, keep_replaced: bool = True) -> dict[str, Any]:
        """Bring the deployment's indexes back to snapshot ``name``, the live ones serving until the copy is
        proven; the replaced ones are then kept, closed (the way back), unless not ``keep_replaced``. Returns at
        least ``indices``, ``documents`` and ``replaced`` (each replaced index with the aliases it served)."""

    def replaced_indexes(self) -> list[dict[str, Any]]:
        """The indexes earlier restores replaced and kept (``index``, ``created``), oldest first."""

    def drop_replaced(self) -> list[str]:
        """Delete the indexes earlier restores kept; returns their names."""
