"""What a build of the embedded engine is on disk: the index schemas of the current layout (``LAYOUT``, see
``search.engines.embedded.engine``), how an index is opened (with the analyzers every layout needs), and the small
files a collection keeps (``CURRENT``, ``build.json``). The write side is ``build``, the read side ``engine``."""


from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tantivy

from search.engines.embedded import paper_store, supplement_store
from search.text.analysis import ANALYZERS
from search.text.tokens import PRE_ANALYZED

KEEP_BUILDS = 2
VIEW_SUFFIX = {"word": "_w", "symbol": "_s"}
#: the index layout new builds are written in (see the module docstring); a build of another layout is never resumed
LAYOUT = 7
#: the first layout with supplement passages (``source``), the papers' ``supp`` fields and ``supp_chunks``
SUPPLEMENT_LAYOUT = 6
#: the first layout whose papers are one field (``text``); older builds are searched per field
ONE_FIELD_LAYOUT = 5
#: builds of a layout below this are deprecated (their readers go in a later release): ``flysift upgrade`` rewrites
#: them; a layout-5 build (no supplement fields) is current, since only a new index of the sources adds supplements
DEPRECATED_BELOW = ONE_FIELD_LAYOUT
#: the first layout with the title and abstract fields beside the one field (``title:``, ``abstract:``)
FIELDED_LAYOUT = 7


def _add_views(sb: tantivy.SchemaBuilder, name: str) -> None:
    sb.add_text_field(name + "_w", stored=False, tokenizer_name=PRE_ANALYZED)
    # no positions: no symbol-view query is a phrase (layout 4: 20 % less index at 2,000 papers, 238 → 190 MiB)
    sb.add_text_field(name + "_s", stored=False, tokenizer_name=PRE_ANALYZED, index_option="freq")


def _paper_schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("pmcid", stored=True, tokenizer_name="raw")
    sb.add_integer_field("year", stored=False, indexed=True, fast=True)
    sb.add_text_field("section_types", stored=False, tokenizer_name="raw")
    _add_views(sb, "text")   # title, abstract and body, each repeated by its field weight (layout 5)
    _add_views(sb, "supp")   # the supplement passages' text, one value each (layout 6)
    _add_views(sb, "title")  # once each, searched only by title:/abstract: (layout 7)
    _add_views(sb, "abstract")
    sb.add_bytes_field("head", stored=True, indexed=False)  # PaperHead JSON
    return sb.build()


def _passage_schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True, tokenizer_name="raw")
    sb.add_text_field("pmcid", stored=False, tokenizer_name="raw")
    sb.add_integer_field("year", stored=False, indexed=True, fast=True)
    sb.add_text_field("section_type", stored=False, tokenizer_name="raw")
    sb.add_text_field("source", stored=False, tokenizer_name="raw")   # "supplement" on supplement passages only
    _add_views(sb, "text")
    sb.add_bytes_field("doc", stored=True, indexed=False)
    return sb.build()


SCHEMAS = {"papers": _paper_schema, "passages": _passage_schema}


def _open_index(path: Path, kind: str, create: bool = False) -> tantivy.Index:
    if create:
        path.mkdir(parents=True, exist_ok=True)
        index = tantivy.Index(SCHEMAS[kind](), path=str(path), reuse=True)
    else:
        index = tantivy.Index.open(str(path))
    for name, analyzer in ANALYZERS.items():   # the analyzers of layout-1 builds
        index.register_tokenizer(name, analyzer)
    index.register_tokenizer(PRE_ANALYZED, _PRE_ANALYZER)
    return index


_PRE_ANALYZER = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()


def _stored_docs(searcher: tantivy.Searcher) -> Iterator[tantivy.Document]:
    """Every live document of an index, in a stable order (segment, then doc)."""
    if searcher.num_docs == 0:
        return
    res = searcher.search(tantivy.Query.all_query(), searcher.num_docs, count=False)
    for addr in sorted((a for _, a in res.hits), key=lambda a: (a.segment_ord, a.doc)):
        yield searcher.doc(addr)


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _open_paper_db(path: Path) -> sqlite3.Connection:
    """A build's paper store for writing; any thread may use it (its build serialises every use)."""
    db = sqlite3.connect(path, check_same_thread=False)
    paper_store.create(db)
    supplement_store.create(db)
    return db


def _dir_bytes(path: Path) -> int:
    total = 0
    for f in path.rglob("*"):
        with contextlib.suppress(FileNotFoundError):  # an old build being dropped by a publish
            total += f.stat().st_size if f.is_file() else 0
    return total


def _read_meta(meta_file: Path) -> dict[str, Any] | None:
    """A build's ``build.json``, or None when it is missing or unreadable (a build killed while being created)."""
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _current_build(collection_dir: Path) -> str | None:
    meta = _read_meta(collection_dir / "CURRENT")
    return meta.get("build") if meta else None
