"""The embedded engine's concept index: which ontology terms each passage of a published build mentions (what
``flysift index concepts`` found with the term recogniser), and every ancestor of each, for ``term:`` queries.

It is a SQLite file beside the build's indices, ``builds/<id>/concepts.db``, written as ``concepts.db.building``
(resumable: the papers already done are recorded with their mentions in one transaction) and renamed into place when
complete, so a search sees the whole concept index or none. It belongs to its build: a new ``flysift index corpus``
publishes a build without one until ``flysift index concepts`` runs again. Tables::

    mention(id, pmcid, passage, term, start, end, text, via)   one row per mention found
    term(id, name)                                             every term id seen, as a small integer
    closure(term, mention)                                     the mention's term and each of its ancestors
                                                               (integers, the table its own index)
    done(pmcid)                                                papers whose passages were read (resume)
    meta(key, value)                                           ontologies, counts, when
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from search.core.errors import FlysiftError
from search.core.models import ConceptMention
from search.core.query import MAX_CONCEPT_IDS

CONCEPTS = "concepts.db"
BUILDING = "concepts.db.building"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS mention (id INTEGER PRIMARY KEY, pmcid TEXT NOT NULL, passage TEXT NOT NULL,
                                    term TEXT NOT NULL, start INTEGER, "end" INTEGER, text TEXT, via TEXT);
CREATE TABLE IF NOT EXISTS term (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS closure (term INTEGER NOT NULL, mention INTEGER NOT NULL,
                                    PRIMARY KEY (term, mention)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS done (pmcid TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
"""
_INDEXES = """
CREATE INDEX IF NOT EXISTS mention_passage ON mention (passage);
CREATE INDEX IF NOT EXISTS mention_pmcid ON mention (pmcid);
"""

#: a mention found: (passage id, term id, start, end, text, via, the term and its ancestors)
Row = tuple[str, str, int, int, str, str, Sequence[str]]


def concepts_missing(collection: str) -> FlysiftError:
    return FlysiftError(f"Collection {collection!r} has no concept index for its published build: run `flysift "
                        f"index concepts --collection {collection}` (after every `flysift index corpus`) to search "
                        "term:.", code="concepts_missing", status=409, details={"collection": collection})


class ConceptWriter:
    """Writes a build's concept index; ``done`` holds the papers an interrupted earlier run finished."""

    def __init__(self, build_dir: Path, resume: bool = True):
        self.build_dir = build_dir
        self.path = build_dir / BUILDING
        if not resume:
            self.path.unlink(missing_ok=True)
        self.db = sqlite3.connect(self.path, check_same_thread=False)
        self.db.executescript(_SCHEMA)
        self.done = {r[0] for r in self.db.execute("SELECT pmcid FROM done")}
        self.term_ids = dict(self.db.execute("SELECT name, id FROM term"))
        self.lock = threading.Lock()

    def _term(self, name: str) -> int:
        got = self.term_ids.get(name)
        if got is None:
            got = self.term_ids[name] = self.db.execute("INSERT INTO term (name) VALUES (?)", (name,)).lastrowid \
                or 0
        return got

    def add(self, pmcid: str, rows: Iterable[Row]) -> None:
        """One paper's mentions (none is fine: the paper is read); a paper added again replaces its mentions."""
        with self.lock:
            if pmcid in self.done:
                ids = [r[0] for r in self.db.execute("SELECT id FROM mention WHERE pmcid = ?", (pmcid,))]
                self.db.executemany("DELETE FROM closure WHERE mention = ?", [(i,) for i in ids])
                self.db.execute("DELETE FROM mention WHERE pmcid = ?", (pmcid,))
            for passage, term, start, end, text, via, closure in rows:
                cur = self.db.execute('INSERT INTO mention (pmcid, passage, term, start, "end", text, via) '
                                      "VALUES (?, ?, ?, ?, ?, ?, ?)", (pmcid, passage, term, start, end, text, via))
                self.db.executemany("INSERT OR IGNORE INTO closure (term, mention) VALUES (?, ?)",
                                    [(self._term(t), cur.lastrowid) for t in dict.fromkeys(closure)])
            self.db.execute("INSERT OR IGNORE INTO done (pmcid) VALUES (?)", (pmcid,))
            self.done.add(pmcid)

    def commit(self) -> None:
        with self.lock:
            self.db.commit()

    def publish(self, meta: dict[str, Any]) -> dict[str, Any]:
        """Index the tables, record ``meta`` and the counts, and put the file in place (atomically)."""
        with self.lock:
            self.db.executescript(_INDEXES)
            counts = {"papers": self.db.execute("SELECT COUNT(*) FROM done").fetchone()[0],
                      "mentions": self.db.execute("SELECT COUNT(*) FROM mention").fetchone()[0],
                      "terms": self.db.execute("SELECT COUNT(DISTINCT term) FROM mention").fetchone()[0],
                      "bytes": 0}
            info = {**meta, **counts}
            self.db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                                [(k, json.dumps(v)) for k, v in info.items()])
            self.db.commit()
            self.db.close()
            info["bytes"] = self.path.stat().st_size
            os.replace(self.path, self.build_dir / CONCEPTS)
            return info

    def abort(self) -> None:
        """Stop; what was committed stays for the next run to resume."""
        with self.lock, contextlib.suppress(sqlite3.Error):
            self.db.close()


