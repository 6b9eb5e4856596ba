"""The gene lexicon: FlyBase id, current symbol, full name and historical names of each gene.

Search sessions expand gene queries from it (by synonym policy), and sessions are created for a gene named by id
or symbol. Sources, merged gene by gene (the first source to give a full name or summary wins; synonyms add up):

* FlyBase's synonym table ``fb_synonym_*.tsv[.gz]``: primary id, organism, current symbol, current full name,
  full-name synonyms and symbol synonyms (``|``-separated); only *Dmel* genes (``FBgn``) are kept. ``save`` writes
  this format, so a lexicon built here (e.g. for a generated corpus) can be loaded by a service.
* FlyAOC's ``genes.csv`` (``FBgn_ID, Gene_Symbol, Summary``): the summary starts with "<full name> (<symbol>)".
* the synonym fields of FlyAOC's ground truth (``ground_truth_*.jsonl``).

Lookups are exact and case-sensitive (``dl`` is dorsal, ``Dl`` is Delta). A name shared by several genes is
ambiguous; ``lookup`` says so instead of guessing. A name that matches only in another case (``HH``) is not
resolved, but its genes are offered as candidates (``hh``). An empty name is refused.

Without a configured source, :meth:`Lexicon.bundled` is FlyBase's table of the 3,446 FlyAOC candidate genes shipped
as package data (``search/data/flybase_genes.csv.gz``, FB2025_04, CC BY 4.0; see ``search/data/NOTICE.md``).
"""

from __future__ import annotations

import csv
import gzip
import io
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import IO, Any

from search.core.errors import InputError, InvalidRequest, NotFound
from search.core.models import Gene
from search.flyaoc import groundtruth

#: package data: FlyBase's gene table of FlyAOC's 3,446 candidate genes (see search/data/NOTICE.md)
BUNDLED_GENES = "flybase_genes.csv.gz"

FB_SYNONYM_HEADER = ("##primary_FBid", "organism_abbreviation", "current_symbol", "current_fullname",
                     "fullname_synonym(s)", "symbol_synonym(s)")


@dataclass(frozen=True)
class NameMatch:
    """The genes that carry ``name`` as symbol, full name or synonym; ``ambiguous`` when more than one does."""

    name: str
    gene_ids: tuple[str, ...]

    @property
    def ambiguous(self) -> bool:
        return len(self.gene_ids) > 1


def _merge(a: Gene, b: Gene) -> Gene:
    def union(x: list[str], y: list[str]) -> list[str]:
        return list(dict.fromkeys([*x, *y]))

    return a.model_copy(update={
        "fullname": a.fullname or b.fullname,
        "summary": a.summary or b.summary,
        "symbol_synonyms": union(a.symbol_synonyms, b.symbol_synonyms),
        "fullname_synonyms": union(a.fullname_synonyms, b.fullname_synonyms),
    })


def all_names(gene: Gene) -> list[str]:
    """Symbol, full name and every synonym of a gene, in that order, without repeats."""
    return list(dict.fromkeys(n for n in (gene.symbol, gene.fullname, *gene.symbol_synonyms, *gene.fullname_synonyms)
                              if n))


