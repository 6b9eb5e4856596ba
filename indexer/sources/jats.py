"""PMC JATS/NXML articles (one ``<article>`` per file) → ``Paper``.

Text is the source's character data with inline markup dropped, a space where block-level elements meet, and
whitespace runs collapsed; ``<tex-math>`` (which duplicates MathML) is skipped, and brackets left empty by empty
citation ``<xref/>``s are removed. In pretty-printed files a line break plus indentation before a tag is layout, not
a space (spaces the author typed before it stay), so ``CO\n\t<sub>2</sub>`` reads ``CO2``. Body sections are typed
by ``sec-type``, then by heading, then by the parent's type, else OTHER; nested sections are flattened in document
order. Figure and table captions become FIG/TABLE sections after the body and back matter (acknowledgements,
appendices, glossary). Files without a PMCID take it from the id map, else are keyed ``PMID:<n>`` (or ``DOI:<doi>``
when there is no PMID either) with a warning.

Supplementary files: the files an article names (``<supplementary-material>``) and, when its folder holds no other
article or it comes as a PMC ``.tar.gz`` package, the other files beside it, become the paper's registry and
supplement passages (``indexer.supplements``; docs/supplements.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lxml import etree

from indexer.sources.base import (
    IdMap,
    SourceItem,
    Unit,
    clean_text,
    file_size,
    join_paragraphs,
    normalize_pmcid,
    normalize_pmid,
    normalize_year,
    paper_item,
    reject_item,
)
from indexer.supplements.files import collect, named_files
from indexer.supplements.limits import DEFAULT
from indexer.supplements.package import ARTICLE_SUFFIXES, Package, folder_package, tar_package
from search.core.errors import InputError
from search.core.models import Paper, Section

_PARSER = etree.XMLParser(recover=False, resolve_entities=False, no_network=True, load_dtd=False, huge_tree=True)

#: Elements whose edges separate words; every other element is inline and joins its text to its neighbours'.
_BLOCK = frozenset("""p title label caption list list-item def-list def-item term def disp-quote disp-formula
    table thead tbody tfoot tr td th break sec boxed-text statement verse-group verse-line attrib fn fig table-wrap
    supplementary-material media abstract app app-group ack glossary array mtr mtd mlabeledtr""".split())
#: Never part of the text: LaTeX copies of formulas, identifiers and alternative descriptions.
_SKIP = frozenset({"tex-math", "object-id", "alt-text", "long-desc"})
_FLOATS = frozenset({"fig", "fig-group", "table-wrap", "table-wrap-group"})
#: Containers walked as their own sections.
_CONTAINERS = frozenset({"sec", "boxed-text", "app", "app-group", "ack", "glossary"})
#: Children of a section that are headings or apparatus, not paragraphs.
_NOT_PARAGRAPHS = frozenset({"title", "label", "caption", "sec-meta", "alt-title", "ref-list", "fn-group", "notes",
                             "object-id"})
_TAG_TYPES = {"ack": "ACK_FUND", "app": "APPENDIX", "app-group": "APPENDIX", "glossary": "ABBR"}
_SEC_TYPES = {"intro": "INTRO", "introduction": "INTRO", "background": "INTRO", "materials": "METHODS",
              "methods": "METHODS", "method": "METHODS", "results": "RESULTS", "discussion": "DISCUSS",
              "conclusions": "CONCL", "conclusion": "CONCL", "cases": "CASE", "case": "CASE",
              "supplementary-material": "SUPPL", "supplementary-materials": "SUPPL", "abbreviations": "ABBR"}
_HEADINGS = [(re.compile(p), t) for p, t in [
    (r"introduction|background|intro", "INTRO"),
    (r"results? ?(and|&|/) ?discussions?", "RESULTS"),
    (r"results?|findings", "RESULTS"),
    (r"(general )?discussions?( and conclusions?)?", "DISCUSS"),
    (r"conclusions?|concluding remarks|summary( and conclusions?)?", "CONCL"),
    (r"((materials?|patients|subjects|methods?) (and|&) )?(materials?|methods?|methodology)|experimental"
     r"( procedures?| section| design)?|online methods", "METHODS"),
    (r"acknowledge?ments?|funding( information)?|financial (support|disclosure)", "ACK_FUND"),
    (r"authors?'?s?'? contributions?", "AUTH_CONT"),
    (r"competing (financial )?interests?|conflicts? of interests?|declaration of interests?", "COMP_INT"),
    (r"(list of )?abbreviations( used)?", "ABBR"),
    (r"supplementary (material|materials|data|information)|supporting information|additional (data )?files?",
     "SUPPL"),
    (r"appendix( \w+)?|appendices", "APPENDIX"),
]]
_NUMBERING = re.compile(r"^(\d+(\.\d+)*\.?|([ivx]+|[a-h])[.)])\s+")
#: Main abstracts and author summaries; other typed abstracts (toc, teaser, synopsis…) are left out.
_ABSTRACT_TYPES = {None, "summary", "author-summary"}

_EMPTY_XREF = "\x00"
_EMPTY_CITATION = re.compile(r"\s*[\[(]\s*\x00(?:[\s,;\u2013\u2014-]*\x00)*\s*[\])]")
#: A line break plus indentation right before a tag: the layout of pretty-printed XML (``CO\n\t\t<sub>2</sub>``).
_INDENT = re.compile(r"\n[\t ]+\Z")


def _name(el) -> str | None:
    """Local tag name, None for comments and processing instructions."""
    tag = el.tag
    return tag.rpartition("}")[2] if isinstance(tag, str) else None


def _pieces(el, out: list[str], skip: frozenset[str]) -> None:
    name = _name(el)
    if name is None or name in skip:
        return
    block = name in _BLOCK
    if block:
        out.append(" ")
    start = len(out)
    if el.text:
        out.append(el.text)
    for child in el:
        if out and (m := _INDENT.search(out[-1])):
            out[-1] = out[-1][:m.start()]
        _pieces(child, out, skip)
        if child.tail:
            out.append(child.tail)
    if name == "xref" and not "".join(out[start:]).strip():
        out.append(_EMPTY_XREF)
    if block:
        out.append(" ")


def text_of(el, skip: frozenset[str] = _SKIP | _FLOATS) -> str:
    """Flattened text of an element (figures and tables inside it left out)."""
    if el is None:
        return ""
    out: list[str] = []
    _pieces(el, out, skip)
    text = "".join(out)
    if _EMPTY_XREF in text:
        text = _EMPTY_CITATION.sub("", text).replace(_EMPTY_XREF, "")
    return clean_text(text)


def heading_type(heading: str) -> str | None:
    """Section type named by a heading (``Materials and methods`` → METHODS), None when it names none."""
    h = _NUMBERING.sub("", clean_text(heading).lower().replace("\u2019", "'")).rstrip(".:")
    return next((t for pattern, t in _HEADINGS if pattern.fullmatch(h)), None)


def _heading(el) -> str | None:
    title = el.find("title")
    if title is None and _name(el) == "boxed-text":
        title = el.find("caption/title")
    return text_of(title) or None


def _classify(el, heading: str | None) -> str | None:
    name = _name(el)
    if name in _TAG_TYPES:
        return _TAG_TYPES[name]
    for part in (el.get("sec-type") or "").lower().split("|"):
        if kind := _SEC_TYPES.get(part.strip()):
            return kind
    return heading_type(heading) if heading else None


def _walk(el, inherited: str, sections: list[Section], captions: list[Section]) -> None:
    """Append ``el``'s paragraphs as sections (split around nested containers) and collect its captions."""
    title = _heading(el)
    kind = _classify(el, title) or inherited
    current: list[str] = []

    def flush() -> None:
        if current:
            sections.append(Section(type=kind, title=title, paragraphs=current.copy()))
            current.clear()

    for child in el:
        name = _name(child)
        if name is None or name in _NOT_PARAGRAPHS:
            continue
        if name in _CONTAINERS:
            flush()
            _walk(child, kind, sections, captions)
            continue
        captions.extend(filter(None, map(_caption, child.iter("fig", "table-wrap"))))
        if name in _FLOATS:
            continue
        if name in ("list", "def-list"):
            current.extend(t for item in child if _name(item) in ("list-item", "def-item") and (t := text_of(item)))
        elif text := text_of(child):
            current.append(text)
    flush()


