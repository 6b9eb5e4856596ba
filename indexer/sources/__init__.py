"""Corpus sources: turn files (FlyAOC exports, PMC JATS/NXML, BioC) into ``Paper`` objects, one ``SourceItem`` per record.

Every record yields exactly one item, either a paper or a ``Reject`` that names source, record and field, so the
pipeline can count and report everything it did not index. An input that holds no record (an empty file) and a file
of unknown format met in a folder are one reject each (record 0), never silence. Format readers live in
``flyaoc.py``, ``jats.py`` and ``bioc.py``; this module holds what they share (item type, id map, id/year/text
normalisation) and the dispatch.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from search.core.errors import InputError
from search.core.models import Paper, Reject

FORMATS = ("flyaoc", "jats", "bioc")

#: File names inside Hugging Face dataset folders that are metadata, not records.
HF_METADATA = frozenset({"dataset_info.json", "state.json", "dataset_dict.json"})
_DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".arrow", ".nxml", ".xml")
#: Documentation that sits beside data files (dataset cards, licences, notes): not reported when a folder is walked.
_DOC_SUFFIXES = (".md", ".txt", ".rst", ".cff")
_DOC_NAMES = ("readme", "license", "licence", "citation", "notice", "copying")


@dataclass
class SourceItem:
    """One input record: a parsed paper, or the reason it is not usable.

    ``record`` is the 1-based line (JSONL), row (JSON array, Parquet, Arrow) or document (BioC) number, 1 for a
    one-article XML file, and 0 when the file as a whole could not be read (then there is one item for the file).
    """

    source: str
    record: int
    paper: Paper | None = None
    reject: Reject | None = None
    warnings: list[str] = field(default_factory=list)


class IdMap:
    """File name → (PMCID, PMID), e.g. CRAFT's ``ids/craft-idmappings.txt``: PMC files that carry only a PMID."""

    def __init__(self, entries: dict[str, tuple[str | None, str | None]]):
        self.entries = entries

    @classmethod
    def load(cls, path: Path | str) -> IdMap:
        """Read a TSV of ``file name <tab> PMCID <tab> PMID``; a first line starting with ``#`` or not holding a
        PMCID in its second column is a header."""
        path = Path(path)
        entries: dict[str, tuple[str | None, str | None]] = {}
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: cannot read id map: {exc}", source=str(path)) from exc
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            cols = [c.strip() for c in line.split("\t")]
            if number == 1 and (line.startswith("#") or len(cols) < 2 or not _PMCID_RE.match(cols[1])):
                continue
            if len(cols) < 2 or not cols[0]:
                raise InputError(f"{path} line {number}: expected 'file name<TAB>PMCID<TAB>PMID', got {line!r}",
                                 source=str(path), record=number, field="file name")
            try:
                pmcid = normalize_pmcid(cols[1]) if cols[1] else None
                pmid = normalize_pmid(cols[2]) if len(cols) > 2 and cols[2] else None
            except InputError as exc:
                raise InputError(f"{path} line {number}: {exc.message}", source=str(path), record=number,
                                 field=exc.field) from exc
            entries[Path(cols[0]).name] = (pmcid, pmid)
        return cls(entries)

    def lookup(self, name: str | Path) -> tuple[str | None, str | None] | None:
        """(PMCID, PMID) for a file, looked up by its base name."""
        return self.entries.get(Path(name).name)

    def __len__(self) -> int:
        return len(self.entries)


# ---------------------------------------------------------------------------------------------------------------
# normalisation shared by the readers; each raises InputError(field=...) that the reader turns into a Reject

_PMCID_RE = re.compile(r"^\s*(?:pmc)?\s*(\d+)\s*$", re.IGNORECASE)
_PMID_RE = re.compile(r"^\s*(?:pmid:?)?\s*(\d+)\s*$", re.IGNORECASE)
_YEAR_RE = re.compile(r"^\s*(\d{4})(?:[-/]\d{1,2}(?:[-/]\d{1,2})?)?\s*$")
_BLANK_LINE_RE = re.compile(r"\n[^\S\n]*\n\s*")


def normalize_pmcid(value: Any) -> str:
    """``PMC<digits>`` from ``PMC1234``, ``pmc1234``, ``1234`` or the integer 1234."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return f"PMC{value}"
    m = _PMCID_RE.match(value) if isinstance(value, str) else None
    if not m:
        raise InputError(f"not a PMCID: {value!r}", field="pmcid")
    return f"PMC{int(m.group(1))}"


def normalize_pmid(value: Any) -> str:
    """PubMed id as a string of digits."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return str(value)
    m = _PMID_RE.match(value) if isinstance(value, str) else None
    if not m:
        raise InputError(f"not a PMID: {value!r}", field="pmid")
    return str(int(m.group(1)))


