"""What the cluster stores: ``search.text.analysis`` as custom analyzers, the strict field mappings of papers, passages,
builds and terms, and the conversion of a paper to its document and back.

Analysis is the pattern tokenizers, lowercase and Snowball English (the analysis-common module), scored with BM25
(k1=1.2, b=0.75 unless the collection sets its own) as in the embedded engine, so that both rank alike
(``tests/engines/test_parity.py``).

Papers are searched on one field, ``text`` (as the embedded engine's layout 5): title, abstract and body each copy
themselves into it once (``copy_to``), and a document carries the further repetitions its collection's field weights
ask for (title 2: one more title, kept in ``_source`` with the document: excluding it would make the cluster keep a
second, full copy of every document as ``_recovery_source``, +54 % papers index and twice the fetch time at 1,000
papers). Title, abstract and body are kept in ``_source`` only, not indexed (paper snippets are highlighted from the
stored text, as in the embedded engine). The
papers index's ``_meta`` records the layout and the weights it was written with, what the engine reports and checks
before resuming a build. Papers indices from before ``text`` index each field in both views and are searched per
field.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from search.core.models import Paper, Passage, Section
from search.core.query import BM25_B, BM25_K1, recorded_weights
from search.text import analysis
from search.text.term_search import FIELD_BOOSTS as TERM_FIELDS


def new_version() -> str:
    """The version part of a new versioned index's name (papers, passages, vectors, terms): UTC time, so versions
    sort oldest first, and a random tail, so two builds started in one second differ."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def similarity(k1: float = BM25_K1, b: float = BM25_B) -> dict[str, Any]:
    """An index's ``similarity`` setting: BM25 with the collection's k1 and b (read back by ``read_similarity``)."""
    return {"default": {"type": "BM25", "k1": k1, "b": b}}


def read_similarity(index_settings: dict[str, Any]) -> tuple[float, float] | None:
    """(k1, b) of an index from its ``_settings`` (values come back as strings); None when it has no BM25 default
    similarity of ours (the cluster's own defaults apply)."""
    sim = index_settings.get("settings", {}).get("index", {}).get("similarity", {}).get("default", {})
    try:
        return float(sim["k1"]), float(sim["b"])
    except (KeyError, TypeError, ValueError):
        return None


#: the similarity of indices without a collection (ontology terms): the embedded engine's BM25 parameters
SIMILARITY = similarity()


def analysis_settings() -> dict[str, Any]:
    """``search.text.analysis`` as Elasticsearch/OpenSearch analyzers (pattern tokenizer, snowball: analysis-common)."""
    return {
        "tokenizer": {
            "fs_word_tok": {"type": "pattern", "pattern": analysis.WORD_PATTERN, "group": 0},
            "fs_symbol_tok": {"type": "pattern", "pattern": analysis.SYMBOL_PATTERN, "group": 0},
        },
        # tantivy's remove_long drops tokens of MAX_TOKEN_CHARS bytes or more; `length` counts characters
        "filter": {"fs_max_len": {"type": "length", "max": analysis.MAX_TOKEN_CHARS - 1},
                   "fs_stem": {"type": "snowball", "language": "English"}},
        "analyzer": {
            analysis.WORD_ANALYZER: {"type": "custom", "tokenizer": "fs_word_tok",
                                     "filter": ["fs_max_len", "lowercase", "fs_stem"]},
            analysis.SYMBOL_ANALYZER: {"type": "custom", "tokenizer": "fs_symbol_tok", "filter": ["fs_max_len"]},
        },
    }


def _text_field() -> dict[str, Any]:
    """A text field in both views: the word view is the field itself, the symbol view its ``.s`` sub-field."""
    return {"type": "text", "analyzer": analysis.WORD_ANALYZER, "index_options": "offsets",
            "fields": {"s": {"type": "text", "analyzer": analysis.SYMBOL_ANALYZER, "index_options": "offsets"}}}


_KEYWORD = {"type": "keyword"}
_INT = {"type": "integer"}
_STORED_INT = {"type": "integer", "index": False, "doc_values": False}

#: the papers layout whose indices hold the one ``text`` field (``_meta.layout``); older ones are searched per field
ONE_FIELD_LAYOUT = 5
#: the papers layout that also indexes title and abstract on their own (``title:``/``abstract:`` of the query
#: language; scored only when a query names them)
FIELDED_LAYOUT = 6
#: the papers layout new indices are written in: 7 adds ``authors`` (in ``_source`` only; the strict mapping of an
#: older index cannot take it, so its builds are not resumed; its papers are read with no authors)
PAPERS_LAYOUT = 7
#: what a paper hit reads of a paper's ``_source``
HEAD_FIELDS = ["pmcid", "title", "abstract", "year", "journal", "pmid", "doi", "authors"]
_STORED_KEYWORD = {"type": "keyword", "index": False, "doc_values": False}