class Lexicon:
    """Genes by id, by current symbol and by any name."""

    def __init__(self, genes: Iterable[Gene] = ()):
        self._genes: dict[str, Gene] = {}
        self._symbols: dict[str, str] = {}
        self._names: dict[str, list[str]] = {}
        self._folded: dict[str, list[str]] = {}  # casefolded name -> gene ids: candidates for a name in another case
        self._foldable: frozenset[str] | None = None
        self._compounds: frozenset[str] | None = None
        for g in genes:
            self.add(g)

    def add(self, gene: Gene) -> None:
        """Add a gene, merging names into an entry of the same id."""
        old = self._genes.get(gene.id)
        if old is not None:
            if old.symbol != gene.symbol:
                raise InputError(f"gene {gene.id}: current symbol {gene.symbol!r} disagrees with {old.symbol!r} "
                                 "from an earlier source; load sources of one FlyBase release", field="symbol")
            gene = _merge(old, gene)
        if not gene.id.strip() or not gene.symbol.strip():
            raise InputError(f"gene {gene.id!r}: a gene needs an id and a current symbol", field="symbol")
        self._genes[gene.id] = gene
        self._symbols[gene.symbol] = gene.id
        self._foldable = self._compounds = None
        for name in all_names(gene):
            for index, key in ((self._names, name), (self._folded, name.casefold())):
                ids = index.setdefault(key, [])
                if gene.id not in ids:
                    ids.append(gene.id)

    def __len__(self) -> int:
        return len(self._genes)

    def __iter__(self) -> Iterator[Gene]:
        return iter(self._genes.values())

    def __contains__(self, gene_id: object) -> bool:
        return gene_id in self._genes

    def get(self, gene_id: str) -> Gene | None:
        return self._genes.get(gene_id)

    def by_symbol(self, symbol: str) -> Gene | None:
        """The gene whose *current* symbol is ``symbol`` (case-sensitive)."""
        gid = self._symbols.get(symbol)
        return self._genes[gid] if gid else None

    def lookup(self, name: str) -> NameMatch:
        """Every gene that has ``name`` as its symbol, full name or a synonym (exact, case-sensitive)."""
        return NameMatch(name, tuple(self._names.get(name, ())))

    def lookup_any_case(self, name: str) -> NameMatch:
        """Every gene that has ``name`` as a name in any letter case (``HH`` finds hh): candidates, never a match."""
        return NameMatch(name, tuple(self._folded.get(name.casefold(), ())))

    def symbols(self) -> frozenset[str]:
        """Current symbols, for the planner's symbol detection."""
        return frozenset(self._symbols)

    def foldable(self) -> frozenset[str]:
        """Lower-cased names the planner may also search case-insensitively (``hh`` for a query ``Hh``): the lexicon
        writes the gene in more than one case (``hh``, ``Hh``), so case tells nothing here, and no other gene has a name
        in any case of it (``dl`` is not foldable: ``dl`` is dorsal, ``Dl`` Delta; nor ``n``: only ``N`` is known)."""
        if self._foldable is None:
            spellings: dict[str, set[str]] = {}
            for name, ids in self._names.items():
                if len(ids) == 1:
                    spellings.setdefault(name.lower(), set()).add(name)
            self._foldable = frozenset(
                low for low, names in spellings.items()
                if len(names) >= 2 and len(self._folded.get(low.casefold(), ())) == 1 and " " not in low)
        return self._foldable

    def compounds(self) -> frozenset[str]:
        """Tokens of names written with a slash or a hyphen (``abd-A``, ``MYPT-75D``, the ``Cyclin-dependent`` of
        ``Cyclin-dependent kinase 4``): the planner never reads one of these as its parts
        (``search.retrieval.planner.compound_parts``)."""
        if self._compounds is None:
            from search.text.analysis import symbol_tokens

            self._compounds = frozenset(t for n in self._names if "/" in n or "-" in n for t in symbol_tokens(n)
                                        if "/" in t or "-" in t)
        return self._compounds

    def resolve(self, ref: str) -> Gene:
        """The gene named by a FlyBase id or current symbol; otherwise a NotFound that says what the name is."""
        ref = ref.strip()
        if not ref:
            raise InvalidRequest("The gene name is empty; give a FlyBase id (FBgn…) or a current symbol.",
                                 details={"field": "gene"})
        gene = self.get(ref) or self.by_symbol(ref)
        if gene is not None:
            return gene
        match = self.lookup(ref)
        candidates = [{"id": i, "symbol": self._genes[i].symbol} for i in match.gene_ids]
        details: dict[str, Any] = {"gene": ref, "candidates": candidates}
        if match.gene_ids:
            which = ", ".join(f"{c['symbol']} ({c['id']})" for c in candidates)
            raise NotFound(f"{ref!r} is not a current symbol but a name of {which}; give the FlyBase id or the "
                           "current symbol.", code="gene_not_found", details=details)
        other_case = self.lookup_any_case(ref).gene_ids
        if other_case:
            details["candidates"] = candidates = [{"id": i, "symbol": self._genes[i].symbol} for i in other_case]
            which = ", ".join(f"{c['symbol']} ({c['id']})" for c in candidates[:5])
            raise NotFound(f"Gene {ref!r} is not in the lexicon in this letter case (symbols are case-sensitive: dl "
                           f"is dorsal, Dl is Delta); did you mean {which}?", code="gene_not_found", details=details)
        raise NotFound(f"Gene {ref!r} is not in the lexicon ({len(self)} genes); give a FlyBase id (FBgn…) or a "
                       "current symbol (case-sensitive).", code="gene_not_found", details=details)

    # ---- files ------------------------------------------------------------------------------------------------
    @classmethod
    def bundled(cls) -> Lexicon:
        """FlyBase's table of the 3,446 FlyAOC candidate genes shipped with flysift (FB2025_04, CC BY 4.0)."""
        return _bundled()

    @classmethod
    def load(cls, paths: Iterable[str | Path]) -> Lexicon:
        """Merge several sources; the format is chosen from each file's name (see the module docstring)."""
        lex = cls()
        for path in paths:
            for gene in read_genes(Path(path)):
                lex.add(gene)
        return lex

    def save(self, path: str | Path) -> None:
        """Write FlyBase's synonym-table format (``.gz`` compresses)."""
        path = Path(path)
        with _open(path, "w") as fh:
            fh.write("\t".join(FB_SYNONYM_HEADER) + "\n")
            for g in self:
                fh.write("\t".join((g.id, "Dmel", g.symbol, g.fullname or "", "|".join(g.fullname_synonyms),
                                    "|".join(g.symbol_synonyms))) + "\n")


