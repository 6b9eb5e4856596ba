"""``flysift index ontology FILE --name go|fbbt|fbdv``: load an ontology file (OBO, OWL RDF/XML or OBO Graphs JSON),
index its terms, keep the compact form."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from search.cli.options import data_dir_option, settings_for
from search.core.names import ONTOLOGY_PATTERN, is_valid
from search.core.progress import Progress


def name_mismatch(name: str, ids: Sequence[str]) -> str | None:
    """Why ``ids`` do not look like the ontology ``name`` (None when they do).

    A known name (go, fbbt, fbdv) needs most live ids to carry its prefix: indexing FBdv as ``go`` would replace GO.
    Another name is refused when most ids carry a known ontology's prefix (FBdv's file under ``dev`` hides it from
    lookups by id prefix)."""
    from search.ontology.model import KNOWN

    if not ids:
        return None
    prefixes = Counter(term_id.split(":", 1)[0] for term_id in ids)
    top, count = prefixes.most_common(1)[0]
    share = count / len(ids)
    expected = KNOWN.get(name)
    top_known = next((s.name for s in KNOWN.values() if s.prefix == top), None)
    if expected is not None:
        if prefixes.get(expected.prefix, 0) * 2 >= len(ids):
            return None
        hint = f" (did you mean --name {top_known}?)" if top_known else ""
        return (f"--name {name} expects ids like {expected.example}, but {share:.0%} of the file's "
                f"{len(ids)} ids start with {top}:{hint}")
    if top_known and share > 0.5:
        return (f"--name {name}: {share:.0%} of the file's {len(ids)} ids are {top}: ids "
                f"(did you mean --name {top_known}?)")
    return None


def _name(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    if not is_valid("ontology", value):
        raise click.BadParameter(f"use a short lower-case name such as go, fbbt or fbdv ({ONTOLOGY_PATTERN})")
    return value


@click.command("ontology")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", required=True, callback=_name,
              help="Ontology name: go, fbbt, fbdv (known id formats) or another lower-case name")
@data_dir_option
@click.option("--no-cache", is_flag=True, help="Parse the file even if the ontology cache has it")
@click.option("--allow-name-mismatch", is_flag=True,
              help="Index under --name even when the file's ids belong to another known ontology")
@click.option("--allow-shrink", is_flag=True,
              help="Index even when the file holds less than min_publish_share (default 50%) of the terms indexed "
                   "under --name now (a truncated or wrong file would otherwise replace them)")
@click.option("--dense/--no-dense", default=False,
              help="Also embed every live term's labels and definition for mode dense/hybrid term search (needs "
                   "the dense extra; GO takes ~20 min of CPU, seconds on a GPU) [default: no]")
@click.option("--json", "as_json", is_flag=True,
              help="Stages as JSON lines on stderr; end with a one-line JSON summary on stdout")
def ontology(file: Path, name: str, data_dir: Path | None, no_cache: bool, allow_name_mismatch: bool,
             allow_shrink: bool, dense: bool, as_json: bool) -> None:
    """Index an ontology (OBO, OWL RDF/XML or OBO Graphs JSON; plain or .gz; the last two need the 'owl' extra) for
    term search, lookups and the hierarchy, and, with ``--dense``, its dense term index. On a terminal each stage
    prints a line as it starts (GO takes about a minute; its dense term index ~20 minutes of CPU, so it is asked for,
    never a surprise of having the extra installed)."""
    from search.ontology.model import Ontology
    from search.services import Services

    services = Services.open(settings_for(data_dir))
    settings = services.settings
    progress = Progress("terms", json_lines=as_json)
    t0 = time.perf_counter()
    progress.stage(f"{name}: reading {file}", ontology=name, file=str(file))
    ont = Ontology.load(file, name, use_cache=not no_cache)
    loaded = time.perf_counter() - t0
    mismatch = name_mismatch(name, ont.ids)
    if mismatch and not allow_name_mismatch:
        raise click.UsageError(f"{mismatch}; nothing was indexed (--allow-name-mismatch indexes it anyway)")
    stats = ont.stats()
    progress.stage(f"{name}: indexing {stats['terms']} terms (search index, hierarchy, re-ranker model)",
                   ontology=name, terms=stats["terms"])
    n = services.terms.index_ontology(ont, allow_shrink=allow_shrink, min_share=settings.min_publish_share)
    indexed = time.perf_counter() - t0 - loaded
    dense_meta = _dense_terms(settings.data_dir, ont, progress) if dense else None
    vectors = (f"; dense term index: {dense_meta['vectors']} vectors ({dense_meta['backend']}) in "
               f"{dense_meta['seconds']:.1f} s" if dense_meta else "")
    from search.ontology.encoder import present
    from search.ontology.encoder.artefact import stale_note

    if present(settings.data_dir) and (note := stale_note(settings.data_dir, ont)):
        progress.write(note, always=True)
    click.echo(f"{name}: {stats['terms']} terms ({stats['obsolete']} obsolete, {stats['alt_ids']} alt ids, "
               f"{stats['synonyms']} synonyms) from {file} [{stats['data_version'] or 'no data-version'}]; "
               f"loaded in {loaded:.1f} s, indexed {n} in {indexed:.1f} s into {settings.data_dir}{vectors}", err=True)
    if as_json:
        click.echo(json.dumps({"ontology": name, "file": str(file), "terms": stats["terms"], "indexed": n,
                               "obsolete": stats["obsolete"], "data_version": stats["data_version"],
                               "load_s": round(loaded, 3), "index_s": round(indexed, 3), "dense": dense_meta}))


def _dense_terms(data_dir: Path, ont: Any, progress: Progress) -> dict[str, Any] | None:
    """The dense term index of ``ont`` (search.ontology.dense_terms), built when asked for with ``--dense``; without
    the extra that is dense_unavailable, one line and exit status 2."""
    from search.ontology import dense_terms

    progress.stage(f"{ont.name}: embedding the live terms' labels and definitions (dense term index)",
                   ontology=ont.name)
    with progress:
        return dense_terms.build(data_dir, ont, progress=progress.update)
