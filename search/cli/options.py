"""What every ``flysift`` command shares: the ``--data-dir`` option, settings from the environment, a table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from search.core.config import Settings, load_settings

data_dir_option = click.option("--data-dir", type=click.Path(path_type=Path), envvar="FLYSIFT_DATA_DIR",
                               default=None, help="Index directory (env FLYSIFT_DATA_DIR; default ./data)")


def settings_for(data_dir: Path | None, **overrides: Any) -> Settings:
    """Settings from the environment, with the command's options on top."""
    if data_dir is not None:
        overrides["data_dir"] = data_dir
    return load_settings(**overrides)


def echo_json(value: Any) -> None:
    """Print ``value`` as the REST API answers it (aliases, every field), indented for a person."""
    from pydantic import BaseModel
    from pydantic_core import to_json

    if isinstance(value, BaseModel):
        click.echo(value.model_dump_json(by_alias=True, indent=2))
    else:
        click.echo(to_json(value, by_alias=True, indent=2).decode())


def print_table(rows: list[dict], columns: list[tuple[str, str, int]]) -> None:
    """``rows`` as a table of ``columns`` (title, key, widest cell): empty columns left out, cells wrapped at word
    boundaries (``search.cli.render.table``), bold headers on a terminal."""
    import sys

    from search.cli.render import table

    click.echo(table(rows, columns, sys.stdout.isatty()))
