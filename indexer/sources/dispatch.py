"""Format detection and dispatch: which reader reads a file (by suffix and a peek at the content), folders walked
for data files, and every record of every input in order (as raw ``Unit``s, or parsed), a file of unknown format or
with no record being one reject (record 0)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from indexer.sources import bioc, flyaoc, jats
from indexer.sources.base import (
    HF_METADATA,
    IdMap,
    SourceItem,
    Unit,
    data_suffix,
    file_size,
    is_hf_dataset_dir,
    item_unit,
    open_binary,
    parse_unit,
    reject_item,
)
from search.core.errors import InputError

FORMATS = ("flyaoc", "jats", "bioc")
_DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".arrow", ".nxml", ".xml", ".tar", ".tgz")
#: JATS article files: a folder holding one has supplementary files beside it, which are not inputs of their own
_ARTICLE_SUFFIXES = (".nxml", ".xml")
#: Documentation that sits beside data files (dataset cards, licences, notes): not reported when a folder is walked.
_DOC_SUFFIXES = (".md", ".txt", ".rst", ".cff")
_DOC_NAMES = ("readme", "license", "licence", "citation", "notice", "copying")
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
    if suffix in (".tar", ".tgz"):
        return "jats"   # a PMC package: the article and its supplementary files
    raise InputError(f"{path}: unknown input format (expected .jsonl, .json, .parquet, .arrow, a Hugging Face "
                     f"dataset folder, .nxml, .xml or a PMC .tar.gz package)", source=str(path))


def _is_article(path: Path) -> bool:
    """A JATS article file: ``.nxml``, or ``.xml`` whose root element is ``<article>`` (not a BioC collection)."""
    name = path.name.lower()
    if not path.is_file() or not name.endswith(_ARTICLE_SUFFIXES):
        return False
    return name.endswith(".nxml") or _xml_root(_head(path)) == "article"


def _is_data(path: Path) -> bool:
    """A file with a data suffix, or a Hugging Face dataset folder."""
    return path.is_dir() or data_suffix(path) in _DATA_SUFFIXES


def _walk(folder: Path) -> Iterator[Path]:
    """Files under a folder, sorted: data files, a Hugging Face dataset folder whole, and files of unknown format
    (they become rejects, not silence); hidden entries, HF metadata and documentation are skipped, and so are the
    other files of a folder that holds JATS articles (their supplementary files: ``indexer.supplements``)."""
    entries = sorted(folder.iterdir())
    articles = any(_is_article(e) for e in entries)
    for entry in entries:
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            if is_hf_dataset_dir(entry):
                yield entry
            else:
                yield from _walk(entry)
        elif entry.name in HF_METADATA or (not _is_data(entry) and (
                articles or entry.suffix.lower() in _DOC_SUFFIXES or entry.name.lower().startswith(_DOC_NAMES))):
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
    return {"flyaoc": flyaoc, "jats": jats, "bioc": bioc}[fmt]


def _check_format(fmt: str) -> None:
    if fmt != "auto" and fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}: use one of auto, {', '.join(FORMATS)}")


class Units:
    """Every record of every input as a ``Unit``, in order, and the inputs' size (``total_bytes``): the ``end`` of a
    unit counts up to it across the inputs, so ``done * total_bytes / end`` estimates the number of records."""

    def __init__(self, inputs: list[Path], fmt: str, id_map: IdMap | None):
        self.inputs, self.fmt, self.id_map = inputs, fmt, id_map
        self.sizes = [_input_size(p) for p in inputs]
        self.total_bytes = sum(self.sizes)

    def __iter__(self) -> Iterator[Unit]:
        offset = last = 0
        for path, size in zip(self.inputs, self.sizes, strict=True):
            for unit in _file_units(path, self.fmt, self.id_map):
                unit.end = last = max(last, offset + min(unit.end, size))
                yield unit
            offset += size


def iter_units(paths: Iterable[Path], fmt: str = "auto", id_map: IdMap | None = None) -> Units:
    """Every record of every input as a ``Unit`` (folders walked, sorted); bad paths and an unknown ``fmt`` raise
    before anything is read."""
    _check_format(fmt)
    return Units(_inputs(paths), fmt, id_map)


def iter_records(paths: Iterable[Path], fmt: str = "auto", id_map: IdMap | None = None,
                 strict: bool = False) -> Iterator[SourceItem]:
    """Every record of every input, in order: folders are walked (sorted) for known files.

    With ``strict=True`` the first reject raises ``InputError`` naming source, record and field. Bad paths and an
    unknown ``fmt`` raise before anything is read.
    """
    return _iter(iter_units(paths, fmt, id_map), strict)


def _input_size(path: Path) -> int:
    if not is_hf_dataset_dir(path):
        return file_size(path)
    try:
        return sum(map(file_size, flyaoc.hf_arrow_files(path)))
    except InputError:
        return 0


def _file_units(path: Path, fmt: str, id_map: IdMap | None) -> Iterator[Unit]:
    """The records of one input; a file of unknown format, or one that holds no record, is one reject (record 0)."""
    if not _is_data(path):
        yield item_unit(reject_item(str(path), 0, f"not read: unknown input format "
                                                  f"{data_suffix(path) or '(no suffix)'!r} (expected "
                                                  f"{', '.join(_DATA_SUFFIXES)}, optionally gzipped)"))
        return
    empty = True
    for unit in _reader(detect_format(path) if fmt == "auto" else fmt).units(path, id_map):
        empty = False
        yield unit
    if empty:
        size = path.stat().st_size if path.is_file() else None
        yield item_unit(reject_item(str(path), 0, "the file is empty" if size == 0 else "no records in the input"))


def _iter(units: Iterable[Unit], strict: bool) -> Iterator[SourceItem]:
    for item in map(parse_unit, units):
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
