"""What the corpus readers share: the item each record becomes, the id map, normalisation of ids, years and text,
and small file helpers. The readers (``flyaoc``, ``jats``, ``bioc``) and the dispatch (``dispatch``) import it; it
imports none of them."""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

from search.core.errors import InputError
from search.core.models import Paper, Passage, Reject

#: File names inside Hugging Face dataset folders that are metadata, not records.
HF_METADATA = frozenset({"dataset_info.json", "state.json", "dataset_dict.json"})


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
    #: passages of the paper's supplementary files (``indexer.supplements``), after its own
    supplement_passages: list[Passage] = field(default_factory=list)


@dataclass(slots=True)
class Unit:
    """One record in its raw form (a JSONL line, a decoded record, an XML file's path), cheap to read and to pickle.

    Reading units is the only sequential work; ``parse_unit`` turns each into its ``SourceItem``, in a worker process
    when the indexer runs a pool. ``parse`` is a module-level function (it pickles by reference) called as
    ``parse(source, record, payload)``. ``end`` is how many bytes of the input are read once this unit is (exact for
    JSONL, an estimate for formats read whole or by batches), so a progress bar can show a share without counting.
    """

    parse: Callable[[str, int, Any], SourceItem]
    source: str
    record: int
    payload: Any
    end: int = 0


def parse_unit(unit: Unit) -> SourceItem:
    """The item of one unit: a paper or a reject."""
    return unit.parse(unit.source, unit.record, unit.payload)


def _given(source: str, record: int, item: SourceItem) -> SourceItem:
    return item


def item_unit(item: SourceItem, end: int = 0) -> Unit:
    """A unit for an item already made while reading (a file that cannot be read is a reject at once)."""
    return Unit(_given, item.source, item.record, item, end)


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
    return cast(BinaryIO, gzip.open(path, "rb")) if path.suffix == ".gz" else path.open("rb")


@contextmanager
def open_measured(path: Path) -> Iterator[tuple[BinaryIO, Callable[[], int]]]:
    """``open_binary`` and a function giving how many bytes of the file on disk were read so far (for ``*.gz`` the
    compressed bytes, as far as the decompressor has buffered them)."""
    with path.open("rb") as raw:
        if path.suffix == ".gz":
            with gzip.GzipFile(fileobj=raw, mode="rb") as fh:
                yield cast(BinaryIO, fh), raw.tell
        else:
            yield raw, raw.tell


def file_size(path: Path) -> int:
    """A file's size on disk, 0 when it cannot be read (reading it then reports why)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def data_suffix(path: Path) -> str:
    """The data suffix of a file, ignoring a trailing ``.gz``."""
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return Path(name).suffix.lower()


def is_hf_dataset_dir(path: Path) -> bool:
    """A folder written by ``datasets.save_to_disk`` (``state.json``/``dataset_info.json`` next to ``*.arrow``)."""
    return path.is_dir() and any((path / n).is_file() for n in ("state.json", "dataset_info.json")) and any(
        path.glob("*.arrow"))
