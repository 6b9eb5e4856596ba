"""FlyAOC corpus exports: records with ``pmcid``, ``title``, ``abstract``, ``sections`` (section type → paragraphs,
or one string split on blank lines) and optionally ``body``, ``pmid``, ``doi``, ``year``, ``journal``, ``authors`` (a
list of names, or one string of names separated by ``;``).

Readers for JSONL, JSON (an array or ``{"data": [...]}``), Parquet (streamed by batches), Arrow IPC files and a
local Hugging Face dataset folder (``datasets.save_to_disk`` output, read with pyarrow alone). ``sections`` may
also arrive as an Arrow map (a list of pairs), a JSON string, or flysift's own list of ``{type, title, paragraphs}``.
Whole-file failures (unreadable, malformed JSON document) are reported as record 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from indexer.sources.base import (
    IdMap,
    SourceItem,
    Unit,
    author_list,
    clean_text,
    data_suffix,
    file_size,
    is_hf_dataset_dir,
    item_unit,
    join_paragraphs,
    normalize_pmcid,
    normalize_pmid,
    normalize_year,
    open_binary,
    open_measured,
    paper_item,
    reject_item,
    split_blank_lines,
)
from search.core.errors import InputError
from search.core.extras import require
from search.core.models import SECTION_TYPES, Paper, Section

_BATCH_ROWS = 256
_PMCID_IN_LINE = re.compile(r'"pmcid"\s*:\s*"?(\w+)')
#: Section keys that repeat a top-level field in BioC-derived exports.
_FIELD_KEYS = {"TITLE": "title", "ABSTRACT": "abstract"}


def _type_name(value: Any) -> str:
    return "null" if value is None else {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
                                         int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _opt_str(rec: dict, key: str) -> str | None:
    value = rec.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"{key} is {_type_name(value)}, expected a string", field=key)
    return value


def _opt(rec: dict, key: str, normalize) -> Any:
    value = rec.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return normalize(value)


def _authors(rec: dict, warnings: list[str]) -> list[str]:
    """``authors``: a list of names, or one string of names separated by ``;``."""
    value = rec.get("authors")
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(";")
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise InputError(f"authors is {_type_name(value)}, expected a list of names or one string of names "
                         "separated by ';'", field="authors")
    return author_list(value, warnings)


def _paragraphs(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return split_blank_lines(value)
    if not isinstance(value, (list, tuple)):
        raise InputError(f"{where} is {_type_name(value)}, expected a list of paragraph strings or one string",
                         field=where)
    out = []
    for i, para in enumerate(value):
        if not isinstance(para, str):
            raise InputError(f"{where}[{i}] is {_type_name(para)}, expected a string", field=f"{where}[{i}]")
        if text := clean_text(para):
            out.append(text)
    return out


def _section(name: str, title: str | None, paragraphs: list[str]) -> Section:
    """Upper-cased known types stay; any other type becomes OTHER, keeping its name as the title."""
    kind = name.strip().upper()
    if kind in SECTION_TYPES or kind in _FIELD_KEYS:
        return Section(type=kind, title=title, paragraphs=paragraphs)
    return Section(type="OTHER", title=title or name.strip(), paragraphs=paragraphs)


def _sections(value: Any) -> list[Section]:
    """Sections in document order from any accepted shape of the ``sections`` field."""
    if value is None:
        return []
    if isinstance(value, str):
        if not value.strip():
            return []
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise InputError(f"sections is a string that is not JSON ({exc})", field="sections") from exc
    if isinstance(value, dict):
        pairs: Iterable = value.items()
    elif isinstance(value, list) and all(isinstance(x, dict) for x in value):
        return [_section_object(i, x) for i, x in enumerate(value)]
    elif isinstance(value, list) and all(isinstance(x, (list, tuple)) and len(x) == 2 and isinstance(x[0], str)
                                         for x in value):
        pairs = value
    else:
        raise InputError(f"sections is {_type_name(value)} of an unknown shape, expected a mapping of section type "
                         f"to paragraphs", field="sections")
    out = []
    for name, paragraphs in pairs:
        if not isinstance(name, str):
            raise InputError(f"sections key {name!r} is not a string", field="sections")
        if paragraphs is not None:  # Arrow structs give null for types a paper lacks
            out.append(_section(name, None, _paragraphs(paragraphs, f"sections.{name}")))
    return out


def _section_object(i: int, obj: dict) -> Section:
    """flysift's own shape: ``{"type": ..., "title": ..., "paragraphs": [...]}``."""
    where = f"sections[{i}]"
    kind, title = obj.get("type"), obj.get("title")
    if not isinstance(kind, str) or not kind.strip():
        raise InputError(f"{where}.type is {_type_name(kind)}, expected a section type string", field=f"{where}.type")
    if title is not None and not isinstance(title, str):
        raise InputError(f"{where}.title is {_type_name(title)}, expected a string", field=f"{where}.title")
    return _section(kind, clean_text(title) if title else None,
                    _paragraphs(obj.get("paragraphs", []), f"{where}.paragraphs"))


