"""``flysift backup create DIR`` and ``flysift backup restore DIR --data-dir D``: a consistent copy of a data dir,
taken while the service runs, and the way back.

A backup holds, in the data dir's own layout: the session store (SQLite's online backup API: sessions, budgets,
traces, names, submissions, teams and keys as of one instant), every collection's published build and every live
term index (the engine's part: ``Engine`` with the ``Backupable`` capability; hard links on the same filesystem),
the ontology files (each replaced atomically by the indexer, so each is whole), the cursor secret (so cursors handed
out before stay valid) and the lexicon. ``flysift-backup.json`` lists every file with its size and SHA-256 and is
written last: a folder without it is not a backup. An engine that keeps its indexes in a cluster (``Snapshotting``)
is asked for a snapshot of them, the cluster session store's included, into the cluster's snapshot repository
(``FLYSIFT_CLUSTER_SNAPSHOT_LOCATION``); the manifest records the snapshot's name and indices (``snapshot``), and
``verify`` asks the cluster whether that snapshot exists, ended SUCCESS and holds every one of them. What a backup
cannot hold is named in ``not_included``.

Restore checks every file against the manifest (and the snapshot in the cluster), copies (never links) into a new
folder beside the target and moves it into place; it refuses a target that holds a data dir unless ``force``, and
then keeps the old one beside it. A backup with a snapshot restores it too, first (a failure leaves both the data dir
and the live indexes as they were); it refuses a cluster that holds live indexes of the deployment unless ``force``,
and then the restored copy replaces them once it is proven: a service left running answers from the live indexes
until that switch and from the restored ones right after it. The replaced indexes are kept in the cluster, closed,
as the way back, until ``drop_replaced`` (``flysift backup replaced --drop``) deletes them.
Stop the service first when it has a data dir of its own (or point it at the restored dir): a running service keeps
its open files.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from search import __version__
from search.core.config import Settings
from search.core.errors import FlysiftError
from search.engines import Backupable, Engine, Snapshotting, capabilities_of, open_engine
from search.sessions.store import store_kind

MANIFEST = "flysift-backup.json"
FORMAT = 1
#: files of the data dir itself a backup keeps (the ontologies folder is copied whole)
DATA_FILES = ("cursor_secret", "lexicon.tsv", "lexicon.tsv.gz")
#: what a data dir holds that marks it as one (restore refuses to overwrite it without force)
LIVE_MARKS = ("sessions.sqlite", "collections", "terms", "ontologies")


class BackupError(FlysiftError):
    status = 409
    code = "backup_failed"


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _files(root: Path) -> dict[str, dict[str, Any]]:
    """Every regular file under ``root`` (links to folders are recorded by ``_links``), with size and digest."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name != MANIFEST:
            out[str(path.relative_to(root))] = {"bytes": path.stat().st_size, "sha256": _sha256(path)}
    return out


def _links(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): os.readlink(p) for p in sorted(root.rglob("*")) if p.is_symlink()}


def _empty_or_missing(path: Path) -> bool:
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


