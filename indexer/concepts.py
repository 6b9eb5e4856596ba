"""``flysift index concepts``: the ontology terms every passage of a collection mentions, for ``term:`` queries.

The term recogniser (``search.ontology.recognise``, the lexical curator's, one home) reads each paper's passages as
one document (its abbreviations and acronyms count across them) over the indexed ontologies (GO, FBbt, FBdv by
default, in that order where a label names terms of two); every mention is stored with its term and each ancestor
(``is_a``, ``part_of``, ``substage_of``), so ``term:GO:0007219`` finds mentions of the term or of any descendant.

The run is resumable (papers done are recorded with their mentions at each commit; a rerun continues) and shows
progress; ``workers`` processes recognise (forked from the process that built the recogniser, so it is built once);
the concept index belongs to the published build and becomes searchable only when complete. A new
``flysift index corpus`` publishes a build without one: run this again after it.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import click

from search.cli.options import data_dir_option, settings_for
from search.core.config import Settings
from search.core.errors import FlysiftError
from search.core.names import DEFAULT_COLLECTION
from search.core.progress import Progress
from search.ontology.recognise import TASK_ONTOLOGIES, TermRecogniser
from search.services import Services

#: papers between commits (the resume points of an interrupted run)
COMMIT_EVERY = 200
#: papers one worker task holds
CHUNK = 8

# the recogniser and the ontologies of a run, set before the worker processes are forked (never pickled)
_RUN: dict[str, Any] = {}

Group = tuple[str, list[tuple[str, str]]]   # (pmcid, [(passage id, text)])
Row = tuple[str, str, int, int, str, str, tuple[str, ...]]


def papers(passages: Iterable[tuple[Any, str]], skip: set[str]) -> Iterator[Group]:
    """The engine's passages (in its stable order, a paper's together) grouped by paper, papers in ``skip`` left
    out."""
    pmcid: str | None = None
    batch: list[tuple[str, str]] = []
    for p, _title in passages:
        if p.pmcid != pmcid:
            if pmcid is not None and pmcid not in skip:
                yield pmcid, batch
            pmcid, batch = p.pmcid, []
        batch.append((p.id, p.text))
    if pmcid is not None and pmcid not in skip:
        yield pmcid, batch


def _closure(term_id: str, ontology: str) -> tuple[str, ...]:
    cache: dict[str, tuple[str, ...]] = _RUN["closures"]
    got = cache.get(term_id)
    if got is None:
        ont = _RUN["ontologies"][ontology]
        got = cache[term_id] = (term_id, *ont.ancestors(term_id))
    return got


def recognise(group: Group) -> tuple[str, list[Row], int]:
    """One paper's mentions (a worker's task): (pmcid, rows, passages read)."""
    pmcid, passages = group
    recogniser: TermRecogniser = _RUN["recogniser"]
    found = recogniser.recognise([text for _, text in passages], _RUN["order"])
    rows = [(pid, m.term.id, m.start, m.end, m.text, m.via, _closure(m.term.id, m.term.ontology))
            for (pid, _), mentions in zip(passages, found, strict=True) for m in mentions]
    return pmcid, rows, len(passages)


def _recognise_chunk(groups: list[Group]) -> list[tuple[str, list[Row], int]]:
    return [recognise(g) for g in groups]


def _chunks(groups: Iterator[Group]) -> Iterator[list[Group]]:
    batch: list[Group] = []
    for g in groups:
        batch.append(g)
        if len(batch) == CHUNK:
            yield batch
            batch = []
    if batch:
        yield batch


def load(services: Services, names: list[str] | None) -> tuple[TermRecogniser, dict[str, Any], list[str]]:
    """The recogniser over the indexed ontologies asked for (default: GO, FBbt, FBdv, those indexed)."""
    terms = services.terms
    indexed = terms.names()
    wanted = names or [n for n in TASK_ONTOLOGIES["go"] if n in indexed]
    missing = [n for n in wanted if n not in indexed]
    if not wanted or missing:
        raise FlysiftError(f"no ontology to recognise: {', '.join(missing or ['go, fbbt, fbdv'])} not indexed; run "
                           "`flysift index ontology FILE --name NAME` first", code="ontology_missing", status=404,
                           details={"valid": indexed})
    onts = {n: terms.ontology(n) for n in wanted}
    r = TermRecogniser()
    for name, ont in onts.items():
        r.extend(name, (t for t in ont.terms() if not t.obsolete))
    return r.learn_morphology(), onts, wanted


def index_concepts(settings: Settings, collection: str = DEFAULT_COLLECTION, *, ontologies: list[str] | None = None,
                   workers: int | None = None, resume: bool = True,
                   progress: Callable[[int, int | None], None] | None = None,
                   stage: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Recognise and index the concepts of the collection's published build (see the module docstring); returns
    the concept index's meta with the run's figures."""
    t0, c0 = time.perf_counter(), time.process_time()
    services = Services.open(settings)
    engine = services.engine(collection)
    total = engine.stats().passages
    writer, build = engine.open_concepts(resume=resume)
    try:
        recogniser, onts, order = load(services, ontologies)
        setup = time.perf_counter() - t0
        if stage:
            stage(f"recogniser: {len(recogniser.terms):,} terms of {', '.join(order)} "
                  f"({time.perf_counter() - t0:.1f} s); {len(writer.done):,} papers done before")
        _RUN.update(recogniser=recogniser, ontologies=onts, order=order, closures={})
        groups = papers(engine.scan_passages(), set(writer.done))
        n = workers or max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
        fork = sys.platform.startswith("linux")
        pool = multiprocessing.get_context("fork").Pool(n) if n > 1 and fork else None
        read = papers_since = 0
        try:
            results: Iterable[list[tuple[str, list[Row], int]]] = (
                pool.imap(_recognise_chunk, _chunks(groups)) if pool else map(_recognise_chunk, _chunks(groups)))
            for chunk in results:
                for pmcid, rows, count in chunk:
                    writer.add(pmcid, rows)
                    read += count
                    papers_since += 1
                if papers_since >= COMMIT_EVERY:
                    writer.commit()
                    papers_since = 0
                if progress:
                    progress(read, total)
        finally:
            if pool is not None:
                pool.terminate()
        writer.commit()
        seconds = time.perf_counter() - t0
        recognising = seconds - setup
        meta = writer.publish({"build": build, "ontologies": order, "passages_read": read,
                               "seconds": round(seconds, 1), "setup_s": round(setup, 1),
                               "recognise_s": round(recognising, 1), "cpu_s": round(time.process_time() - c0, 1),
                               "workers": n if pool else 1, "created": time.time()})
    except BaseException:
        try:
            writer.commit()   # what was read stays for the next run to resume
        finally:
            writer.abort()
        raise
    finally:
        _RUN.clear()
    # the rate of recognition: the recogniser is built once a run (``setup_s``), whatever the collection's size
    meta["passages_per_s"] = round(read / recognising, 1) if recognising > 0 else None
    return meta


