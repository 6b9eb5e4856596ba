"""What the cluster stores: ``search.text.analysis`` as custom analyzers, the strict field mappings of papers, passages,
builds and terms, and the conversion of a paper to its document and back.

Analysis is the pattern tokenizers, lowercase and Snowball English (the analysis-common module), scored with BM25
(k1=1.2, b=0.75 unless the collection sets its own) as in the embedded engine, so that both rank alike
(``tests/engines/test_parity.py``).
"""

from __future__ import annotations

from typing import Any

from search.core.models import Paper, Section
from search.core.query import BM25_B, BM25_K1
from search.text import analysis
from search.text.term_search import FIELD_BOOSTS as TERM_FIELDS


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

PAPER_MAPPING: dict[str, Any] = {"dynamic": "strict", "properties": {
    "pmcid": _KEYWORD, "pmid": _KEYWORD, "doi": _KEYWORD, "year": _INT, "journal": _KEYWORD,
    "title": _text_field(), "abstract": _text_field(), "body": _text_field(), "section_types": _KEYWORD,
    # section structure without the text: paragraph lengths cut ``body`` back into paragraphs (no second copy)
    "sections": {"type": "object", "enabled": False},
}}
PASSAGE_MAPPING: dict[str, Any] = {"dynamic": "strict", "properties": {
    "id": _KEYWORD, "pmcid": _KEYWORD, "year": _INT, "section_type": _KEYWORD, "section_index": _STORED_INT,
    "paragraph_index": _STORED_INT, "start": _STORED_INT, "end": _STORED_INT, "text": _text_field(),
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



def paper_doc(p: Paper) -> dict[str, Any]:
    doc = p.model_dump(exclude={"sections"}, exclude_none=True)
    doc["body"] = p.body_text()
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
    return Paper(**doc, sections=sections)