@contextmanager
def _staged(target: Path, stage: str) -> Iterator[Path]:
    """A new hidden folder beside ``target`` (``.<name>.<stage>-<random>``) to fill and then move into place: a
    half-written backup or restore is never seen under ``target``'s name, and is removed when the block fails."""
    target.parent.mkdir(parents=True, exist_ok=True)
    work = target.parent / f".{target.name}.{stage}-{secrets.token_hex(4)}"
    work.mkdir()
    try:
        yield work
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def create(settings: Settings, dest: Path, *, link: bool = True,
           say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Back up the data dir of ``settings`` into ``dest`` (a new or empty folder); returns the manifest."""
    data_dir, dest = Path(settings.data_dir), Path(dest)
    if not data_dir.is_dir():
        raise BackupError(f"No data dir at {data_dir}: nothing to back up.", details={"data_dir": str(data_dir)})
    if not _empty_or_missing(dest):
        raise BackupError(f"{dest} is not empty: back up into a new folder (a backup is never merged into another).",
                          details={"dest": str(dest)})
    engine = open_engine(settings)   # (a configuration error before any folder is made)
    with closing(engine), _staged(dest, "partial") as work:
        t0 = time.time()
        manifest: dict[str, Any] = {"format": FORMAT, "flysift": __version__, "created": t0, "not_included": []}
        manifest["engine"] = engine.name
        manifest["sessions"] = _store(settings, engine, work, say, manifest["not_included"])
        if isinstance(engine, Backupable):
            say("indexes: published builds and term indexes" + (" (hard links where possible)" if link else ""))
            manifest["indexes"] = engine.backup(work, link)
        elif isinstance(engine, Snapshotting):
            say(f"indexes{' and session store' if manifest['sessions'].get('in_snapshot') else ''}: "
                "a cluster snapshot")
            snap = engine.create_snapshot()
            manifest["snapshot"] = {k: snap[k] for k in ("snapshot", "repository", "indices", "documents")}
        else:
            manifest["not_included"].append(f"the {engine.name} engine's indexes: back them up with the cluster's "
                                            "snapshot API (docs/operations.md)")
        onto = data_dir / "ontologies"
        if onto.is_dir():
            say("ontologies")
            (work / "ontologies").mkdir()
            for f in sorted(onto.iterdir()):
                if f.is_file() and not f.name.endswith(".tmp") and ".tmp" not in f.suffixes:
                    shutil.copy2(f, work / "ontologies" / f.name)
        for name in DATA_FILES:
            if (data_dir / name).is_file():
                shutil.copy2(data_dir / name, work / name)
        say("checksums")
        manifest["files"] = _files(work)
        manifest["links"] = _links(work)
        manifest["seconds"] = round(time.time() - t0, 3)
        manifest["bytes"] = sum(f["bytes"] for f in manifest["files"].values())
        (work / MANIFEST).write_text(json.dumps(manifest, indent=1))
        if dest.exists():
            dest.rmdir()
        os.replace(work, dest)
    return manifest


def _store(settings: Settings, engine: Engine, work: Path, say: Callable[[str], None],
           not_included: list[str]) -> dict[str, Any]:
    if store_kind(settings, shared=capabilities_of(settings).shared) != "sqlite":
        if isinstance(engine, Snapshotting):   # the cluster store's indexes live beside the engine's
            return {"store": "cluster", "in_snapshot": True}
        not_included.append("the cluster session store: back it up with the cluster's snapshot API")
        return {}
    path = settings.session_db or Path(settings.data_dir) / "sessions.sqlite"
    if not Path(path).exists():
        return {"sessions": 0}
    from search.sessions.store import SqliteStore

    say("session store (SQLite online backup)")
    store = SqliteStore(path)
    try:
        store.backup_to(work / "sessions.sqlite")
    finally:
        store.close()
    copy = SqliteStore(work / "sessions.sqlite")
    try:
        n = copy._conn().execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        copy._conn().execute("PRAGMA journal_mode=DELETE")   # one file, no -wal beside it
    finally:
        copy.close()
    return {"sessions": n}


def verify(src: Path, settings: Settings | None = None) -> dict[str, Any]:
    """The manifest of the backup in ``src`` after checking every file it lists (size and SHA-256) and that no file
    is missing; ``BackupError`` naming the first file that differs. A backup with a cluster snapshot is checked in the
    cluster of ``settings`` too (required then)."""
    src = Path(src)
    try:
        manifest = json.loads((src / MANIFEST).read_text())
    except FileNotFoundError:
        raise BackupError(f"{src} is not a flysift backup (no {MANIFEST}: an unfinished or foreign folder).",
                          details={"backup": str(src)}) from None
    except (OSError, ValueError) as e:
        raise BackupError(f"{src / MANIFEST} cannot be read ({e}).", details={"backup": str(src)}) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(manifest.get("files"),
                                                                                             dict):
        raise BackupError(f"{src / MANIFEST} is not a backup manifest of format {FORMAT}.")
    for rel, meta in manifest["files"].items():
        path = src / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts or not path.is_file():
            raise BackupError(f"backup file {rel} is missing", details={"file": rel})
        if path.stat().st_size != meta.get("bytes") or _sha256(path) != meta.get("sha256"):
            raise BackupError(f"backup file {rel} differs from the manifest (damaged or changed)",
                              details={"file": rel})
    snap = manifest.get("snapshot")
    if snap is not None:
        if not isinstance(snap, dict) or not isinstance(snap.get("snapshot"), str) or not isinstance(
                snap.get("indices"), list):
            raise BackupError(f"{src / MANIFEST}: its snapshot entry is not what flysift writes.")
        if settings is None:
            raise BackupError(f"{src} holds cluster snapshot {snap['snapshot'][:100]}: settings for its cluster are "
                              "needed to check it.")
        engine = open_engine(settings)
        try:
            if not isinstance(engine, Snapshotting):
                raise BackupError(f"{src} holds cluster snapshot {snap['snapshot'][:100]}, but the {engine.name} "
                                  "engine is configured: set FLYSIFT_CLUSTER_URL (and the backup's index prefix).")
            manifest["snapshot_checked"] = engine.check_snapshot(snap["snapshot"], [str(i) for i in snap["indices"]])
        finally:
            engine.close()
    return manifest


def restore(src: Path, data_dir: Path, *, force: bool = False, settings: Settings | None = None,
            say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Restore the backup in ``src`` as ``data_dir`` (and its cluster snapshot into the cluster of ``settings``);
    returns the manifest, with ``force`` where the data dir that was there went (``replaced``), and what the
    snapshot's restore did (``restored_snapshot``)."""
    src, data_dir = Path(src), Path(data_dir)
    say("checking the backup")
    manifest = verify(src, settings)
    live = [m for m in LIVE_MARKS if (data_dir / m).exists()]
    if live and not force:
        raise BackupError(f"{data_dir} holds a data dir ({', '.join(live)}): restore into a new folder, or pass "
                          "--force to replace it (the old one is kept beside it). Stop the service using it first.",
                          details={"data_dir": str(data_dir), "found": live})
    engine = open_engine(settings) if settings is not None and "snapshot" in manifest else None
    try:
        if isinstance(engine, Snapshotting):
            indexes = engine.live_indexes()
            if indexes and not force:
                raise BackupError(f"The cluster holds {len(indexes)} live indexes of this deployment (e.g. "
                                  f"{indexes[0]}): pass --force to replace them by the snapshot's (they serve until "
                                  "the restored copy is proven, then are kept closed until `flysift backup replaced "
                                  "--drop`).", details={"found": indexes[:20]})
        return _restore_files(src, data_dir, manifest, engine, say)
    finally:
        if engine is not None:
            engine.close()


def _restore_files(src: Path, data_dir: Path, manifest: dict[str, Any], engine: Engine | None,
                   say: Callable[[str], None]) -> dict[str, Any]:
    """Copy the files into a new folder, restore the snapshot (``engine``: one that is ``Snapshotting``), then move
    the folder into place: a failing snapshot restore leaves the data dir as it was."""
    say(f"copying {len(manifest['files'])} files")
    with _staged(data_dir, "restoring") as work:
        for rel in manifest["files"]:
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, work / rel)
        for rel, target in manifest.get("links", {}).items():
            if Path(target).is_absolute() or ".." in Path(target).parts or ".." in Path(rel).parts:
                raise BackupError(f"backup link {rel} points outside the backup", details={"file": rel})
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).symlink_to(target)
        secret = work / "cursor_secret"
        if secret.exists():
            secret.chmod(0o600)
        restored = None
        if isinstance(engine, Snapshotting):
            say(f"restoring cluster snapshot {manifest['snapshot']['snapshot']}")
            restored = engine.restore_snapshot(manifest["snapshot"]["snapshot"])
        replaced = None
        if data_dir.exists() and any(data_dir.iterdir()):
            replaced = data_dir.with_name(f"{data_dir.name}.replaced-{time.strftime('%Y%m%dT%H%M%S')}")
            os.replace(data_dir, replaced)
        elif data_dir.exists():
            data_dir.rmdir()
        os.replace(work, data_dir)
    return {**manifest, "replaced": str(replaced) if replaced else None, "restored_snapshot": restored}


def replaced(settings: Settings, *, drop: bool = False) -> list[dict[str, Any]]:
    """The indexes earlier restores replaced and kept in the cluster of ``settings`` (``index``, ``created``); with
    ``drop``, deleted first (then the list is what was deleted)."""
    engine = open_engine(settings)
    try:
        if not isinstance(engine, Snapshotting):
            raise BackupError(f"The {engine.name} engine keeps no replaced indexes: restores of a data dir keep the "
                              "old one beside it (DATA_DIR.replaced-<time>); set FLYSIFT_CLUSTER_URL for a cluster.")
        kept = engine.replaced_indexes()
        if drop:
            gone = set(engine.drop_replaced())
            kept = [k for k in kept if k["index"] in gone]
        return kept
    finally:
        engine.close()