def paper_mapping(repeats: dict[str, int]) -> dict[str, Any]:
    """The papers mapping of a collection whose field weights are ``repeats`` (``Bm25Params.repeats``)."""
    copied = {"type": "text", "index": False, "copy_to": "text"}   # in _source, searched through ``text``
    text, supp = _text_field(), _text_field()
    for spec in (text, text["fields"]["s"], supp, supp["fields"]["s"]):
        spec["index_options"] = "positions"   # searched, never highlighted: no offsets
    fielded = {**_text_field(), "copy_to": "text"}   # title:, abstract: (layout 6), and copied into ``text``
    for spec in (fielded, fielded["fields"]["s"]):
        spec["index_options"] = "positions"
    return {"dynamic": "strict",
            "_meta": {"layout": PAPERS_LAYOUT, "field_weights": dict(repeats), "supplements": True},
            "properties": {
                "pmcid": _KEYWORD, "pmid": _KEYWORD, "doi": _KEYWORD, "year": _INT, "journal": _KEYWORD,
                "authors": _STORED_KEYWORD,
                "title": fielded, "abstract": fielded, "body": copied, "text": text, "section_types": _KEYWORD,
                # section structure without the text: paragraph lengths cut ``body`` back into paragraphs
                "sections": {"type": "object", "enabled": False},
                # the supplement passages' text (one value each: no phrase spans two) and the files' registry
                "supp": supp, "supplements": {"type": "object", "enabled": False},
            }}


def written_layout(mapping: dict[str, Any]) -> int | None:
    """The layout a papers index was written in (``_meta.layout``), None before layouts were recorded."""
    layout = (mapping.get("mappings", {}).get("_meta") or {}).get("layout")
    return layout if isinstance(layout, int) else None


def has_supplements(mapping: dict[str, Any]) -> bool:
    """Whether a papers index (``GET <index>/_mapping``'s entry) has the ``supp`` field."""
    return (mapping.get("mappings", {}).get("_meta") or {}).get("supplements") is True


def written_weights(mapping: dict[str, Any]) -> dict[str, float] | None:
    """The field weights a papers index was written with (from ``GET <index>/_mapping``'s entry), or None for an
    index before the one-field layout (searched per field: ``Bm25Params.per_field``)."""
    meta = mapping.get("mappings", {}).get("_meta") or {}
    layout = meta.get("layout")
    if not isinstance(layout, int) or layout < ONE_FIELD_LAYOUT:
        return None
    return recorded_weights(meta.get("field_weights"))
PASSAGE_MAPPING: dict[str, Any] = {"dynamic": "strict", "properties": {
    "id": _KEYWORD, "pmcid": _KEYWORD, "year": _INT, "section_type": _KEYWORD, "section_index": _STORED_INT,
    "paragraph_index": _STORED_INT, "start": _STORED_INT, "end": _STORED_INT, "text": _text_field(),
    # supplement passages only: ``source: supplement``, their place and rows (``supplement``, kept as sent) and the
    # place again as fields a read filters and sorts on
    "source": _KEYWORD, "supplement": {"type": "object", "enabled": False},
    "supp_file": _INT, "supp_part": _INT, "supp_first": _INT, "supp_last": _INT, "supp_chunk": _INT,
}}
BUILDS_MAPPING: dict[str, Any] = {"dynamic": "strict", "properties": {
    "collection": _KEYWORD, "fingerprint": _KEYWORD, "status": _KEYWORD, "created": {"type": "double"},
    "updated": {"type": "double"}, "state": {"type": "object", "enabled": False},
}}


def term_mapping() -> dict[str, Any]:
    """An ontology's term index: the fields of ``search.text.term_search`` (labels in the word view, keys exact)."""
    word = {"type": "text", "analyzer": analysis.WORD_ANALYZER}
    return {"dynamic": "strict", "properties": {
        "id": _KEYWORD, "ids": _KEYWORD, "key": _KEYWORD, "syn_key": _KEYWORD, "namespace": _KEYWORD,
        "aspect": _KEYWORD, "obsolete": {"type": "boolean"}, **{f: word for f in TERM_FIELDS}}}



def paper_doc(p: Paper, repeats: dict[str, int] | None = None, supp: list[str] | None = None) -> dict[str, Any]:
    """A paper's document: ``copy_to`` writes each field into ``text`` once, ``text`` carries the repetitions
    beyond that; ``supp`` holds its supplement passages' texts."""
    doc = p.model_dump(exclude={"sections", "supplements"}, exclude_none=True)
    if p.supplements:
        doc["supplements"] = [f.model_dump(exclude_none=True) for f in p.supplements]
    if supp:
        doc["supp"] = supp
    doc["body"] = p.body_text()
    extra = [doc.get(f, "") for f, n in (repeats or {}).items() for _ in range(n - 1)]
    if extra := [t for t in extra if t]:
        doc["text"] = extra
    doc["section_types"] = p.section_types()
    doc["sections"] = [{"type": s.type, "title": s.title, "lengths": [len(x) for x in s.paragraphs]}
                       for s in p.sections]
    return doc


def paper_from_doc(doc: dict[str, Any]) -> Paper:
    """Inverse of ``paper_doc``: ``body`` is the paragraphs joined by blank lines, cut by the stored lengths."""
    body, pos, sections = doc.pop("body", ""), 0, []
    for s in doc.pop("sections", []):
        paragraphs = []
        for n in s["lengths"]:
            paragraphs.append(body[pos:pos + n])
            pos += n + 2
        sections.append(Section(type=s["type"], title=s.get("title"), paragraphs=paragraphs))
    doc.pop("section_types", None)
    doc.pop("text", None)
    doc.pop("supp", None)
    return Paper(**doc, sections=sections)


def passage_doc(p: Passage) -> bytes:
    """A passage's document: an article passage as before (no ``source``), a supplement passage with its place
    as filterable fields too."""
    if p.source == "paper":
        return p.model_dump_json(exclude={"source"}, exclude_none=True).encode()
    doc = p.model_dump(exclude_none=True)
    s = p.supplement
    if s is not None:
        doc.update(supp_file=s.file_index, supp_part=s.part, supp_first=s.first, supp_last=s.last, supp_chunk=s.chunk)
    return json.dumps(doc, ensure_ascii=False).encode()
