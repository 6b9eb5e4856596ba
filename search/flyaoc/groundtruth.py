"""The one reader of FlyAOC's ground truth (``ground_truth_*.jsonl[.gz]``: one gene per line, spec §4.2).

Each line becomes a :class:`GeneRecord` holding what the users of the file need: the GO and expression rows (id,
``in_corpus``, cited pmcid; stage range for expression), the synonym entries and the current full name. The
evaluator scores from it, the lexicon takes the gene's names from it and sessions take the curator-cited papers
(coverage). A malformed line is an ``InputError`` naming the file, the line and the field (e.g.
``task1_function[1].in_corpus``), so a broken file is never read half.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from search.core.errors import InputError


@dataclass(frozen=True)
class GoRow:
    go_id: str
    in_corpus: bool
    pmcid: str | None = None


@dataclass(frozen=True)
class ExpressionRow:
    anatomy_id: str | None
    in_corpus: bool
    stage_start_id: Any = None
    stage_end_id: Any = None
    pmcid: str | None = None


@dataclass(frozen=True)
class SynonymEntry:
    synonym: str
    in_corpus: bool


@dataclass(frozen=True)
class GeneRecord:
    """One gene of the ground truth, rows in file order. ``record`` is its line number."""

    gene_id: str
    gene_symbol: str
    current_fullname: str | None
    go: tuple[GoRow, ...]
    expression: tuple[ExpressionRow, ...]
    fullname_synonyms: tuple[SynonymEntry, ...]
    symbol_synonyms: tuple[SynonymEntry, ...]
    record: int = 0

    @property
    def cited_pmcids(self) -> tuple[str, ...]:
        """Papers curators cited for in-corpus rows, GO rows first, each once, in file order."""
        rows: list[GoRow | ExpressionRow] = [*self.go, *self.expression]
        return tuple(dict.fromkeys(r.pmcid for r in rows if r.in_corpus and r.pmcid))


def _require(obj: Any, key: str, kind: type | tuple[type, ...], source: str, record: int, where: str) -> Any:
    if not isinstance(obj, Mapping) or key not in obj:
        raise InputError(f"missing field {where}.{key}", source=source, record=record, field=f"{where}.{key}")
    value = obj[key]
    if not isinstance(value, kind):
        raise InputError(f"{where}.{key} has type {type(value).__name__}", source=source, record=record,
                         field=f"{where}.{key}")
    return value


def _pmcid(row: Mapping[str, Any]) -> str | None:
    value = row.get("pmcid")
    return value if isinstance(value, str) and value else None


def parse_gene(obj: Any, source: str = "", record: int = 0) -> GeneRecord:
    """One ground-truth line (parsed JSON) as a :class:`GeneRecord`; ``InputError`` names what is wrong."""
    if not isinstance(obj, dict):
        raise InputError("record is not a JSON object", source=source, record=record)
    gene_id = _require(obj, "gene_id", str, source, record, "gene")
    symbol = _require(obj, "gene_symbol", str, source, record, "gene")
    go_rows = _require(obj, "task1_function", list, source, record, "gene")
    ex_rows = _require(obj, "task2_expression", list, source, record, "gene")
    syn = _require(obj, "task3_synonyms", dict, source, record, "gene")

    go = []
    for i, row in enumerate(go_rows):
        where = f"task1_function[{i}]"
        go_id = _require(row, "go_id", str, source, record, where)
        go.append(GoRow(go_id, _require(row, "in_corpus", bool, source, record, where), _pmcid(row)))
    expression = []
    for i, row in enumerate(ex_rows):
        where = f"task2_expression[{i}]"
        anatomy = _require(row, "anatomy_id", (str, type(None)), source, record, where)
        in_corpus = _require(row, "in_corpus", bool, source, record, where)
        expression.append(ExpressionRow(anatomy, in_corpus, row.get("stage_start_id"), row.get("stage_end_id"),
                                        _pmcid(row)))
    names: dict[str, tuple[SynonymEntry, ...]] = {}
    for key in ("fullname_synonyms", "symbol_synonyms"):
        entries = _require(syn, key, list, source, record, "task3_synonyms")
        names[key] = tuple(
            SynonymEntry(_require(e, "synonym", str, source, record, f"task3_synonyms.{key}[{i}]"),
                         _require(e, "in_corpus", bool, source, record, f"task3_synonyms.{key}[{i}]"))
            for i, e in enumerate(entries))
    fullname = syn.get("current_fullname")
    if fullname is not None and not isinstance(fullname, str):
        raise InputError(f"task3_synonyms.current_fullname has type {type(fullname).__name__}", source=source,
                         record=record, field="task3_synonyms.current_fullname")
    return GeneRecord(gene_id, symbol, fullname or None, tuple(go), tuple(expression), names["fullname_synonyms"],
                      names["symbol_synonyms"], record)


def _open(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return path.open(encoding="utf-8")


def read_ground_truth(path: str | Path) -> Iterator[GeneRecord]:
    """Every gene of a ground-truth file, in file order (blank lines skipped)."""
    path = Path(path)
    try:
        fh = _open(path)
    except OSError as exc:
        raise InputError(f"cannot read ground truth {path}: {exc}", source=str(path)) from exc
    with fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"invalid JSON: {e.msg}", source=str(path), record=n) from e
            yield parse_gene(obj, str(path), n)


def load_ground_truth(path: str | Path) -> dict[str, GeneRecord]:
    """Gene id → record for a whole file, in file order; a repeated gene or a file without genes is an error."""
    genes: dict[str, GeneRecord] = {}
    for gene in read_ground_truth(path):
        if gene.gene_id in genes:
            raise InputError(f"duplicate gene {gene.gene_id}", source=str(path), record=gene.record, field="gene_id")
        genes[gene.gene_id] = gene
    if not genes:
        raise InputError("ground truth holds no genes", source=str(path))
    return genes


def cited_pmcids(path: str | Path) -> dict[str, list[str]]:
    """Gene id → pmcids curators cited for in-corpus GO and expression rows (coverage of a session's reading)."""
    return {gene.gene_id: list(gene.cited_pmcids) for gene in read_ground_truth(path)}
