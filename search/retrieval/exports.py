"""Search results as files: CSV and TSV for a spreadsheet, RIS and BibTeX for a reference manager, JSON Lines for a
program, TREC run format for evaluation (docs/search.md, "Exports", lists every field).

Each format is written record by record from an iterator of hits, so an export of any size streams in bounded
memory. What the text holds is corpus data, so every format escapes it: a CSV/TSV cell that a spreadsheet would run
as a formula (``=``, ``+``, ``-``, ``@`` first) starts with ``'``; TSV cells lose tabs and line breaks; RIS values
are one line each; BibTeX values have their special characters escaped and their braces balanced.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Iterator
from typing import Literal

from search.core.errors import InvalidRequest
from search.core.models import PaperHit, PassageHit
from search.core.names import TREC_NAME

Format = Literal["csv", "tsv", "ris", "bibtex", "jsonl", "trec"]
FORMATS: tuple[str, ...] = ("csv", "tsv", "ris", "bibtex", "jsonl", "trec")
MEDIA_TYPES: dict[str, str] = {
    "csv": "text/csv; charset=utf-8", "tsv": "text/tab-separated-values; charset=utf-8",
    "ris": "application/x-research-info-systems; charset=utf-8", "bibtex": "application/x-bibtex; charset=utf-8",
    "jsonl": "application/x-ndjson", "trec": "text/plain; charset=utf-8"}
#: ``Accept`` media types that ask for a format (``text/plain`` is not one: TREC is asked for by name)
ACCEPTED: dict[str, str] = {"text/csv": "csv", "text/tab-separated-values": "tsv",
                            "application/x-research-info-systems": "ris", "application/x-bibtex": "bibtex",
                            "text/x-bibtex": "bibtex", "application/x-ndjson": "jsonl", "application/jsonl": "jsonl"}
EXTENSIONS = {"csv": "csv", "tsv": "tsv", "ris": "ris", "bibtex": "bib", "jsonl": "jsonl", "trec": "run"}
PAPER_COLUMNS = ("rank", "pmcid", "pmid", "doi", "year", "journal", "title", "score")
PASSAGE_COLUMNS = ("rank", "passage_id", "pmcid", "section", "start", "end", "score", "title", "text")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")
_BIB_ESCAPES = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "%": r"\%", "&": r"\&", "$": r"\$",
                "#": r"\#", "_": r"\_", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def check_format(fmt: str | None) -> Format | None:
    if fmt is None:
        return None
    if fmt not in FORMATS:
        raise InvalidRequest(f"Unknown export format {fmt[:40]!r}; formats are {list(FORMATS)}.",
                             details={"field": "format", "valid": list(FORMATS)})
    return fmt  # type: ignore[return-value]


def format_from_accept(accept: str | None) -> Format | None:
    """The export format an ``Accept`` header asks for (the first listed type that names one), else None (JSON)."""
    for part in (accept or "").split(","):
        kind = part.split(";", 1)[0].strip().lower()
        if kind in ACCEPTED:
            return ACCEPTED[kind]  # type: ignore[return-value]
    return None


def check_trec_name(value: str, field: str) -> str:
    if not TREC_NAME.fullmatch(value):
        raise InvalidRequest(f"{field} must be 1-64 letters, digits, '_', '.', ':' or '-' (a TREC run has one token "
                             "there)", details={"field": field, "pattern": TREC_NAME.pattern})
    return value


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA) else text


def _tsv_cell(value: object) -> str:
    return " ".join(_cell(value).replace("\t", " ").split("\n")).replace("\r", " ")


def _line(text: str | None) -> str:
    return " ".join((text or "").split())


def _bib(text: str | None) -> str:
    return "".join(_BIB_ESCAPES.get(c, c) for c in _line(text))


def _key(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_:-]", "_", value)[:100] or "hit"


def _url(pmcid: str) -> str | None:
    return f"https://www.ncbi.nlm.nih.gov/pmc/articles/{pmcid}/" if re.fullmatch(r"PMC\d+", pmcid) else None


def _delimited(rows: Iterable[list[object]], columns: tuple[str, ...], fmt: str) -> Iterator[str]:
    if fmt == "tsv":
        yield "\t".join(columns) + "\n"
        for row in rows:
            yield "\t".join(_tsv_cell(v) for v in row) + "\n"
        return
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(columns)   # the first piece holds the header and the first row; an empty export, the header
    for row in rows:
        writer.writerow([_cell(v) for v in row])
        yield buf.getvalue()
        buf.seek(0)
        buf.truncate()
    if buf.tell():
        yield buf.getvalue()


def papers(hits: Iterable[PaperHit], fmt: Format, *, qid: str = "1", tag: str = "flysift") -> Iterator[str]:
    """Paper hits, in rank order, as ``fmt`` (text pieces to write or stream one after the other)."""
    ranked = ((i, h) for i, h in enumerate(hits, start=1))
    if fmt in ("csv", "tsv"):
        yield from _delimited(([i, h.pmcid, h.pmid, h.doi, h.year, h.journal, h.title, round(h.score, 4)]
                               for i, h in ranked), PAPER_COLUMNS, fmt)
    elif fmt == "jsonl":
        for i, h in ranked:
            yield json.dumps({"rank": i, **h.model_dump(exclude_none=True, exclude_defaults=True),
                              "pmcid": h.pmcid, "score": h.score}, ensure_ascii=False) + "\n"
    elif fmt == "trec":
        for i, h in ranked:
            yield f"{qid} Q0 {_key(h.pmcid)} {i} {h.score:.6f} {tag}\n"
    elif fmt == "ris":
        for i, h in ranked:
            yield _ris(h, i)
    else:
        for i, h in ranked:
            yield _bibtex(h, i)


def passages(hits: Iterable[PassageHit], fmt: Format, *, qid: str = "1", tag: str = "flysift") -> Iterator[str]:
    """Passage hits (with their papers' titles where known), in rank order, as ``fmt``. RIS and BibTeX write one
    record per passage: its paper, with the passage id and text in the note."""
    ranked = ((i, h) for i, h in enumerate(hits, start=1))
    if fmt in ("csv", "tsv"):
        yield from _delimited(([i, h.passage_id, h.pmcid, h.section_type, h.start, h.end, round(h.score, 4),
                                h.title, h.text] for i, h in ranked), PASSAGE_COLUMNS, fmt)
    elif fmt == "jsonl":
        for i, h in ranked:
            yield json.dumps({"rank": i, **h.model_dump(exclude_none=True, exclude_defaults=True),
                              "passage_id": h.passage_id, "score": h.score}, ensure_ascii=False) + "\n"
    elif fmt == "trec":
        for i, h in ranked:
            yield f"{qid} Q0 {_key(h.passage_id)} {i} {h.score:.6f} {tag}\n"
    else:
        for i, h in ranked:
            paper = PaperHit(pmcid=h.pmcid, title=h.title or "", abstract="", year=h.year, score=h.score)
            note = f"passage {h.passage_id} ({h.section_type}): {h.text}"
            yield _ris(paper, i, note) if fmt == "ris" else _bibtex(paper, i, note, key=h.passage_id)


def _ris(h: PaperHit, rank: int, note: str | None = None) -> str:
    lines = ["TY  - JOUR", f"TI  - {_line(h.title)}"]
    if h.journal:
        lines.append(f"JO  - {_line(h.journal)}")
    if h.year is not None:
        lines.append(f"PY  - {h.year}")
    if h.abstract:
        lines.append(f"AB  - {_line(h.abstract)}")
    if h.doi:
        lines.append(f"DO  - {_line(h.doi)}")
    if h.pmid:
        lines.append(f"AN  - {_line(h.pmid)}")
    lines.append(f"C2  - {_line(h.pmcid)}")
    if url := _url(h.pmcid):
        lines.append(f"UR  - {url}")
    lines.append(f"N1  - {_line(note)}" if note else f"N1  - flysift rank {rank}, score {h.score:.4f}")
    return "\n".join(lines) + "\nER  - \n\n"


def _bibtex(h: PaperHit, rank: int, note: str | None = None, key: str | None = None) -> str:
    fields = [("title", _bib(h.title))]
    if h.journal:
        fields.append(("journal", _bib(h.journal)))
    if h.year is not None:
        fields.append(("year", str(h.year)))
    if h.doi:
        fields.append(("doi", _bib(h.doi)))
    if h.pmid:
        fields.append(("pmid", _bib(h.pmid)))
    fields.append(("pmcid", _bib(h.pmcid)))
    if url := _url(h.pmcid):
        fields.append(("url", url))
    fields.append(("note", _bib(note) if note else f"flysift rank {rank}, score {h.score:.4f}"))
    body = ",\n".join(f"  {k} = {{{v}}}" for k, v in fields)
    return f"@article{{{_key(key or h.pmcid)},\n{body}\n}}\n\n"
