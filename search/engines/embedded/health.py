"""What "ready" means for the embedded engine, and which file is damaged when a build does not open.

``readiness`` checks every collection folder of a data dir and every ontology's term index, from the files
``engine.py`` and ``terms.py`` write (see their layouts): ``CURRENT`` names a build, the build's ``build.json`` says
it was published, both tantivy indexes have their ``meta.json`` and open, and its paper store is a SQLite database
with the paper tables. ``deep`` (``flysift doctor``) also runs a query, compares the paper counts of the index and the
store, and runs SQLite's ``quick_check``. Collections that never published, unfinished builds and folders that are
not collections are warnings. Files are named relative to the data dir; each finding says what to run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import tantivy

from search.core.checks import RESTORE, Check, fail, ok, warn
from search.core.names import is_valid

#: the tables a paper store has (layout 3+: paper_docs and blocks; before it: papers)
PAPER_TABLES = ({"paper_docs", "blocks"}, {"papers"})
REBUILD = "rebuild it (`flysift index corpus …`)"


#: what a build folder's name may be (the engine makes ``20250101T120000-1a2b3c``; older ones other plain names)
_BUILD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def build_name_ok(name: object) -> bool:
    """Whether ``CURRENT``'s value can name a build folder: a plain name, never a path."""
    return isinstance(name, str) and _BUILD_NAME.fullmatch(name) is not None and ".." not in name


def _rel(path: Path, data_dir: Path) -> str:
    try:
        return str(path.relative_to(data_dir))
    except ValueError:
        return path.name


def _json(path: Path) -> tuple[Any, str | None]:
    """A JSON file's value, or why it cannot be read."""
    try:
        return json.loads(path.read_bytes()), None
    except FileNotFoundError:
        return None, "missing"
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"
    except (ValueError, RecursionError):
        return None, "not valid JSON (not what flysift wrote)"


def build_problem(build_dir: Path, data_dir: Path, deep: bool = False, facts: dict[str, Any] | None = None
                  ) -> Check | None:
    """The first thing wrong with a published build's files (None when they open), as a failed check naming the
    file. ``deep`` also compares its paper counts. ``facts`` gets the build's paper and passage counts."""
    name = f"collection {build_dir.parent.parent.name}"
    if not build_dir.is_dir():
        return fail(name, f"the published build {build_dir.name} is missing", file=_rel(build_dir, data_dir),
                    fix=f"{RESTORE}, or {REBUILD}", damaged=True)
    meta_file = build_dir / "build.json"
    meta, why = _json(meta_file)
    if why is None and not (isinstance(meta, dict) and meta.get("status") == "published"
                            and isinstance(meta.get("layout", 1), int)):
        why = "not a published build's description (status, layout)"
    if why:
        return fail(name, f"build.json {why}", file=_rel(meta_file, data_dir), fix=f"{RESTORE}, or {REBUILD}",
                    damaged=True)
    searchers = []
    for kind in ("papers", "passages"):
        folder = build_dir / kind
        if not (folder / "meta.json").is_file():
            return fail(name, f"the {kind} index has no meta.json", file=_rel(folder / "meta.json", data_dir),
                        fix=f"{RESTORE}, or {REBUILD}", damaged=True)
        try:
            searchers.append(tantivy.Index.open(str(folder)).searcher())
        except (ValueError, OSError) as e:
            return fail(name, f"the {kind} index does not open ({str(e)[:150]})", file=_rel(folder, data_dir),
                        fix=f"{RESTORE}, or {REBUILD}", damaged=True)
    if facts is not None:
        facts.update(papers=searchers[0].num_docs, passages=searchers[1].num_docs)
    db_file = build_dir / "papers.db"
    try:
        db = sqlite3.connect(f"file:{db_file}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not any(t <= tables for t in PAPER_TABLES):
                raise sqlite3.DatabaseError("it has no paper tables")
            if deep:
                table = "paper_docs" if "paper_docs" in tables else "papers"
                stored = db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]   # noqa: S608 (a fixed name)
                check = db.execute("PRAGMA quick_check").fetchone()[0]
                if check != "ok":
                    raise sqlite3.DatabaseError(f"quick_check: {str(check)[:150]}")
                if stored != searchers[0].num_docs:
                    return fail(name, f"the paper store holds {stored} papers, the paper index "
                                f"{searchers[0].num_docs}", file=_rel(db_file, data_dir),
                                fix=f"{RESTORE}, or {REBUILD}", damaged=True)
        finally:
            db.close()
    except sqlite3.Error as e:
        return fail(name, f"papers.db is not a paper store ({str(e)[:150]})", file=_rel(db_file, data_dir),
                    fix=f"{RESTORE}, or {REBUILD}", damaged=True)
    return None


def _builds(collection_dir: Path) -> list[tuple[str, dict[str, Any] | None]]:
    try:
        folders = sorted(p for p in (collection_dir / "builds").iterdir() if p.is_dir())
    except OSError:
        return []
    out = []
    for folder in folders:
        meta, _ = _json(folder / "build.json")
        out.append((folder.name, meta if isinstance(meta, dict) else None))
    return out


