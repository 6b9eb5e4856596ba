"""Is the service ready, and what is wrong with a data dir: the checks behind ``/v1/ready``, ``flysift doctor`` and
the start-up check of ``flysift serve``.

Each part says what it needs (``search.core.checks.Check``): the engine (``Engine.readiness``: the embedded engine's
collections and term indexes, or the cluster), the session store (its ``readiness``: a write goes through), and the
files of the data dir that no engine owns (ontologies, the cursor secret, free space). A service is ready when no
check fails; a damaged file (not what flysift wrote) stops ``flysift serve`` with one line per file saying what to
run, instead of a traceback or a service that answers 500.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from search.core.checks import RESTORE, Check, fail, ok, warn
from search.core.config import Settings
from search.core.errors import FlysiftError
from search.engines import Engine, capabilities_of, open_engine
from search.sessions.store import store_kind

#: free space below either of these is a warning (a full disk refuses every session write: 507)
LOW_SPACE_BYTES = 1 << 30
LOW_SPACE_SHARE = 0.05
#: free space below this fails readiness: session writes (a trace record, a read's charge) are about to answer 507,
#: and the store's probe cannot show it (it rewrites one row in place, which a full disk may still take)
MIN_FREE_BYTES = 64 << 20
#: gzip's first two bytes: the ontology files are gzipped JSON
GZIP_MAGIC = b"\x1f\x8b"
ONTOLOGY_SUFFIX = ".ontology.json.gz"


def summary(checks: list[Check]) -> dict[str, Any]:
    """``{"status": ready|not_ready, "checks": [...]}`` (warnings do not make a service unready)."""
    failed = any(c.state == "fail" for c in checks)
    return {"status": "not_ready" if failed else "ready",
            "checks": [c.model_dump(exclude_none=True, exclude_defaults=False) for c in checks]}


def file_checks(data_dir: Path, deep: bool = False) -> list[Check]:
    """The data dir's own files: its ontologies (readable gzipped JSON; ``deep``: loaded), the cursor secret, and
    the free space of its disk."""
    out: list[Check] = []
    if not data_dir.exists():
        return [fail("data dir", "does not exist", file=".", fix="index a corpus into it (`flysift index corpus "
                     "…`, `flysift demo`) or restore a backup there")]
    onto = data_dir / "ontologies"
    for path in sorted(onto.glob("*" + ONTOLOGY_SUFFIX)) if onto.is_dir() else []:
        name = path.name[:-len(ONTOLOGY_SUFFIX)]
        check = f"ontology {name}"
        fix = f"{RESTORE}, or re-index it (`flysift index ontology FILE --name {name}`)"
        try:
            with open(path, "rb") as fh:
                head = fh.read(2)
            if head != GZIP_MAGIC:
                raise ValueError("not a gzipped file")
            if deep:
                from search.ontology.model import Ontology

                n = len(Ontology.read(path))
                out.append(ok(check, f"{n} terms"))
            else:
                out.append(ok(check, "present"))
        except (OSError, ValueError) as e:
            out.append(fail(check, f"cannot be read ({str(e).rsplit(': ', 1)[-1][:150]})",
                            file=f"ontologies/{path.name}", fix=fix, damaged=True))
    secret = data_dir / "cursor_secret"
    if secret.exists():
        try:
            usable = len(secret.read_text(encoding="ascii").strip()) >= 16
        except (OSError, UnicodeDecodeError):
            usable = False
        if not usable:
            out.append(fail("cursor secret", "holds no usable secret", file="cursor_secret", damaged=True,
                            fix="delete it to have a new one made (cursors issued before stop working), or restore "
                                "it from a backup"))
    try:
        usage = shutil.disk_usage(data_dir)
        free = usage.free / (1 << 30)
        if usage.free < MIN_FREE_BYTES:
            out.append(fail("disk", f"{usage.free / (1 << 20):.0f} MiB free: session writes answer 507 "
                            "storage_full", file=".", fix="free space on the data dir's disk (old rejects/, "
                            "dense-models/, backups) or move the data dir to a larger one"))
        elif usage.free < LOW_SPACE_BYTES or usage.free < LOW_SPACE_SHARE * usage.total:
            out.append(warn("disk", f"{free:.1f} GiB free ({usage.free / usage.total:.0%}): session writes answer "
                            "507 storage_full when it runs out", file=".", fix="free space or move the data dir"))
        else:
            out.append(ok("disk", f"{free:.1f} GiB free"))
    except OSError:
        pass
    return out


def store_checks(settings: Settings, store: Any | None = None, deep: bool = False) -> list[Check]:
    """The session store's own readiness; without a running ``store``, the SQLite file is opened only when it
    exists (a doctor never creates one)."""
    if store is None and store_kind(settings, shared=capabilities_of(settings).shared) == "sqlite":
        path = settings.session_db or Path(settings.data_dir) / "sessions.sqlite"
        if not Path(path).exists():
            return [ok("session store", "no sessions yet (sessions.sqlite is made on first use)")]
        from search.sessions.store import SqliteStore

        try:
            store = SqliteStore(path)
        except FlysiftError as e:
            return [fail("session store", e.message, file=Path(path).name, damaged=e.code == "store_corrupt",
                         fix=RESTORE if e.code == "store_corrupt" else None)]
        try:
            return store.readiness(deep)
        finally:
            store.close()
    check: Callable[[bool], list[Check]] | None = getattr(store, "readiness", None)
    if check is None:
        return [ok("session store", "no readiness check of its own (it shares the engine's cluster)")]
    return check(deep)


def data_dir_checks(settings: Settings, deep: bool = False) -> list[Check]:
    """Everything, for a data dir no service holds open (``flysift doctor``, ``flysift serve`` before it starts)."""
    out = file_checks(Path(settings.data_dir), deep)
    if out and out[0].name == "data dir" and out[0].state == "fail":
        return out
    try:
        engine: Engine = open_engine(settings)
        out[:0] = engine.readiness(deep)
    except FlysiftError as e:
        out.insert(0, fail("engine", e.message))
    out.extend(store_checks(settings, None, deep))
    return out


class Readiness:
    """``/v1/ready`` of a running service: its engine's and store's checks and the data dir's files, cached for
    ``ttl_s`` so that a busy prober (or a hostile caller: the route is public) costs one check a second."""

    def __init__(self, settings: Settings, engine: Callable[[], Engine], store: Any, ttl_s: float = 1.0):
        self.settings, self.engine, self.store, self.ttl_s = settings, engine, store, ttl_s
        self._last: tuple[float, list[Check]] | None = None

    def checks(self) -> list[Check]:
        now = time.monotonic()
        if self._last is not None and now - self._last[0] < self.ttl_s:
            return self._last[1]
        out: list[Check] = []
        try:
            out.extend(self.engine().readiness(False))
        except FlysiftError as e:
            out.append(fail("engine", e.message))
        out.extend(store_checks(self.settings, self.store(), False))
        if capabilities_of(self.settings).local_builds:   # the data dir's own files matter
            out.extend(file_checks(Path(self.settings.data_dir)))
        self._last = (now, out)
        return out
