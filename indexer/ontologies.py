"""``flysift index ontology FILE --name go|fbbt|fbdv``: load an OBO file, index its terms, keep the compact form."""

from __future__ import annotations

import time
from pathlib import Path

import click

from search.cli.main import data_dir_option, settings_for
from search.core.names import ONTOLOGY_PATTERN, is_valid


def _name(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    if not is_valid("ontology", value):
        raise click.BadParameter(f"use a short lower-case name such as go, fbbt or fbdv ({ONTOLOGY_PATTERN})")
    return value


@click.command("ontology")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", required=True, callback=_name,
              help="Ontology name: go, fbbt, fbdv (known id formats) or another lower-case name")
@data_dir_option
@click.option("--no-cache", is_flag=True, help="Parse the OBO file even if the ontology cache has it")
def ontology(file: Path, name: str, data_dir: Path | None, no_cache: bool) -> None:
    """Index an OBO ontology (plain or .gz) for term search, lookups and the hierarchy."""
    from search.engines import open_engine
    from search.ontology.model import Ontology
    from search.ontology.service import TermService

    settings = settings_for(data_dir)
    t0 = time.perf_counter()
    ont = Ontology.load(file, name, use_cache=not no_cache)
    loaded = time.perf_counter() - t0
    stats = ont.stats()
    n = TermService(settings.data_dir, engine=open_engine(settings)).index_ontology(ont)
    click.echo(f"{name}: {stats['terms']} terms ({stats['obsolete']} obsolete, {stats['alt_ids']} alt ids, "
               f"{stats['synonyms']} synonyms) from {file} [{stats['data_version'] or 'no data-version'}]; "
               f"loaded in {loaded:.1f} s, indexed {n} in {time.perf_counter() - t0 - loaded:.1f} s "
               f"into {settings.data_dir}", err=True)
