"""The embedded engine's part of a backup: every collection's published build and every ontology's live term index,
copied into a backup folder in the data dir's own layout, while the service runs.

A published build is never written again (tantivy segments are immutable, its ``meta.json`` and ``papers.db`` are
final once ``CURRENT`` names it: the next build is a new folder), and a live term index is a version folder that is
replaced, never changed. So a copy of those folders is consistent without stopping anything, and on the same
filesystem it is made of hard links (instant, no space) instead of copies. A publish removes a build only two
publishes later, and a re-indexed ontology removes its old version only after its link moved: a copy taken while
``CURRENT`` (or the link) named the same build (version) from before it started to after it ended is whole; else it
starts again from what they name now.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from search.core.errors import FlysiftError
from search.core.names import is_valid
from search.engines.embedded.health import build_name_ok

ATTEMPTS = 3
#: what a build folder may hold that a backup leaves out: an interrupted dense run's embeddings
SKIP = frozenset({"dense.partial"})


def copy_tree(src: Path, dst: Path, link: bool) -> int:
    """Copy ``src`` into ``dst`` (hard links when ``link`` and the filesystem allows); returns the files copied.
    ``FileNotFoundError`` when a file disappears meanwhile (the caller starts again)."""
    n = 0
    if not src.is_dir():
        raise FileNotFoundError(src)
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d not in SKIP]
        rel = Path(root).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            s, d = Path(root) / name, dst / rel / name
            if link:
                try:
                    os.link(s, d)
                    n += 1
                    continue
                except FileNotFoundError:
                    raise
                except OSError:   # another filesystem, or links not allowed: copy
                    pass
            shutil.copy2(s, d)
            n += 1
    return n


def _pointer(path: Path) -> str | None:
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    build = value.get("build") if isinstance(value, dict) else None
    return build if build_name_ok(build) else None


def _collection(coll_dir: Path, dest: Path, link: bool) -> dict[str, Any] | None:
    for _ in range(ATTEMPTS):
        build = _pointer(coll_dir / "CURRENT")
        if build is None:
            return None   # nothing published (or a damaged pointer: `flysift doctor` says so)
        target = dest / "collections" / coll_dir.name / "builds" / build
        try:
            files = copy_tree(coll_dir / "builds" / build, target, link)
            meta = json.loads((target / "build.json").read_bytes())
            if _pointer(coll_dir / "CURRENT") != build:
                raise FileNotFoundError(target)
        except FileNotFoundError:   # published meanwhile: back up what CURRENT names now
            shutil.rmtree(target, ignore_errors=True)
            continue
        except ValueError as e:
            raise FlysiftError(f"collection {coll_dir.name}: build {build}'s build.json is damaged ({e}); run "
                               "`flysift doctor`", code="backup_failed", status=500) from None
        (target.parent.parent / "CURRENT").write_text(json.dumps({"build": build}))
        return {"build": build, "files": files, "published": meta.get("published")}
    raise FlysiftError(f"collection {coll_dir.name} was published {ATTEMPTS} times while it was being copied; run "
                       "the backup again", code="backup_failed", status=409)


def _term_index(link_path: Path, dest: Path, link: bool) -> dict[str, Any]:
    root = link_path.parent
    for _ in range(ATTEMPTS):
        try:
            version = os.readlink(link_path)
        except OSError:
            return {}
        target = dest / "terms" / version
        try:
            files = copy_tree(root / version, target, link)
            if os.readlink(link_path) != version:
                raise FileNotFoundError(target)
        except FileNotFoundError:   # re-indexed meanwhile: copy the new version
            shutil.rmtree(target, ignore_errors=True)
            continue
        (dest / "terms" / link_path.name).symlink_to(version)
        return {"version": Path(version).name, "files": files}
    raise FlysiftError(f"term index {link_path.name} was re-indexed {ATTEMPTS} times while it was being copied; run "
                       "the backup again", code="backup_failed", status=409)


def backup(data_dir: Path, dest: Path, link: bool = True) -> dict[str, Any]:
    """Copy every published build and live term index of ``data_dir`` into ``dest`` (see the module docstring)."""
    out: dict[str, Any] = {"collections": {}, "term_indexes": {}}
    collections = data_dir / "collections"
    for coll_dir in sorted(collections.iterdir()) if collections.is_dir() else []:
        if coll_dir.is_dir() and is_valid("collection", coll_dir.name):
            part = _collection(coll_dir, dest, link)
            if part is not None:
                out["collections"][coll_dir.name] = part
    terms = data_dir / "terms"
    for link_path in sorted(terms.iterdir()) if terms.is_dir() else []:
        if link_path.is_symlink() and is_valid("ontology", link_path.name):
            part = _term_index(link_path, dest, link)
            if part:
                out["term_indexes"][link_path.name] = part
    return out
