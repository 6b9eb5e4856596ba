"""``flysift upgrade``: rewrite the published builds of older on-disk layouts in the current one.

The embedded engine still reads builds of layouts 1-4 (CHANGELOG.md) and says so at start-up (one line naming this
command); their readers go after a deprecation. An upgrade is a rebuild through the build service, from the papers of
the published build itself (``Engine.scan_papers``), so no source file is needed: the new build is written, committed
every ``COMMIT_EVERY`` papers (an interrupted upgrade resumes), and published behind the usual guard, and the old one
serves until then. Papers are then scored as one field with the collection's field weights, as any new build is
(docs/search.md, "Scoring").
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from indexer.pipeline import COMMIT_EVERY
from search.builds.service import BuildWriter
from search.cli.options import data_dir_option, settings_for
from search.core.errors import FlysiftError
from search.core.progress import Progress
from search.core.stops import StopSignal
from search.engines import collection_names
from search.services import Services


def upgrade_collection(services: Services, collection: str, progress: Progress | None = None) -> dict[str, object]:
    """Rewrite ``collection``'s published build in the current layout if it is outdated; what was done."""
    engine = services.engine(collection)
    why = engine.outdated()
    if why is None:
        return {"collection": collection, "upgraded": False}
    old = engine.stats()
    writer = services.builds.open(collection, f"upgrade:{collection}:{old.build}", resume=True)
    done = skip = int(writer.state.get("consumed", 0))
    stop = StopSignal()   # Ctrl-C or SIGTERM: stop after the paper in hand, keep the build (a second one: at once)
    try:
        for paper in engine.scan_papers():   # one order per build: a resumed upgrade skips what it committed
            stop.check()
            if skip:
                skip -= 1
                continue
            writer.add(paper)
            done += 1
            if done % COMMIT_EVERY == 0:
                _checkpoint(writer, done)
            if progress:
                progress.update(done, old.papers)
        _checkpoint(writer, done)
        writer.publish()
    except (KeyboardInterrupt, SystemExit):
        writer.abort()   # resumable
        raise
    except BaseException:
        writer.abort(discard=True)
        raise
    finally:
        stop.restore()
    return {"collection": collection, "upgraded": True, "papers": done, "from_build": old.build,
            "build": writer.id}


def _checkpoint(writer: BuildWriter, done: int) -> None:
    refused = writer.refused()
    if refused:   # the papers came out of a build of this engine: a refusal is a bug, never a silent loss
        raise FlysiftError(f"the engine refused {len(refused)} papers of the old build (first: "
                           f"{refused[0].pmcid}: {refused[0].reason}); nothing was published", code="upgrade_failed")
    writer.commit({"consumed": done})


@click.command("upgrade")
@data_dir_option
@click.option("--collection", "names", multiple=True, help="Only this collection (repeatable) [default: all]")
@click.option("--check", is_flag=True, help="Only say which collections need an upgrade (exit status 1 if any)")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per collection on stdout")
def upgrade(data_dir: Path | None, names: tuple[str, ...], check: bool, as_json: bool) -> None:
    """Rewrite collections written in an older on-disk layout in the current one (from their own papers).

    The old build serves until the new one publishes; an interrupted upgrade resumes. Afterwards papers are scored
    as one field with the collection's field weights, like any new build."""
    services = Services.open(settings_for(data_dir))
    outdated = 0
    for name in names or collection_names(services.settings):
        why = services.engine(name).outdated()
        outdated += why is not None
        if check or why is None:
            done: dict[str, object] = {"collection": name, "outdated": why}
            click.echo(json.dumps(done) if as_json else f"{name}: {why or 'current'}", err=not as_json)
            continue
        with Progress("papers", json_lines=as_json) as progress:
            progress.stage(f"{name}: rewriting in the current layout", collection=name)
            done = upgrade_collection(services, name, progress)
        click.echo(json.dumps(done) if as_json else f"{name}: rewrote {done['papers']} papers from build "
                   f"{done['from_build']} into build {done['build']}", err=not as_json)
    if check and outdated:
        raise SystemExit(1)