def paper_from_record(rec: Any, source: str, record: int) -> SourceItem:
    """One FlyAOC record → a paper, or a reject naming the first bad field."""
    if not isinstance(rec, dict):
        return reject_item(source, record, f"record is {_type_name(rec)}, expected an object")
    warnings: list[str] = []
    pmcid = None
    try:
        if rec.get("pmcid") in (None, ""):
            raise InputError("record has no pmcid", field="pmcid")
        pmcid = normalize_pmcid(rec["pmcid"])
        title = clean_text(_opt_str(rec, "title") or "")
        abstract = join_paragraphs(split_blank_lines(_opt_str(rec, "abstract") or ""))
        body = _opt_str(rec, "body")
        paper = Paper(pmcid=pmcid, pmid=_opt(rec, "pmid", normalize_pmid), doi=clean_text(_opt_str(rec, "doi") or "")
                      or None, year=_opt(rec, "year", normalize_year),
                      journal=clean_text(_opt_str(rec, "journal") or "") or None, authors=_authors(rec, warnings),
                      title=title, abstract=abstract)
        for section in _sections(rec.get("sections")):
            key = _FIELD_KEYS.get(section.type)
            if key is None:
                if section.paragraphs:
                    paper.sections.append(section)
                continue
            text = join_paragraphs(section.paragraphs) if key == "abstract" else " ".join(section.paragraphs)
            if not getattr(paper, key):
                setattr(paper, key, text)
            elif text and text != getattr(paper, key):
                warnings.append(f"sections.{section.type} differs from {key}; kept {key}")
        if not paper.sections and body and (paragraphs := split_blank_lines(body)):
            paper.sections.append(Section(type="OTHER", paragraphs=paragraphs))
            warnings.append("no sections: body split on blank lines into one OTHER section")
    except InputError as exc:
        return reject_item(source, record, exc.message, field=exc.field, pmcid=pmcid, warnings=warnings)
    return paper_item(source, record, paper, warnings)


# ---------------------------------------------------------------------------------------------------------------
# file readers: units are read in order; ``_parse_line`` and ``_parse_record`` run wherever the units are sent

def _parse_line(source: str, record: int, raw: bytes) -> SourceItem:
    """One JSONL line → a paper, or a reject (a malformed line names the pmcid it seems to hold)."""
    try:
        rec = json.loads(raw.decode("utf-8-sig"))
    except ValueError as exc:  # includes UnicodeDecodeError
        m = _PMCID_IN_LINE.search(raw.decode("utf-8", "replace"))
        return reject_item(source, record, f"malformed JSON line: {exc}", pmcid=m.group(1) if m else None)
    return paper_from_record(rec, source, record)


def _parse_record(source: str, record: int, rec: Any) -> SourceItem:
    return paper_from_record(rec, source, record)


def _jsonl_units(path: Path) -> Iterator[Unit]:
    src, number, read = str(path), 0, 0
    try:
        with open_measured(path) as (fh, tell):
            for number, raw in enumerate(fh, 1):
                if raw.strip():
                    read = tell()
                    yield Unit(_parse_line, src, number, raw, read)
    except (OSError, EOFError) as exc:
        yield item_unit(reject_item(src, number + 1 if number else 0, f"cannot read file: {exc}"), read)


def _json_records(path: Path) -> list:
    with open_binary(path) as fh:
        doc = json.loads(fh.read().decode("utf-8-sig"))
    if isinstance(doc, dict) and isinstance(doc.get("data"), list):
        return doc["data"]
    if isinstance(doc, list):
        return doc
    raise ValueError(f'expected a JSON array of records or {{"data": [...]}}, got {_type_name(doc)}')