def normalize_year(value: Any) -> int:
    """Publication year as an int, from an int, a float with no fraction, ``"2006"`` or ``"2006-05-01"``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        year = value
    elif isinstance(value, str) and (m := _YEAR_RE.match(value)):
        year = int(m.group(1))
    else:
        raise InputError(f"not a year: {value!r}", field="year")
    if not 1000 <= year <= 2999:
        raise InputError(f"year out of range: {value!r}", field="year")
    return year


def clean_text(text: str) -> str:
    """Collapse every run of whitespace to one space and strip: the form all stored text takes."""
    return " ".join(text.split())


def split_blank_lines(text: str) -> list[str]:
    """Paragraphs of a text whose paragraphs are separated by blank lines, each cleaned; empty ones dropped."""
    return [p for p in (clean_text(part) for part in _BLANK_LINE_RE.split(text)) if p]


def join_paragraphs(paragraphs: Iterable[str]) -> str:
    """The inverse of ``split_blank_lines`` for an abstract made of several paragraphs."""
    return "\n\n".join(p for p in paragraphs if p)


def reject_item(source: str, record: int, reason: str, *, field: str | None = None,
                pmcid: str | None = None, warnings: list[str] | None = None) -> SourceItem:
    """An item for a record that is not usable."""
    return SourceItem(source, record, None, Reject(source=source, record=record, pmcid=pmcid, field=field,
                                                    reason=reason), warnings or [])


def paper_item(source: str, record: int, paper: Paper, warnings: list[str]) -> SourceItem:
    """A paper, or a reject when it has no text at all (no title, abstract or paragraph)."""
    if not (paper.title or paper.abstract or any(s.paragraphs for s in paper.sections)):
        return reject_item(source, record, "paper has no text: no title, abstract or paragraphs",
                           field="text", pmcid=paper.pmcid, warnings=warnings)
    return SourceItem(source, record, paper, None, warnings)


def open_binary(path: Path) -> BinaryIO:
    """Open a file for reading bytes, transparently gunzipping ``*.gz``."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")


def data_suffix(path: Path) -> str:
    """The data suffix of a file, ignoring a trailing ``.gz``."""
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return Path(name).suffix.lower()


# ---------------------------------------------------------------------------------------------------------------
# format detection and dispatch

_FIRST_TAG_RE = re.compile(rb"<([A-Za-z_][\w.:-]*)")
_JSON_KEY_RE = r'(?<!\\)"{}"\s*:'


def _head(path: Path, size: int = 65536) -> bytes:
    try:
        with open_binary(path) as fh:
            return fh.read(size)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc}", source=str(path)) from exc


def _xml_root(head: bytes) -> str | None:
    """Name of the root element: the first tag that is not a declaration, doctype, comment or PI."""
    text = re.sub(rb"<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>\[]*(\[.*?\])?\s*>", b"", head, flags=re.S)
    m = _FIRST_TAG_RE.search(text)
    return m.group(1).decode("ascii", "replace").split(":")[-1] if m else None


def is_hf_dataset_dir(path: Path) -> bool:
    """A folder written by ``datasets.save_to_disk`` (``state.json``/``dataset_info.json`` next to ``*.arrow``)."""
    return path.is_dir() and any((path / n).is_file() for n in ("state.json", "dataset_info.json")) and any(
        path.glob("*.arrow"))


def detect_format(path: Path) -> str:
    """``flyaoc``, ``jats`` or ``bioc`` for one file or folder, by suffix and a peek at the content."""
    path = Path(path)
    if path.is_dir():
        if is_hf_dataset_dir(path):
            return "flyaoc"
        formats = {detect_format(p) for p in _walk(path) if _is_data(p)}
        if len(formats) == 1:
            return formats.pop()
        what = f"files of several formats ({', '.join(sorted(formats))})" if formats else "no known data files"
        raise InputError(f"{path}: folder holds {what}; name the format or the files", source=str(path))
    if not path.is_file():
        raise InputError(f"{path}: no such file or folder", source=str(path))
    suffix = data_suffix(path)
    if suffix in (".jsonl", ".parquet", ".arrow"):
        return "flyaoc"
    if suffix == ".json":
        head = _head(path).decode("utf-8", "replace")
        is_bioc = all(re.search(_JSON_KEY_RE.format(k), head) for k in ("documents", "passages"))
        return "bioc" if is_bioc else "flyaoc"
    if suffix in (".nxml", ".xml"):
        return "bioc" if _xml_root(_head(path)) == "collection" else "jats"
    raise InputError(f"{path}: unknown input format (expected .jsonl, .json, .parquet, .arrow, a Hugging Face "
                     f"dataset folder, .nxml or .xml)", source=str(path))