class ConceptStore:
    """A published build's concept index, read-only."""

    def __init__(self, path: Path):
        self.path = path
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self.lock = threading.Lock()

    def info(self) -> dict[str, Any]:
        with self.lock:
            return {k: json.loads(v) for k, v in self.db.execute("SELECT key, value FROM meta")}

    def counts(self, kind: Literal["papers", "passages"], term_ids: Sequence[str]) -> dict[str, int]:
        """Papers (pmcid) or passages (id) mentioning one of ``term_ids`` or a descendant, with how many mentions."""
        ids = list(dict.fromkeys(term_ids))[:MAX_CONCEPT_IDS]
        if not ids:
            return {}
        key = "m.pmcid" if kind == "papers" else "m.passage"
        marks = ",".join("?" * len(ids))
        with self.lock:
            rows = self.db.execute(f"SELECT {key}, COUNT(DISTINCT m.id) FROM term t JOIN closure c ON c.term = t.id "
                                   f"JOIN mention m ON m.id = c.mention WHERE t.name IN ({marks}) GROUP BY {key}",
                                   ids).fetchall()
        return {k: int(n) for k, n in rows}

    def mentions(self, kind: Literal["papers", "passages"], keys: Sequence[str], term_ids: Sequence[str],
                 per_key: int = 3) -> dict[str, list[ConceptMention]]:
        """For each key, its first ``per_key`` mentions of one of ``term_ids`` or a descendant, in text order."""
        ids = list(dict.fromkeys(term_ids))[:MAX_CONCEPT_IDS]
        out: dict[str, list[ConceptMention]] = {k: [] for k in keys}
        if not ids or not keys:
            return out
        column = "pmcid" if kind == "papers" else "passage"
        marks, kmarks = ",".join("?" * len(ids)), ",".join("?" * len(keys))
        with self.lock:
            rows = self.db.execute(
                f'SELECT m.{column}, m.passage, m.term, m.start, m."end", m.text, m.via, t.name FROM term t '
                f"JOIN closure c ON c.term = t.id JOIN mention m ON m.id = c.mention WHERE t.name IN ({marks}) "
                f"AND m.{column} IN ({kmarks}) ORDER BY m.id", [*ids, *keys]).fetchall()
        seen: set[tuple[str, int, int]] = set()
        for key, passage, term, start, end, text, via, matched in rows:
            if len(out[key]) >= per_key or (passage, start, end) in seen:
                continue
            seen.add((passage, start, end))
            out[key].append(ConceptMention(term_id=term, matched=matched, passage_id=passage, start=start, end=end,
                                           text=text, via=via))
        return out

    def of_paper(self, pmcid: str) -> list[ConceptMention]:
        """Every mention in a paper, in text order (``matched`` is the term itself)."""
        with self.lock:
            rows = self.db.execute('SELECT passage, term, start, "end", text, via FROM mention WHERE pmcid = ? '
                                   "ORDER BY id", (pmcid,)).fetchall()
        return [ConceptMention(term_id=t, matched=t, passage_id=p, start=s, end=e, text=x, via=v)
                for p, t, s, e, x, v in rows]

    def close(self) -> None:
        with self.lock:
            self.db.close()
