"""BioC collections (PMC's BioC API output, XML or JSON) → ``Paper``, one record per ``document``.

Passages carry ``section_type`` (TITLE, ABSTRACT, INTRO, …, FIG, TABLE, REF) and ``type`` (front, abstract,
title_1, paragraph, fig_caption, …) infons. The TITLE passage gives the title and, with the document infons, the
ids, year, journal and authors (``name_N`` infons); ABSTRACT text passages make the abstract; ``title_N`` passages
start sections; paragraphs join the open section until the section type changes or a new heading comes; captions of
one figure or table (same ``id`` infon) make one FIG/TABLE section; references and table bodies are left out.
Records are numbered by document, from 1 across the file; a file that cannot be parsed at all is record 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lxml import etree

from indexer.sources.base import (
    IdMap,
    SourceItem,
    Unit,
    author_list,
    clean_text,
    data_suffix,
    file_size,
    item_unit,
    join_paragraphs,
    normalize_pmcid,
    normalize_pmid,
    normalize_year,
    open_binary,
    open_measured,
    paper_item,
    person_name,
    reject_item,
)
from search.core.errors import InputError
from search.core.models import SECTION_TYPES, Paper, Section

_SKIPPED_TYPES = ("ref", "table", "table_foot", "table_footnote")
#: PMC's BioC author infons: ``name_0``, ``name_1``, … holding ``surname:Smith;given-names:Jane Q.``
_NAME_INFON = re.compile(r"name_(\d{1,6})")
_DOC_TAG = re.compile(rb"<document[\s>]")


def _text(passage: dict, where: str) -> str:
    text = passage.get("text")
    if text is None:  # text given sentence by sentence
        sentences = passage.get("sentences") or []
        if not isinstance(sentences, list):
            raise InputError(f"{where}.sentences is not a list", field=f"{where}.sentences")
        text = " ".join(s.get("text") or "" for s in sentences if isinstance(s, dict))
    if not isinstance(text, str):
        raise InputError(f"{where}.text is not a string", field=f"{where}.text")
    return clean_text(text)


def _authors(meta: dict[str, Any], warnings: list[str]) -> list[str]:
    """The authors of PMC's ``name_N`` infons, in N order, as ``Surname, Given``; a value without ``surname:`` or
    ``given-names:`` parts (a collaboration) as it is."""
    numbered = sorted((int(m.group(1)), v) for k, v in meta.items()
                      if (m := _NAME_INFON.fullmatch(str(k))) and isinstance(v, str))
    names = []
    for _, value in numbered:
        parts = {k.strip(): v for k, _, v in (p.partition(":") for p in value.split(";") if ":" in p)}
        if "surname" in parts or "given-names" in parts:
            names.append(person_name(parts.get("surname", ""), parts.get("given-names", "")))
        else:
            names.append(value)
    return author_list(names, warnings)


def _ids(doc: dict, meta: dict[str, Any], warnings: list[str]) -> tuple[str, str | None]:
    """(key, pmid): PMCID from the ``article-id_pmc`` infon or the document id, else ``PMID:<n>`` with a warning."""
    pmid = None
    if meta.get("article-id_pmid"):
        try:
            pmid = normalize_pmid(meta["article-id_pmid"])
        except InputError as exc:
            warnings.append(f"article-id_pmid: {exc.message}; left empty")
    if meta.get("article-id_pmc"):
        return normalize_pmcid(meta["article-id_pmc"]), pmid
    doc_id = str(doc.get("id") or "").strip()
    if doc_id and doc_id != pmid:
        try:
            return normalize_pmcid(doc_id), pmid
        except InputError:
            warnings.append(f"document id {doc_id!r} is not a PMCID")
    if pmid is None:
        raise InputError("document has no PMCID (id or article-id_pmc infon) and no PMID", field="pmcid")
    warnings.append(f"no PMCID: keyed as PMID:{pmid}")
    return f"PMID:{pmid}", pmid


def paper_from_document(doc: Any, source: str, record: int) -> SourceItem:
    """One BioC document (as a dict: ``id``, ``infons``, ``passages`` of ``{infons, text}``) → a paper or a reject."""
    if not isinstance(doc, dict):
        return reject_item(source, record, "document is not an object")
    passages = doc.get("passages")
    if not isinstance(passages, list):
        return reject_item(source, record, "document has no list of passages", field="passages")
    warnings: list[str] = []
    pmcid = None
    try:
        for i, p in enumerate(passages):
            if not isinstance(p, dict) or not isinstance(p.get("infons") or {}, dict):
                raise InputError(f"passages[{i}] is not an object with an infons object", field=f"passages[{i}]")
        front: dict[str, Any] = next((p["infons"] for p in passages
                                      if (p.get("infons") or {}).get("section_type") == "TITLE"
                                      or (p.get("infons") or {}).get("type") == "front"), {})
        meta = {**(doc.get("infons") or {}), **front}
        pmcid, pmid = _ids(doc, meta, warnings)
        year = None
        if meta.get("year"):
            try:
                year = normalize_year(meta["year"])
            except InputError as exc:
                warnings.append(f"year infon: {exc.message}; left empty")
        title, abstract, sections = _body(passages)
        paper = Paper(pmcid=pmcid, pmid=pmid, doi=clean_text(str(meta.get("article-id_doi") or "")) or None,
                      year=year, journal=clean_text(str(meta.get("journal") or meta.get("source") or "")) or None,
                      authors=_authors(meta, warnings),
                      title=title, abstract=join_paragraphs(abstract), sections=sections)
    except InputError as exc:
        return reject_item(source, record, exc.message, field=exc.field, pmcid=pmcid, warnings=warnings)
    return paper_item(source, record, paper, warnings)


def _body(passages: list[dict]) -> tuple[str, list[str], list[Section]]:
    title, abstract, sections = "", [], []
    current: Section | None = None
    heading: str | None = None
    captions: dict[str, Section] = {}
    for i, passage in enumerate(passages):
        infons = passage.get("infons") or {}
        stype = str(infons.get("section_type") or "").strip().upper()
        ptype = str(infons.get("type") or "").strip().lower()
        text = _text(passage, f"passages[{i}]")
        if not text or stype == "REF" or ptype in _SKIPPED_TYPES:
            continue
        if stype == "TITLE" or ptype == "front":
            title = title or text
        elif stype == "ABSTRACT":
            if not ptype.startswith(("abstract_title", "title")):
                abstract.append(text)
        elif ptype.startswith("title"):
            heading, current = text, None
        elif stype in ("FIG", "TABLE") or ptype.endswith("caption"):
            kind = stype if stype in ("FIG", "TABLE") else ("TABLE" if ptype.startswith("table") else "FIG")
            key = f"{kind}:{infons.get('id') or i}"
            if key in captions:
                captions[key].paragraphs[0] += " " + text
            else:
                captions[key] = Section(type=kind, paragraphs=[text])
                sections.append(captions[key])
            current = None
        else:
            kind = stype if stype in SECTION_TYPES else "OTHER"
            if current is None or current.type != kind or heading is not None:
                label = heading or (stype.title() if kind == "OTHER" and stype else None)
                current = Section(type=kind, title=label, paragraphs=[])
                sections.append(current)
                heading = None
            current.paragraphs.append(text)
    return title, abstract, sections


# ---------------------------------------------------------------------------------------------------------------
# file readers

def _xml_document(el) -> dict:
    """A ``<document>`` element as the dict shape of BioC JSON."""

    def infons(parent) -> dict[str, str]:
        return {i.get("key"): i.text or "" for i in parent.findall("infon")}

    passages = []
    for p in el.findall("passage"):
        text = p.find("text")
        passages.append({
            "infons": infons(p),
            "text": text.text or "" if text is not None else None,
            "sentences": [{"text": s.findtext("text") or ""} for s in p.findall("sentence")],
        })
    return {"id": clean_text(el.findtext("id") or ""), "infons": infons(el), "passages": passages}


def _parse_document(source: str, record: int, doc: Any) -> SourceItem:
    return paper_from_document(doc, source, record)


def _xml_units(path: Path) -> Iterator[Unit]:
    """Documents as the dicts of BioC JSON, parsed incrementally (``end``: the bytes the XML parser has read)."""
    src, number, read = str(path), 0, 0
    try:
        with open_measured(path) as (fh, tell):
            for _, el in etree.iterparse(fh, events=("end",), tag="document", recover=False,
                                         resolve_entities=False, no_network=True, huge_tree=True):
                number += 1
                read = tell()
                yield Unit(_parse_document, src, number, _xml_document(el), read)
                el.clear()
                while el.getprevious() is not None:
                    del el.getparent()[0]
    except etree.XMLSyntaxError as exc:
        yield item_unit(reject_item(src, number + 1, f"malformed XML: {exc}"), read)
    except (OSError, EOFError) as exc:
        yield item_unit(reject_item(src, number + 1 if number else 0, f"cannot read file: {exc}"), read)


def _json_documents(path: Path) -> list:
    with open_binary(path) as fh:
        data = json.loads(fh.read().decode("utf-8-sig"))
    collections = data if isinstance(data, list) else [data]
    documents: list = []
    for c in collections:
        if isinstance(c, dict) and isinstance(c.get("documents"), list):
            documents.extend(c["documents"])
        elif isinstance(c, dict) and "passages" in c:
            documents.append(c)
        else:
            raise ValueError("expected a BioC collection (an object with 'documents'), or a list of collections")
    return documents


def _json_units(path: Path) -> Iterator[Unit]:
    try:
        documents = _json_documents(path)
    except (OSError, EOFError, ValueError) as exc:
        yield item_unit(reject_item(str(path), 0, f"cannot read BioC JSON: {exc}"))
        return
    size = file_size(path)
    for number, doc in enumerate(documents, 1):
        yield Unit(_parse_document, str(path), number, doc, size * number // len(documents))


def units(path: Path, id_map: IdMap | None = None) -> Iterator[Unit]:
    """Every document of one BioC XML or JSON file (``id_map`` is not used: BioC documents carry their ids)."""
    yield from (_json_units(path) if data_suffix(path) == ".json" else _xml_units(path))


def count(path: Path) -> int | None:
    try:
        if data_suffix(path) == ".json":
            return len(_json_documents(path))
        with open_binary(path) as fh:
            return len(_DOC_TAG.findall(fh.read()))
    except (OSError, EOFError, ValueError):
        return None