def _caption(el) -> Section | None:
    text = text_of(el.find("caption"))
    if not text:
        return None
    return Section(type="FIG" if _name(el) == "fig" else "TABLE", title=text_of(el.find("label")) or None,
                   paragraphs=[text])


def _pub_rank(date) -> int:
    kind = (date.get("pub-type") or date.get("date-type") or "").lower()
    form = (date.get("publication-format") or "").lower()
    return 0 if kind == "epub" or form == "electronic" else 1 if kind == "ppub" or form == "print" else 2


def _year(meta, warnings: list[str]) -> int | None:
    """Year of the electronic, else print, else any publication date."""
    for date in sorted(meta.findall("pub-date"), key=_pub_rank):
        value = date.findtext("year")
        if value and value.strip():
            try:
                return normalize_year(value)
            except InputError as exc:
                warnings.append(f"pub-date: {exc.message}; year left empty")
    return None


def _ids(meta) -> dict[str, str]:
    ids: dict[str, str] = {}
    for aid in meta.findall("article-id"):
        kind = {"pmc": "pmcid", "pmcid": "pmcid", "pmid": "pmid", "doi": "doi"}.get(aid.get("pub-id-type", ""))
        if kind and kind not in ids and (value := clean_text(aid.text or "")):
            ids[kind] = value
    return ids


