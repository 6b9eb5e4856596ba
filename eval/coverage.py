"""Reference coverage: per gene, the fraction of the papers curators cited (in-corpus ground-truth rows) that the
agent read. "Read" comes either from the evidence fields of its predictions or from session traces.

Trace files: one ``<gene_id>.json`` per gene in a directory, holding a list of events or ``{"events": [...]}``.
An event is ``{"tool": str, "arguments": {...}, "returned_ids": [...], "error": ...}``; a read is an event of a
reading tool (see ``READ_TOOLS``) without an error, and the papers it read are ``arguments.pmcid``,
``arguments.pmcids`` and ``returned_ids``. Search tools return ids too, but finding a paper is not reading it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from eval.flyaoc import GenePrediction, GeneTruth
from search.core.errors import InputError

#: Tools whose calls put a paper's text in front of the agent (FlyAOC's names and ours).
READ_TOOLS = frozenset({"get_paper_text", "analyze_papers_batch", "read_paper", "get_paper", "read_passages"})


def read_pmcids_from_trace(events: Any, source: str) -> set[str]:
    """PMCIDs read in one session trace; raises InputError naming the file, event and field when malformed."""
    if isinstance(events, dict):
        events = events.get("events")
    if not isinstance(events, list):
        raise InputError("trace must be a list of events or an object with 'events'", source=source)
    read: set[str] = set()
    for n, ev in enumerate(events):
        if not isinstance(ev, dict) or not isinstance(ev.get("tool"), str):
            raise InputError("event needs a string 'tool'", source=source, record=n, field="tool")
        if ev["tool"] not in READ_TOOLS or ev.get("error"):
            continue
        args = ev.get("arguments") or {}
        if not isinstance(args, dict):
            raise InputError("'arguments' must be an object", source=source, record=n, field="arguments")
        ids: list[Any] = [args.get("pmcid")] if args.get("pmcid") is not None else []
        for key, value in (("arguments.pmcids", args.get("pmcids")), ("returned_ids", ev.get("returned_ids"))):
            if value is None:
                continue
            if not isinstance(value, list):
                raise InputError(f"'{key}' must be a list", source=source, record=n, field=key)
            ids.extend(value)
        for x in ids:
            if not isinstance(x, str):
                raise InputError(f"paper id {x!r} is not a string", source=source, record=n, field="pmcid")
            read.add(x)
    return read


def load_trace_dir(directory: str | Path, gene_ids: Iterable[str]) -> dict[str, set[str]]:
    """Read ``<gene_id>.json`` traces; genes without a trace file are absent from the result."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"trace directory not found: {directory}", source=str(directory))
    out = {}
    for gid in gene_ids:
        path = directory / f"{gid}.json"
        if path.exists():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise InputError(f"invalid JSON: {e.msg}", source=str(path), record=e.lineno) from e
            out[gid] = read_pmcids_from_trace(data, str(path))
    return out


def coverage(truth: Mapping[str, GeneTruth], read: Mapping[str, set[str]], genes: Iterable[str],
             source: str) -> dict[str, Any]:
    """Per-gene and pooled coverage over ``genes``; a gene with nothing read (or no trace) scores 0. Genes whose
    curators cited no in-corpus paper are listed but left out of the macro mean (it would be 0/0)."""
    per_gene, fractions, n_cited, n_hit = {}, [], 0, 0
    for gid in genes:
        cited = truth[gid].cited_pmcids
        hit = cited & read.get(gid, set())
        frac = len(hit) / len(cited) if cited else None
        per_gene[gid] = {"cited": len(cited), "read": len(read.get(gid, set())), "read_cited": len(hit),
                         "coverage": frac, "missed": sorted(cited - hit)}
        n_cited += len(cited)
        n_hit += len(hit)
        if frac is not None:
            fractions.append(frac)
    return {"source": source, "n_genes": len(per_gene), "n_cited": n_cited, "n_read_cited": n_hit,
            "micro": n_hit / n_cited if n_cited else 0.0,
            "macro": sum(fractions) / len(fractions) if fractions else 0.0, "genes": per_gene}


def coverage_from_predictions(truth: Mapping[str, GeneTruth], predictions: Mapping[str, GenePrediction],
                              genes: Iterable[str]) -> dict[str, Any]:
    """Coverage when the only record of reading is the evidence PMCIDs the agent cited in its annotations."""
    read = {g: predictions[g].evidence_pmcids for g in genes if g in predictions}
    return coverage(truth, read, genes, "evidence fields of predictions")