def _is_data(path: Path) -> bool:
    """A file with a data suffix, or a Hugging Face dataset folder."""
    return path.is_dir() or data_suffix(path) in _DATA_SUFFIXES


def _walk(folder: Path) -> Iterator[Path]:
    """Files under a folder, sorted: data files, a Hugging Face dataset folder whole, and files of unknown format
    (they become rejects, not silence); hidden entries, HF metadata and documentation are skipped."""
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            if is_hf_dataset_dir(entry):
                yield entry
            else:
                yield from _walk(entry)
        elif entry.name in HF_METADATA or (not _is_data(entry) and (
                entry.suffix.lower() in _DOC_SUFFIXES or entry.name.lower().startswith(_DOC_NAMES))):
            continue
        else:
            yield entry


def _inputs(paths: Iterable[Path]) -> list[Path]:
    """Expand folders into their data files (an HF dataset folder stays one input); missing paths raise."""
    out: list[Path] = []
    for path in map(Path, paths):
        if not path.exists():
            raise InputError(f"{path}: no such file or folder", source=str(path))
        if path.is_dir() and not is_hf_dataset_dir(path):
            out.extend(_walk(path))
        elif path.is_file() and data_suffix(path) not in _DATA_SUFFIXES:
            detect_format(path)  # raises the "unknown input format" error
        else:
            out.append(path)
    return out


def _reader(fmt: str):
    from indexer.sources import bioc, flyaoc, jats

    return {"flyaoc": flyaoc, "jats": jats, "bioc": bioc}[fmt]


def _check_format(fmt: str) -> None:
    if fmt != "auto" and fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}: use one of auto, {', '.join(FORMATS)}")


def iter_records(paths: Iterable[Path], fmt: str = "auto", id_map: IdMap | None = None,
                 strict: bool = False) -> Iterator[SourceItem]:
    """Every record of every input, in order: folders are walked (sorted) for known files.

    With ``strict=True`` the first reject raises ``InputError`` naming source, record and field. Bad paths and an
    unknown ``fmt`` raise before anything is read.
    """
    _check_format(fmt)
    inputs = _inputs(paths)
    return _iter(inputs, fmt, id_map, strict)


def _file_items(path: Path, fmt: str, id_map: IdMap | None) -> Iterator[SourceItem]:
    """The records of one input; a file of unknown format, or one that holds no record, is one reject (record 0)."""
    if not _is_data(path):
        yield reject_item(str(path), 0, f"not read: unknown input format {data_suffix(path) or '(no suffix)'!r} "
                                        f"(expected {', '.join(_DATA_SUFFIXES)}, optionally gzipped)")
        return
    empty = True
    for item in _reader(detect_format(path) if fmt == "auto" else fmt).read(path, id_map):
        empty = False
        yield item
    if empty:
        size = path.stat().st_size if path.is_file() else None
        yield reject_item(str(path), 0, "the file is empty" if size == 0 else "no records in the input")


def _iter(inputs: list[Path], fmt: str, id_map: IdMap | None, strict: bool) -> Iterator[SourceItem]:
    for path in inputs:
        for item in _file_items(path, fmt, id_map):
            if strict and item.reject is not None:
                r = item.reject
                raise InputError(f"{r.source} record {r.record}" + (f", field {r.field}" if r.field else "")
                                 + f": {r.reason}", source=r.source, record=r.record, field=r.field, pmcid=r.pmcid)
            yield item


def count_records(paths: Iterable[Path], fmt: str = "auto") -> int | None:
    """A cheap total for a progress bar (JSONL lines, JSON array lengths, parquet/arrow row counts, XML files);
    None when some input cannot be counted cheaply or at all."""
    _check_format(fmt)
    total = 0
    for path in _inputs(paths):
        if not _is_data(path):
            total += 1  # reported as one reject
            continue
        try:
            n = _reader(detect_format(path) if fmt == "auto" else fmt).count(path)
        except InputError:
            return None
        if n is None:
            return None
        total += max(n, 1)  # an input with no record is one reject
    return total
