"""``flysift doctor`` (is this data dir whole, and what to run if not) and ``flysift backup
create|verify|restore|replaced``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from search.cli.options import data_dir_option, settings_for
from search.core.config import Settings
from search.core.errors import FlysiftError

COLOURS = {"ok": "green", "warn": "yellow", "fail": "red"}


@click.command()
@data_dir_option
@click.option("--quick", is_flag=True, help="Only what /v1/ready checks (skip the queries and integrity checks)")
@click.option("--json", "as_json", is_flag=True, help="The checks as one JSON document")
def doctor(data_dir: Path | None, quick: bool, as_json: bool) -> None:
    """Check a data dir: every collection's published build (its files open, a query runs, the paper counts agree),
    term indexes, ontologies, the session store (writable, SQLite's quick_check), the cursor secret and free space.
    Each problem names its file and what to run. Exit status 1 when a check fails."""
    from search.ops.readiness import data_dir_checks, summary

    settings = settings_for(data_dir)
    checks = data_dir_checks(settings, deep=not quick)
    if as_json:
        click.echo(json.dumps({"data_dir": str(settings.data_dir), **summary(checks)}, indent=2))
    else:
        click.echo(f"data dir {settings.data_dir} ({engine_name(settings)} engine)")
        for c in checks:
            click.secho(c.line(), fg=COLOURS[c.state])
        failed = sum(c.state == "fail" for c in checks)
        warned = sum(c.state == "warn" for c in checks)
        click.echo(f"{len(checks)} checks: {failed} failed, {warned} warnings")
    sys.exit(1 if any(c.state == "fail" for c in checks) else 0)


@click.group()
def backup() -> None:
    """Back up a data dir while the service runs, check a backup, restore one (docs/operations.md)."""


@backup.command("create")
@click.argument("dest", type=click.Path(path_type=Path))
@data_dir_option
@click.option("--copy", "copy_files", is_flag=True,
              help="Copy index files even where hard links would do (a backup on the same filesystem links them)")
def backup_create(dest: Path, data_dir: Path | None, copy_files: bool) -> None:
    """Back up the data dir into DEST (a new folder): the session store, every published build and term index, the
    ontologies, the cursor secret and the lexicon, consistent while the service runs. In cluster mode the indexes and
    the cluster session store go into a snapshot in the cluster's repository, named in DEST's manifest."""
    from search.ops import backup as ops_backup

    settings = settings_for(data_dir)
    manifest = ops_backup.create(settings, dest, link=not copy_files, say=lambda m: click.echo(f"  {m}", err=True))
    colls = ", ".join(f"{c} ({p['build']})" for c, p in manifest.get("indexes", {}).get("collections", {}).items())
    click.echo(f"backup of {settings.data_dir} in {dest}: {manifest['sessions'].get('sessions', 0)} sessions, "
               f"collections: {colls or 'none'}; {len(manifest['files'])} files, {manifest['bytes'] / 2**20:.1f} MiB, "
               f"{manifest['seconds']:.1f} s", err=True)
    if "snapshot" in manifest:
        snap = manifest["snapshot"]
        click.echo(f"  cluster snapshot {snap['snapshot']} in repository {snap['repository']}: "
                   f"{len(snap['indices'])} indexes, {snap['documents']} documents"
                   f"{' (the session store included)' if manifest['sessions'].get('in_snapshot') else ''}", err=True)
    for missing in manifest["not_included"]:
        click.secho(f"  not included: {missing}", fg="yellow", err=True)


@backup.command("verify")
@click.argument("src", type=click.Path(path_type=Path, exists=True, file_okay=False))
def backup_verify(src: Path) -> None:
    """Check every file of the backup in SRC against its manifest (size and SHA-256), and its cluster snapshot (if it
    has one) in the configured cluster: there, ended SUCCESS, holding every index."""
    from search.ops import backup as ops_backup

    manifest = ops_backup.verify(src, settings_for(None))
    click.echo(f"{src}: {len(manifest['files'])} files as listed, made {time_of(manifest['created'])} by flysift "
               f"{manifest['flysift']}", err=True)
    if "snapshot_checked" in manifest:
        snap = manifest["snapshot_checked"]
        click.echo(f"  cluster snapshot {snap['snapshot']}: SUCCESS, all {len(manifest['snapshot']['indices'])} "
                   "indexes present", err=True)


@backup.command("restore")
@click.argument("src", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--data-dir", type=click.Path(path_type=Path), required=True, help="Where to restore it")
@click.option("--force", is_flag=True, help="Replace a data dir that is there (it is kept beside, renamed) and, for "
              "a backup with a cluster snapshot, the deployment's live indexes in the cluster")
def backup_restore(src: Path, data_dir: Path, force: bool) -> None:
    """Restore the backup in SRC as DATA_DIR, after checking every file, and its cluster snapshot (if it has one) into
    the configured cluster. Stop the service that uses DATA_DIR first."""
    from search.ops import backup as ops_backup

    done = ops_backup.restore(src, data_dir, force=force, settings=settings_for(data_dir),
                              say=lambda m: click.echo(f"  {m}", err=True))
    click.echo(f"restored {src} (made {time_of(done['created'])}) into {data_dir}", err=True)
    if done.get("restored_snapshot"):
        snap = done["restored_snapshot"]
        click.echo(f"  cluster snapshot {snap['snapshot']}: {len(snap['indices'])} indexes, {snap['documents']} "
                   f"documents, serving now", err=True)
        for index, aliases in snap["replaced"].items():
            click.echo(f"  kept, closed: {index}" + (f" (served {', '.join(aliases)})" if aliases else ""), err=True)
        for index in snap.get("not_closed") or []:
            click.echo(f"  warning: {index} could not be closed (copies still recovering); it serves nothing: close "
                       "it later (POST /<index>/_close) so `flysift backup replaced` lists it", err=True)
        if snap["replaced"]:
            click.echo("  the way back: docs/operations.md; delete them: flysift backup replaced --drop", err=True)
    if done.get("replaced"):
        click.echo(f"  the data dir that was there is now {done['replaced']}", err=True)
    click.echo(f"  check it: flysift doctor --data-dir {data_dir}", err=True)


@backup.command("replaced")
@click.option("--drop", is_flag=True, help="Delete them (there is no way back after this)")
def backup_replaced(drop: bool) -> None:
    """List the cluster indexes that restores replaced and kept, closed, as the way back; --drop deletes them."""
    from search.ops import backup as ops_backup

    kept = ops_backup.replaced(settings_for(None), drop=drop)
    for k in kept:
        click.echo(f"{k['index']}\t{k['created'] or ''}")
    click.echo(f"{'deleted' if drop else 'kept, closed:'} {len(kept)} replaced indexes" +
               ("" if drop or not kept else " (delete them: flysift backup replaced --drop)"), err=True)


def engine_name(settings: Settings) -> str:
    """The name of the engine the settings choose (opening it reads no index and calls no cluster)."""
    from search.engines import open_engine

    try:
        return open_engine(settings).name
    except FlysiftError:
        return "unconfigured"


def time_of(t: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
