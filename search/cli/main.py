"""The ``flysift`` command line.

The root group holds the read-side commands (``serve``, ``search``, ``passages``, ``stats``). Commands of the other
packages (``index`` and ``demo`` from the indexer, ``eval``…) register through the ``flysift.commands`` entry points
declared in pyproject.toml, so ``search`` never imports them.
"""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import click

from search.cli.options import data_dir_option, echo_json, print_table, settings_for
from search.core.errors import FlysiftError


class _Group(click.Group):
    """Loads the entry-point commands lazily and prints FlysiftErrors as one readable line."""

    def _plugins(self) -> dict[str, EntryPoint]:
        if not hasattr(self, "_plugin_cache"):
            self._plugin_cache = {ep.name: ep for ep in entry_points(group="flysift.commands")}
        return self._plugin_cache

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self._plugins()))

    def get_command(self, ctx, name):
        cmd = super().get_command(ctx, name)
        if cmd is None and name in self._plugins():
            cmd = self._plugins()[name].load()
        return cmd

    def invoke(self, ctx):
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
            sys.exit(2)


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


def serve_banner(settings, host: str, port: int, workers: int, access_log: bool) -> str:
    """What ``serve`` prints before it starts: the URL, the engine, the corpus, the ontologies and the docs."""
    from search.ontology.service import TermService
    from search.retrieval.service import SearchService

    shown = f"[{host}]" if ":" in host else host
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else shown}:{port}"
    try:
        st = SearchService(settings).engine().stats()
        corpus = (f"{st.papers:,} papers, {st.passages:,} passages" if st.papers else
                  "no corpus indexed yet: run `flysift demo` or `flysift index corpus`")
    except FlysiftError as exc:
        corpus = f"no corpus indexed yet ({exc.code}): run `flysift demo` or `flysift index corpus`"
    onts = ", ".join(TermService(settings.data_dir).names()) or "none (`flysift index ontology`)"
    return "\n".join([
        f"flysift serving on {url} (bound to {host}, {workers} worker{'s' * (workers > 1)})",
        f"  engine: {settings.engine_kind}, data dir {settings.data_dir}: {corpus}; ontologies: {onts}",
        f"  docs: {url}/docs (ReDoc: /redoc, OpenAPI: /openapi.json), served offline by this service",
        f"  access log: {'on' if access_log else 'off (--access-log turns it on)'}; Ctrl-C stops",
    ])


def default_workers() -> int:
    """One worker process per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


@main.command()
@click.argument("query")
@data_dir_option
@click.option("--limit", "-n", type=int, default=10, show_default=True)
@click.option("--offset", type=int, default=0)
@click.option("--collection", default="default", show_default=True)
@click.option("--year-from", type=int)
@click.option("--year-to", type=int)
@click.option("--section", "sections", multiple=True, help="Only papers with this section type (repeatable)")
@click.option("--source", type=click.Choice(["paper", "supplement"]),
              help="Match the articles' text only, or their supplementary files only [default: both]")
@click.option("--json", "as_json", is_flag=True,
              help="Print the REST response body (POST /v1/papers/search with snippets)")
def search(query: str, data_dir: Path | None, limit: int, offset: int, collection: str, year_from: int | None,
           year_to: int | None, sections: tuple[str, ...], source: str | None, as_json: bool) -> None:
    """Search papers (BM25; gene symbols are case-sensitive: Dl ≠ dl); a match in a supplementary file says where
    (file, sheet, rows)."""
    from search.cli.supplements import where
    from search.core.query import Filters
    from search.retrieval.service import SearchService

    svc = SearchService(settings_for(data_dir))
    filters = Filters(year_from=year_from, year_to=year_to, section_types=list(sections) or None,
                      source=source)  # type: ignore[arg-type]
    res = svc.search_papers(query, limit=limit, offset=offset, filters=filters, snippets=True, collection=collection)
    if as_json:
        echo_json(res)
        return
    click.echo(f"{res.total} papers match; showing {len(res.hits)} ({res.took_ms:.1f} ms)")
    rows = [{"rank": offset + i + 1, "pmcid": h.pmcid, "score": f"{h.score:.2f}", "year": h.year or "",
             "title": h.title, "snippet": h.snippets[-1].text if h.snippets else h.abstract[:120],
             "where": where(h.supplement)} for i, h in enumerate(res.hits)]
    cols = [("#", "rank", 4), ("pmcid", "pmcid", 12), ("score", "score", 7), ("year", "year", 5),
            ("title", "title", 50), ("best snippet", "snippet", 70), ("in supplement", "where", 40)]
    print_table(rows, [c for c in cols if c[1] != "where" or any(r["where"] for r in rows)])


@main.command()
@click.argument("query")
@data_dir_option
@click.option("--limit", "-n", type=int, default=10, show_default=True)
@click.option("--collection", default="default", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the REST response body (POST /v1/passages/search)")
def passages(query: str, data_dir: Path | None, limit: int, collection: str, as_json: bool) -> None:
    """Search evidence passages (paragraphs with stable ids and offsets)."""
    from search.retrieval.service import SearchService

    res = SearchService(settings_for(data_dir)).search_passages(query, limit=limit, collection=collection)
    if as_json:
        echo_json(res)
        return
    rows = [{"id": h.passage_id, "section": h.section_type, "score": f"{h.score:.2f}",
             "text": h.snippet.text if h.snippet else h.text[:200]} for h in res.hits]
    print_table(rows, [("passage", "id", 22), ("section", "section", 9), ("score", "score", 7), ("text", "text", 100)])


@main.command()
@data_dir_option
@click.option("--collection", default="default", show_default=True)
def stats(data_dir: Path | None, collection: str) -> None:
    """Print index statistics as JSON."""
    from search.retrieval.service import SearchService

    click.echo(json.dumps(SearchService(settings_for(data_dir)).engine(collection).stats().model_dump(), indent=2))


if __name__ == "__main__":  # pragma: no cover
    main()