@cache
def _bundled() -> Lexicon:
    with resources.as_file(resources.files("search").joinpath("data", BUNDLED_GENES)) as path:
        return Lexicon(read_genes_csv(path))


def _open(path: Path, mode: str = "r") -> IO[str]:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.GzipFile(path, mode + "b"), encoding="utf-8", newline="")
    return open(path, mode, encoding="utf-8", newline="")


def read_genes(path: Path) -> Iterator[Gene]:
    """Genes from one source file, by name: ``*.jsonl`` ground truth, ``*.csv`` genes.csv, ``*.tsv`` synonym table."""
    name = path.name.removesuffix(".gz")
    if not path.exists():
        raise InputError(f"lexicon source {path} does not exist", source=str(path))
    if name.endswith(".jsonl"):
        return read_ground_truth(path)
    if name.endswith(".csv"):
        return read_genes_csv(path)
    if name.endswith(".tsv"):
        return read_fb_synonym(path)
    raise InputError(f"lexicon source {path}: unknown format; use fb_synonym_*.tsv[.gz], genes.csv or "
                     "ground_truth_*.jsonl", source=str(path))


def _split(cell: str) -> list[str]:
    return [s.strip() for s in cell.split("|") if s.strip()]


def read_fb_synonym(path: Path) -> Iterator[Gene]:
    """Dmel genes of FlyBase's ``fb_synonym`` table; ``#`` lines are comments (the header is ``##primary_FBid``)."""
    with _open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip() or line.startswith("#"):
                continue
            cells = line.rstrip("\r\n").split("\t")
            if len(cells) < 4:
                raise InputError(f"{path}:{lineno}: expected 6 tab-separated columns, got {len(cells)}",
                                 source=str(path), record=lineno)
            cells += [""] * (6 - len(cells))
            fbid, organism, symbol, fullname, full_syn, sym_syn = cells[:6]
            if organism != "Dmel" or not fbid.startswith("FBgn"):
                continue
            yield Gene(id=fbid, symbol=symbol, fullname=fullname or None, fullname_synonyms=_split(full_syn),
                       symbol_synonyms=_split(sym_syn))


def fullname_from_summary(symbol: str, summary: str) -> str | None:
    """FlyBase summaries start with "<full name> (<symbol>) …"; the full name is what precedes the symbol."""
    i = summary.find(f" ({symbol})")
    return summary[:i].strip() or None if i > 0 else None


_SUMMARY_HEAD = re.compile(r"^[^()]+? \(([^\s()]+(?:\([^\s()]+\))?[^\s()]*)\) ")


def _symbol_from_summary(summary: str) -> str:
    """The symbol in a summary's opening "<full name> (<symbol>) …" ("nanchung (nan) encodes …" gives nan)."""
    m = _SUMMARY_HEAD.match(summary)
    return m.group(1) if m else ""


def read_genes_csv(path: Path) -> Iterator[Gene]:
    """FlyAOC's ``genes.csv`` / ``genes_top100.csv``: ``FBgn_ID, Gene_Symbol, Summary``."""
    with _open(path) as fh:
        reader = csv.DictReader(fh)
        missing = {"FBgn_ID", "Gene_Symbol"} - set(reader.fieldnames or ())
        if missing:
            raise InputError(f"{path}: missing column(s) {sorted(missing)}", source=str(path), field="header")
        for row in reader:
            summary = (row.get("Summary") or "").strip()
            symbol = row["Gene_Symbol"].strip() or _symbol_from_summary(summary)
            if not symbol or not row["FBgn_ID"].strip():
                continue  # a gene without a symbol cannot be named (FlyAOC's genes.csv has one: nan's cell is empty)
            yield Gene(id=row["FBgn_ID"].strip(), symbol=symbol, fullname=fullname_from_summary(symbol, summary),
                       summary=summary or None)


def read_ground_truth(path: Path) -> Iterator[Gene]:
    """The names in FlyAOC ground truth (read by ``search.flyaoc.groundtruth``): symbol, ``current_fullname`` and the
    synonym entries of ``task3_synonyms``."""
    record = 0
    try:
        for row in groundtruth.read_ground_truth(path):
            record = row.record
            yield Gene(id=row.gene_id, symbol=row.gene_symbol, fullname=row.current_fullname,
                       fullname_synonyms=[s.synonym for s in row.fullname_synonyms],
                       symbol_synonyms=[s.synonym for s in row.symbol_synonyms])
    except InputError as exc:
        raise InputError(f"{path}:{exc.record or 0}: not a FlyAOC ground-truth row ({exc.message})", source=str(path),
                         record=exc.record, field=exc.field) from None
    except ValueError as exc:
        raise InputError(f"{path}:{record}: not a FlyAOC ground-truth row ({exc})", source=str(path),
                         record=record) from None