def _json_units(path: Path) -> Iterator[Unit]:
    try:
        records = _json_records(path)
    except (OSError, EOFError, ValueError) as exc:
        yield item_unit(reject_item(str(path), 0, f"cannot read JSON: {exc}"))
        return
    size = file_size(path)
    for number, rec in enumerate(records, 1):
        yield Unit(_parse_record, str(path), number, rec, size * number // len(records))


def _pyarrow() -> Any:
    """pyarrow, imported when a Parquet, Arrow or saved Hugging Face input is read (the ``hf`` extra)."""
    return require("pyarrow", "hf", "reading Parquet, Arrow and Hugging Face dataset inputs")


def _parquet_batches(path: Path) -> Iterator[Any]:
    yield from require("pyarrow.parquet", "hf", "reading Parquet inputs").ParquetFile(path).iter_batches(
        batch_size=_BATCH_ROWS)


def _arrow_batches(path: Path) -> Iterator[Any]:
    """Batches of an Arrow IPC stream (what ``datasets`` writes) or, failing that, an Arrow IPC file."""
    pa = _pyarrow()
    with pa.memory_map(str(path)) as mm:
        try:
            reader = pa.ipc.open_stream(mm)
        except pa.ArrowInvalid:
            mm.seek(0)
            file_reader = pa.ipc.open_file(mm)
            for i in range(file_reader.num_record_batches):
                yield file_reader.get_batch(i)
            return
        yield from reader


def _parquet_rows(path: Path) -> int:
    return require("pyarrow.parquet", "hf", "reading Parquet inputs").ParquetFile(path).metadata.num_rows


def _batch_units(path: Path, batches: Iterator[Any], start: int = 0,
                 rows: Callable[[Path], int] | None = None) -> Iterator[Unit]:
    """Rows as records. ``end`` is the file's share of rows read where ``rows`` counts them from metadata, else grows
    with the batches' decoded size, capped at the file's; ``start`` is the bytes of the input before this file (a
    Hugging Face folder holds several)."""
    pa = _pyarrow()
    src, number, read, size, decoded = str(path), 0, start, file_size(path), 0
    try:
        total = rows(path) if rows else 0
        for batch in batches:
            records = batch.to_pylist()
            for i, rec in enumerate(records, 1):
                number += 1
                share = size * number // total if total else decoded + batch.nbytes * i // len(records)
                read = start + min(size, share)
                yield Unit(_parse_record, src, number, rec, read)
            decoded += batch.nbytes
    except (OSError, pa.ArrowException) as exc:
        yield item_unit(reject_item(src, number + 1 if number else 0,
                                    f"cannot read {path.suffix.lstrip('.')} data: {exc}"), read)


def hf_arrow_files(folder: Path) -> list[Path]:
    """The data files of a ``save_to_disk`` folder, in the order ``state.json`` lists them (else sorted)."""
    state = folder / "state.json"
    if state.is_file():
        try:
            files = [folder / f["filename"] for f in json.loads(state.read_text(encoding="utf-8"))["_data_files"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{state}: cannot read the list of data files: {exc}", source=str(state)) from exc
        if files:
            return files
    return sorted(folder.glob("*.arrow"))


def units(path: Path, id_map: IdMap | None = None) -> Iterator[Unit]:
    """Every record of one FlyAOC export file or Hugging Face dataset folder (``id_map`` is not used)."""
    if is_hf_dataset_dir(path):
        try:
            files = hf_arrow_files(path)
        except InputError as exc:
            yield item_unit(reject_item(str(path), 0, exc.message))
            return
        start = 0
        for arrow in files:
            yield from _batch_units(arrow, _arrow_batches(arrow), start)
            start += file_size(arrow)
        return
    suffix = data_suffix(path)
    if suffix == ".parquet":
        yield from _batch_units(path, _parquet_batches(path), rows=_parquet_rows)
    elif suffix == ".arrow":
        yield from _batch_units(path, _arrow_batches(path))
    elif suffix == ".json":
        yield from _json_units(path)
    else:
        yield from _jsonl_units(path)


def count(path: Path) -> int | None:
    """Records in one input without parsing them (JSON arrays are loaded, which is not cheap for big files)."""
    arrow_error: type[BaseException] = OSError
    if is_hf_dataset_dir(path) or data_suffix(path) in (".parquet", ".arrow"):
        arrow_error = _pyarrow().ArrowException
    try:
        if is_hf_dataset_dir(path):
            return sum(_arrow_rows(p) for p in hf_arrow_files(path))
        suffix = data_suffix(path)
        if suffix == ".parquet":
            return _parquet_rows(path)
        if suffix == ".arrow":
            return _arrow_rows(path)
        if suffix == ".json":
            return len(_json_records(path))
        with open_binary(path) as fh:
            return sum(1 for raw in fh if raw.strip())
    except (OSError, EOFError, ValueError, arrow_error):
        return None


def _arrow_rows(path: Path) -> int:
    return sum(batch.num_rows for batch in _arrow_batches(path))
