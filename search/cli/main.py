"""The ``flysift`` command line.

The root group holds the read-side commands (``serve``, ``stats``; ``search``, ``passages``, ``paper``, ``similar``,
``collections`` from ``search.cli.reading``). Commands of the other
packages (``index`` and ``demo`` from the indexer, ``eval``…) register through the ``flysift.commands`` entry points
declared in pyproject.toml, so ``search`` never imports them.
"""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import click

from search.cli.options import data_dir_option, settings_for
from search.cli.reading import collections, paper, passages, search, similar
from search.core.config import Settings
from search.core.errors import FlysiftError
from search.core.names import DEFAULT_COLLECTION


class _Group(click.Group):
    """Loads the entry-point commands lazily and prints FlysiftErrors as one readable line."""

    def _plugins(self) -> dict[str, EntryPoint]:
        if not hasattr(self, "_plugin_cache"):
            self._plugin_cache = {ep.name: ep for ep in entry_points(group="flysift.commands")}
        return self._plugin_cache

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._plugins()))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        cmd = super().get_command(ctx, name)
        if cmd is None and name in self._plugins():
            cmd = self._plugins()[name].load()
        return cmd

    def invoke(self, ctx: click.Context) -> Any:
        from pydantic import ValidationError

        try:
            return super().invoke(ctx)
        except (FlysiftError, ValidationError) as exc:
            if ctx.params.get("debug"):
                raise
            code, message = ((exc.code, exc.message) if isinstance(exc, FlysiftError)
                             else ("invalid_request", validation_line(exc)))
            valid = exc.details.get("valid") if isinstance(exc, FlysiftError) else None
            if isinstance(valid, list) and valid and "valid:" not in message:
                message += f" (valid: {', '.join(str(v) for v in valid[:20])})"  # as REST's details.valid
            click.secho(f"error [{code}]: {message}", fg="red", err=True)
            if code == "query_syntax" and isinstance(exc, FlysiftError):
                click.echo(caret(exc.details), err=True)
            sys.exit(2)


def caret(details: dict) -> str:
    """The excerpt of a query syntax error with a caret under the position it names."""
    excerpt, position = str(details.get("excerpt", "")), int(details.get("position", 0))
    column = position if not excerpt.startswith("…") else excerpt.index("…") + 1 + min(position, 30)
    return f"  {excerpt}\n  {' ' * column}^"


def validation_line(exc: Exception) -> str:
    """A pydantic validation error in one line: each field and what is wrong with it (values not quoted)."""
    errors: list = getattr(exc, "errors", lambda: [])()
    parts = [(".".join(str(p) for p in e["loc"]) + ": " if e["loc"] else "") + e["msg"].removeprefix("Value error, ")
             for e in errors[:5]]
    return "; ".join(parts) or str(exc).splitlines()[0]


@click.group(cls=_Group)
@click.version_option(package_name="flysift")
@click.option("--debug", is_flag=True, help="Show the full traceback of an error instead of one line")
def main(debug: bool) -> None:
    """flysift: gene-aware literature search for curation agents."""


@main.command()
@data_dir_option
@click.option("--host", default=None, help="Bind address (default 127.0.0.1)")
@click.option("--port", type=int, default=None, help="Port (default 8000)")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker processes (default: one per core)")
@click.option("--access-log", is_flag=True, help="Log every request (method, path, status) to stderr")
def serve(data_dir: Path | None, host: str | None, port: int | None, workers: int | None, access_log: bool) -> None:
    """Serve the REST API (OpenAPI at /openapi.json).

    Workers share the index, the session store (budgets, traces, keys: exact across workers) and the cursor secret
    through the data dir; each keeps its own rate-limit buckets (a key may reach N times the rate with N workers)
    and its own open API builds (send a build's calls to one worker: --workers 1, or `flysift index`)."""
    import os

    import uvicorn

    settings = settings_for(data_dir)
    os.environ["FLYSIFT_DATA_DIR"] = str(settings.data_dir)
    host, port, workers = host or settings.host, port or settings.port, workers or default_workers()
    click.echo(serve_banner(settings, host, port, workers, access_log), err=True)
    uvicorn.run("search.api.app:create_app", factory=True, host=host, port=port, workers=workers,
                log_level="info" if access_log else "warning", access_log=access_log)


def serve_banner(settings: Settings, host: str, port: int, workers: int, access_log: bool) -> str:
    """What ``serve`` prints before it starts: the URL, the engine, the corpus, the ontologies and the docs."""
    from search.engines import capabilities_of, collection_names
    from search.services import Services

    services = Services.open(settings)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else shown}:{port}"
    try:
        st = services.engine().stats()
        corpus = (f"{st.papers:,} papers, {st.passages:,} passages" if st.papers else
                  "no corpus indexed yet: run `flysift demo` or `flysift index corpus`")
    except FlysiftError as exc:
        corpus = f"no corpus indexed yet ({exc.code}): run `flysift demo` or `flysift index corpus`"
    onts = ", ".join(services.terms.names()) or "none (`flysift index ontology`)"
    local = collection_names(settings) if capabilities_of(settings).local_builds else []   # a cluster is never outdated
    warnings = [f"  warning: {why}" for c in local if (why := services.engine(c).outdated())]
    return "\n".join([
        f"flysift serving on {url} (bound to {host}, {workers} worker{'s' * (workers > 1)})",
        f"  engine: {services.engine().name}, data dir {settings.data_dir}: {corpus}; ontologies: {onts}",
        f"  workbench: {url}/ (search, papers, terms, sessions{', runs' if settings.runs_dir else ''}); "
        f"docs: {url}/docs (ReDoc: /redoc, OpenAPI: /openapi.json), served offline by this service",
        f"  access log: {'on' if access_log else 'off (--access-log turns it on)'}; Ctrl-C stops",
        *warnings,
    ])


def default_workers() -> int:
    """One worker process per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


for _command in (search, passages, paper, similar, collections):
    main.add_command(_command)


@main.command()
@data_dir_option
@click.option("--collection", default=DEFAULT_COLLECTION, show_default=True)
def stats(data_dir: Path | None, collection: str) -> None:
    """Print index statistics as JSON."""
    from search.services import Services

    click.echo(json.dumps(Services.open(settings_for(data_dir)).engine(collection).stats().model_dump(), indent=2))


if __name__ == "__main__":  # pragma: no cover
    main()