@click.command("concepts")
@data_dir_option
@click.option("--collection", default=DEFAULT_COLLECTION, show_default=True)
@click.option("--ontology", "ontologies", multiple=True,
              help="Ontologies to recognise, in the order that decides between same-named terms [default: go, "
                   "fbbt, fbdv, those indexed]")
@click.option("--workers", type=click.IntRange(1, 64), default=None,
              help="Processes that recognise (forked; 1: this process) [default: the usable cores]")
@click.option("--no-resume", is_flag=True, help="Discard the concepts of an interrupted run and start over")
@click.option("--json", "as_json", is_flag=True,
              help="Progress as JSON lines on stderr; end with the concept index's meta as one JSON line on stdout")
def concepts(data_dir: Path | None, collection: str, ontologies: tuple[str, ...], workers: int | None,
             no_resume: bool, as_json: bool) -> None:
    """Recognise the GO/FBbt/FBdv terms every passage mentions and index them with their ancestors, so that
    `term:GO:0007219` finds passages and papers mentioning the term or a descendant. Rerun after each
    `flysift index corpus`: the concept index belongs to one build. Resumable; shows progress."""
    import json

    settings = settings_for(data_dir)
    with Progress("passages", json_lines=as_json) as progress:
        progress.stage(f"recognising the terms of {collection!r}'s passages", collection=collection)
        meta = index_concepts(settings, collection, ontologies=list(ontologies) or None, workers=workers,
                              resume=not no_resume, progress=progress.update,
                              stage=lambda m: progress.stage(m, always=True))
    click.echo(f"concept index of {collection!r}: {meta['mentions']:,} mentions of {meta['terms']:,} terms in "
               f"{meta['papers']:,} papers ({meta['bytes'] / 2**20:.1f} MiB), {meta['seconds']} s "
               f"({meta['passages_per_s']} passages/s, {meta['workers']} workers), build {meta['build']}", err=True)
    if as_json:
        click.echo(json.dumps(meta))
