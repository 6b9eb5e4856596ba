"""Corpus sources: turn files (FlyAOC exports, PMC JATS/NXML, BioC) into ``Paper`` objects, one ``SourceItem`` per
record.

Every record yields exactly one item, either a paper or a ``Reject`` that names source, record and field, so the
pipeline can count and report everything it did not index. An input that holds no record (an empty file) and a file
of unknown format met in a folder are one reject each (record 0), never silence. Format readers live in
``flyaoc.py``, ``jats.py`` and ``bioc.py``; ``base.py`` holds what they share (item type, id map, id/year/text
normalisation) and ``dispatch.py`` the format detection and dispatch. This module re-exports the public names.
"""

from indexer.sources.base import (
    HF_METADATA,
    IdMap,
    SourceItem,
    clean_text,
    data_suffix,
    is_hf_dataset_dir,
    join_paragraphs,
    normalize_pmcid,
    normalize_pmid,
    normalize_year,
    open_binary,
    paper_item,
    reject_item,
    split_blank_lines,
)
from indexer.sources.dispatch import FORMATS, count_records, detect_format, iter_records

__all__ = ["FORMATS", "HF_METADATA", "IdMap", "SourceItem", "clean_text", "count_records", "data_suffix",
           "detect_format", "is_hf_dataset_dir", "iter_records", "join_paragraphs", "normalize_pmcid",
           "normalize_pmid", "normalize_year", "open_binary", "paper_item", "reject_item", "split_blank_lines"]