def collection_checks(collection_dir: Path, data_dir: Path, deep: bool = False) -> list[Check]:
    """The collection's published build, and warnings for what it should not hold for long."""
    coll = collection_dir.name
    name = f"collection {coll}"
    builds = _builds(collection_dir)
    unfinished = [b for b, meta in builds if not meta or meta.get("status") != "published"]
    out: list[Check] = []
    current = collection_dir / "CURRENT"
    value, why = _json(current)
    if why == "missing":
        if unfinished:
            out.append(warn(name, f"no published build; {len(unfinished)} unfinished build(s) (one being written, or "
                            "a killed indexing run: the next run of the same input resumes it, any other removes it)",
                            file=_rel(collection_dir, data_dir), fix=f"finish it: {REBUILD}",
                            data={"collection": coll, "building": len(unfinished),
                                  "records": _consumed(collection_dir, unfinished)}))
        elif coll != "default":
            out.append(warn(name, "a folder with no build (left by a build that never published)",
                            file=_rel(collection_dir, data_dir), fix="remove the folder"))
        return out
    if why is None and not (isinstance(value, dict) and build_name_ok(value.get("build"))):
        why = "not a build pointer ({\"build\": \"<id>\"})"
    if why:
        kept = [b for b, meta in builds if meta and meta.get("status") == "published"]
        hint = f" (published builds still on disk: {', '.join(kept)})" if kept else ""
        return [fail(name, f"CURRENT {why}{hint}", file=_rel(current, data_dir), fix=f"{RESTORE}, or {REBUILD}",
                     damaged=True)]
    build = value["build"]
    facts: dict[str, Any] = {"collection": coll, "build": build}
    problem = build_problem(collection_dir / "builds" / build, data_dir, deep, facts)
    if problem:
        return [problem]
    meta, _ = _json(collection_dir / "builds" / build / "build.json")
    when = meta.get("published") if isinstance(meta, dict) else None
    stamp = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(when)) if isinstance(when, int | float) else "?"
    facts["published"] = when if isinstance(when, int | float) else None
    out.append(ok(name, f"build {build}: {facts['papers']} papers, published {stamp}", data=facts))
    stale = [b for b in unfinished if b != build]
    if stale:
        out.append(warn(name, f"{len(stale)} unfinished build(s) beside the published one (a killed indexing run, or "
                        "one being written now)", file=_rel(collection_dir / "builds", data_dir),
                        fix="the next `flysift index corpus` resumes or removes them",
                        data={"collection": coll, "building": len(stale), "records": _consumed(collection_dir, stale)}))
    return out


def _consumed(collection_dir: Path, builds: list[str]) -> int:
    """Input records the unfinished builds have committed (an indexing run's progress, from its resume state)."""
    total = 0
    for b in builds:
        meta, _ = _json(collection_dir / "builds" / b / "build.json")
        state = meta.get("state") if isinstance(meta, dict) else None
        n = state.get("consumed") if isinstance(state, dict) else None
        total += n if isinstance(n, int) else 0
    return total


def term_checks(data_dir: Path, deep: bool = False) -> list[Check]:
    """Each ontology's live term index: ``terms/<name>`` links to a version with a tantivy ``meta.json``."""
    root = data_dir / "terms"
    out: list[Check] = []
    try:
        links = sorted(p for p in root.iterdir() if p.is_symlink() and is_valid("ontology", p.name))
    except OSError:
        return out
    for link in links:
        name = f"term index {link.name}"
        target = root / os.readlink(link)
        fix = f"{RESTORE}, or re-index it (`flysift index ontology FILE --name {link.name}`)"
        if not (target / "meta.json").is_file():
            out.append(fail(name, "the index its link names is missing or incomplete", file=_rel(link, data_dir),
                            fix=fix, damaged=True))
            continue
        if deep:
            try:
                n = tantivy.Index.open(str(target)).searcher().num_docs
            except (ValueError, OSError) as e:
                out.append(fail(name, f"does not open ({str(e)[:150]})", file=_rel(target, data_dir), fix=fix,
                                damaged=True))
                continue
            out.append(ok(name, f"{n} terms"))
        else:
            out.append(ok(name, "present"))
    return out


def readiness(data_dir: Path, deep: bool = False) -> list[Check]:
    """Every collection and term index of ``data_dir`` (see the module docstring)."""
    data_dir = Path(data_dir)
    out: list[Check] = []
    collections = data_dir / "collections"
    folders: list[Path] = []
    with contextlib.suppress(OSError):
        folders = sorted(p for p in collections.iterdir() if p.is_dir())
    for folder in folders:
        if not is_valid("collection", folder.name):
            out.append(warn(f"folder {folder.name[:60]}", "not a collection (its name is not one)",
                            file=_rel(folder, data_dir), fix="move it out of the data dir"))
            continue
        out.extend(collection_checks(folder, data_dir, deep))
    if not (collections / "default" / "CURRENT").exists() and not any(
            c.name == "collection default" and c.state == "fail" for c in out):
        out.append(fail("collection default", "no published build: searches answer 503 index_missing",
                        file=_rel(collections / "default", data_dir),
                        fix="index a corpus (`flysift index corpus …` or `flysift demo`), or restore a backup"))
    out.extend(term_checks(data_dir, deep))
    return out