def paper_from_article(root, path: Path, mapped: tuple[str | None, str | None] | None) -> SourceItem:
    """The paper in one parsed ``<article>``; ``mapped`` is the id map's (PMCID, PMID) for the file, if any."""
    src = str(path)
    if _name(root) != "article":
        return reject_item(src, 1, f"root element is <{_name(root)}>, expected <article>")
    meta = root.find("front/article-meta")
    if meta is None:
        return reject_item(src, 1, "no <front>/<article-meta>", field="article-meta")
    warnings: list[str] = []
    ids = _ids(meta)
    try:
        pmcid = normalize_pmcid(ids["pmcid"]) if "pmcid" in ids else None
    except InputError as exc:
        return reject_item(src, 1, f"article-id pmc: {exc.message}", field="pmcid")
    pmid = None
    if "pmid" in ids:
        try:
            pmid = normalize_pmid(ids["pmid"])
        except InputError as exc:
            warnings.append(f"article-id pmid: {exc.message}; left empty")
    mapped_pmcid, mapped_pmid = mapped or (None, None)
    if pmcid and mapped_pmcid and mapped_pmcid != pmcid:
        warnings.append(f"id map gives {mapped_pmcid} for this file but the article says {pmcid}; kept {pmcid}")
    pmcid = pmcid or mapped_pmcid
    pmid = pmid or mapped_pmid
    if pmcid is None:
        if pmid is None and "doi" not in ids:
            return reject_item(src, 1, "no PMCID, PMID or DOI in the article, and none in the id map",
                               field="pmcid", warnings=warnings)
        pmcid = f"PMID:{pmid}" if pmid else f"DOI:{ids['doi']}"
        warnings.append(f"no PMCID: keyed as {pmcid}")

    journal_meta = root.find("front/journal-meta")
    journal = None
    if journal_meta is not None:
        journal = text_of(journal_meta.find(".//journal-title")) or clean_text(
            journal_meta.findtext("journal-id[@journal-id-type='nlm-ta']") or "") or None
    abstract_parts: list[Section] = []
    for abstract in meta.findall("abstract"):
        if abstract.get("abstract-type") in _ABSTRACT_TYPES:
            _walk(abstract, "ABSTRACT", abstract_parts, [])
    sections: list[Section] = []
    captions: list[Section] = []
    for part in (root.find("body"), root.find("back")):
        if part is not None:
            _walk(part, "OTHER", sections, captions)
    floats = root.find("floats-group")
    if floats is not None:
        captions.extend(filter(None, map(_caption, floats.iter("fig", "table-wrap"))))
    paper = Paper(pmcid=pmcid, pmid=pmid, doi=ids.get("doi"), year=_year(meta, warnings), journal=journal,
                  title=text_of(meta.find("title-group/article-title")),
                  abstract=join_paragraphs(p for s in abstract_parts for p in s.paragraphs),
                  sections=sections + captions)
    return paper_item(src, 1, paper, warnings)


