"""Corpus sources: turn files (FlyAOC exports, PMC JATS/NXML, BioC) into ``Paper`` objects, one ``SourceItem`` per
record.

Every record yields exactly one item, either a paper or a ``Reject`` that names source, record and field, so the
pipeline can count and report everything it did not index. An input that holds no record (an empty file) and a file
of unknown format met in a folder are one reject each (record 0), never silence. Readers yield each record as a raw
``Unit`` (a JSONL line, a decoded record, a file's path) that ``parse_unit`` turns into its item, so parsing can run
in the indexer's worker processes. Format readers live in ``flyaoc.py``, ``jats.py`` and ``bioc.py``; ``base.py``
holds what they share (item and unit types, id map, id/year/text normalisation) and ``dispatch.py`` the format
detection and dispatch. This module re-exports the public names.
"""

from indexer.sources.base import (
    HF_METADATA,
    IdMap,
    SourceItem,
    Unit,
    clean_text,
    data_suffix,
    is_hf_dataset_dir,
    join_paragraphs,
    normalize_pmcid,
    normalize_pmid,
    normalize_year,
    open_binary,
    paper_item,
    parse_unit,
    reject_item,
    split_blank_lines,
)
from indexer.sources.dispatch import FORMATS, Units, count_records, detect_format, iter_records, iter_units

__all__ = ["FORMATS", "HF_METADATA", "IdMap", "SourceItem", "Unit", "Units", "clean_text", "count_records",
           "data_suffix", "detect_format", "is_hf_dataset_dir", "iter_records", "iter_units", "join_paragraphs",
           "normalize_pmcid", "normalize_pmid", "normalize_year", "open_binary", "paper_item", "parse_unit",
           "reject_item", "split_blank_lines"]