@dataclass(frozen=True)
class Payload:
    """What a JATS unit carries to the worker: the id map's (PMCID, PMID) for the file, and whether its folder is
    the package of this one article (then every other file in it is the article's)."""

    mapped: tuple[str | None, str | None] | None
    single: bool = False


def _with_supplements(item: SourceItem, root, package: Package | None) -> SourceItem:
    """The paper with its supplementary files' registry, and their passages beside it."""
    if item.paper is None:
        return item
    named = named_files(root)
    if not named and (package is None or not package.owns_all or not package.files):
        return item
    files, passages = collect(item.paper.pmcid, item.paper.year, named, package)
    item.paper.supplements = files
    item.supplement_passages = passages
    if package is not None:
        item.warnings += [f"supplements: {p}" for p in package.problems]
    item.warnings += [f"supplement {f.index} ({f.name[:80]}): {f.status}: {f.reason}" for f in files
                      if f.status in ("refused", "corrupt", "encrypted", "too_large")]
    return item


def _parse_file(source: str, record: int, payload: Payload | tuple[str | None, str | None] | None) -> SourceItem:
    """The one article of a JATS file with the supplements of its folder; malformed XML is a reject quoting the
    parser's message and line."""
    p = payload if isinstance(payload, Payload) else Payload(payload)
    try:
        root = etree.parse(source, _PARSER).getroot()
    except etree.XMLSyntaxError as exc:
        return reject_item(source, record, f"malformed XML: {exc}")
    except OSError as exc:
        return reject_item(source, record, f"cannot read file: {exc}")
    path = Path(source)
    item = paper_from_article(root, path, p.mapped)
    return _with_supplements(item, root, folder_package(path, p.single))


def _parse_package(source: str, record: int, payload: Payload) -> SourceItem:
    """The article of a PMC ``.tar.gz`` package (its first ``.nxml``/``.xml`` member) with the package's other files
    as its supplements."""
    with tar_package(Path(source), DEFAULT) as (xml, name, package):
        if xml is None:
            why = "; ".join(package.problems) or "no article XML (.nxml or .xml member) in the package"
            return reject_item(source, record, why)
        try:
            root = etree.fromstring(xml, _PARSER)
        except etree.XMLSyntaxError as exc:
            return reject_item(source, record, f"member {name}: malformed XML: {exc}")
        item = paper_from_article(root, Path(source), payload.mapped)
        return _with_supplements(item, root, package)


def is_package(path: Path) -> bool:
    """A PMC package: ``.tar.gz``, ``.tgz`` or ``.tar``."""
    name = path.name.lower()
    return name.endswith((".tar.gz", ".tgz", ".tar"))


def _articles_beside(path: Path) -> int:
    try:
        return sum(1 for e in os.scandir(path.parent) if e.name.lower().endswith(ARTICLE_SUFFIXES)
                   and not e.name.startswith("."))
    except OSError:
        return 1


def units(path: Path, id_map: IdMap | None = None) -> Iterator[Unit]:
    """One unit per file: the file (and its supplements) is read and parsed where the unit is parsed."""
    mapped = id_map.lookup(path.name) if id_map else None
    if is_package(path):
        yield Unit(_parse_package, str(path), 1, Payload(mapped), file_size(path))
        return
    single = _articles_beside(path) == 1
    size = file_size(path)
    if single:   # the unit's share of the input: the article and its files (the progress estimate)
        size += sum(f.size or 0 for f in folder_package(path, True).files.values())
    yield Unit(_parse_file, str(path), 1, Payload(mapped, single), size)


def count(path: Path) -> int:
    return 1
