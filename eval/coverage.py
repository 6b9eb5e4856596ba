"""Reference coverage: per gene, the fraction of the papers curators cited (in-corpus ground-truth rows) that the
agent read. "Read" comes either from the evidence fields of its predictions or from session traces.

Trace files: one ``<gene_id>.json`` per gene in a directory, holding a list of events or ``{"events": [...]}``.
An event is ``{"tool": str, "arguments": {...}, "returned_ids": [...], "error": ...}``; a read is an event of a
reading tool (``search.flyaoc.coverage.READ_TOOLS``) without an error, and the papers it read are ``arguments.pmcid``,
``arguments.pmcids`` and ``returned_ids``. Search tools return ids too, but finding a paper is not reading it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from eval.flyaoc import GenePrediction, GeneTruth
from search.client import ClientError
from search.core.errors import InputError
from search.flyaoc.coverage import (
    RANK_DEPTH,
    REASONS,
    follow,
    gene_reasons,
    read_pmcids_from_trace,
    reasons_table,
    references_table,
)

#: the rule's names that callers of this module use (``flysift coverage``, ``curation.runs``)
__all__ = ["RANK_DEPTH", "REASONS", "coverage", "coverage_from_predictions", "load_trace_dir",
           "read_pmcids_from_trace", "reasons_table", "references_table", "retrieval_ceiling", "run_reasons",
           "ceiling_table", "plot_ceiling"]


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


# ---- diagnostics: why a cited paper was missed (the rule: search.flyaoc.coverage) ---------------------------------

class _Index:
    """What the service knows of papers and where its searches rank them (``client``: a ``search.client.Client``
    used outside any session; sessions are opened only for ``gene=`` expansion under a synonym policy)."""

    def __init__(self, client: Any, depth: int = RANK_DEPTH):
        self.client, self.depth = client, depth
        self._papers: dict[str, Any] = {}

    def paper(self, pmcid: str) -> Any | None:
        """The paper's first page (title, year) or None when the collection does not hold it. Reading outside a
        session spends nothing."""
        from search.client import NotFoundError

        if pmcid not in self._papers:
            try:
                self._papers[pmcid] = self.client.get_paper(pmcid, sections=["ABSTRACT"], max_chars=200)
            except NotFoundError:
                self._papers[pmcid] = None
        return self._papers[pmcid]

    def ranks(self, gene_id: str, policy: str, request: dict[str, Any], wanted: set[str]) -> dict[str, int]:
        """Ranks (1-based, up to ``depth``) of the ``wanted`` papers in the answer to ``request``, asked in a
        session of ``policy`` for ``gene_id``; pages stop once every wanted paper is found or the hits run out."""
        session = self.client.create_session(gene_id, synonym_policy=policy, max_papers=1, label="coverage")
        self.client.session_id = session.id
        options = {k: v for k, v in request.items() if k != "query"}
        try:
            return follow(lambda limit, offset: [h.pmcid for h in self.client.search_papers(
                request["query"], limit=limit, offset=offset, **options).hits], wanted, self.depth)
        finally:
            try:
                self.client.close_session()
            finally:
                self.client.session_id = None

    def ranker(self, gene_id: str) -> Callable[[str, dict[str, Any], set[str]], dict[str, int]]:
        return lambda policy, request, wanted: self.ranks(gene_id, policy, request, wanted)

    def head(self, pmcid: str) -> tuple[str | None, int | None] | None:
        paper = self.paper(pmcid)
        return (paper.title, paper.year) if paper is not None else None


def run_reasons(client: Any, truth: Mapping[str, GeneTruth], run_dir: str | Path,
                policies: Iterable[str] = ("none", "snapshot", "full"), depth: int = RANK_DEPTH) -> dict[str, Any]:
    """For every curator-cited paper of every gene of a run (genes with a trace), why the run did or did not use it
    (:data:`REASONS`, the rule of ``search.flyaoc.coverage.gene_reasons``), with its title and year; papers are
    looked up and queries ranked again through the service (``client``), queries followed to rank ``depth``."""
    run_dir = Path(run_dir)
    info = json.loads((run_dir / "run.json").read_text(encoding="utf-8")) if (run_dir / "run.json").exists() else {}
    config = info.get("config") or {}
    budget = int(config.get("budget") or 16)
    run_policy = str(config.get("synonym_policy") or "snapshot")
    policies = list(policies)
    index = _Index(client, depth)
    genes: dict[str, Any] = {}
    totals = dict.fromkeys(REASONS, 0)
    skipped: dict[str, str] = {}
    for path in sorted((run_dir / "traces").glob("*.json")):
        gid = path.stem
        if gid not in truth:
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        pred_path = run_dir / "predictions" / f"{gid}.json"
        record = json.loads(pred_path.read_text(encoding="utf-8")) if pred_path.exists() else None
        try:
            t = truth[gid]
            genes[gid] = gene_reasons(gid, t.gene_symbol, t.cited_pmcids, data, str(path), record, budget, run_policy,
                                      policies, index.head, index.ranker(gid))
        except ClientError as e:
            skipped[gid] = f"{e.code}: {e.message}"[:300]
            continue
        for reason, n in genes[gid]["counts"].items():
            totals[reason] += n
    cited = sum(totals.values())
    return {"source": str(run_dir), "budget": budget, "synonym_policy": run_policy, "policies": policies,
            "depth": depth, "reasons": list(REASONS), "n_genes": len(genes), "cited": cited, "totals": totals,
            "shares": {r: (n / cited if cited else None) for r, n in totals.items()}, "genes": genes,
            "skipped": skipped}


#: budgets at which the retrieval ceiling is reported (FlyAOC's 1…32, and 64)
CEILING_BUDGETS = (1, 2, 4, 8, 16, 32, 64)


def retrieval_ceiling(client: Any, truth: Mapping[str, GeneTruth], policies: Iterable[str] = ("none", "snapshot",
                      "full"), budgets: Iterable[int] = CEILING_BUDGETS, depth: int = 100) -> dict[str, Any]:
    """Without any agent: for every gene, the rank of each in-corpus cited paper in a gene search (the symbol as
    query, ``gene=`` under each synonym policy, in a session of that policy), and the recall of cited papers at
    each budget (None where no reference is indexed: nothing to measure). Cited papers the collection does not hold
    are listed per gene as ``not_indexed`` with their share. ``client`` is a ``search.client.Client``; searching
    spends no budget."""
    budgets = sorted(budgets)
    index = _Index(client, depth)
    per_gene: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    ranks: dict[str, list[int | None]] = {p: [] for p in policies}
    n_cited = n_missing = 0
    for gid, t in truth.items():
        cited = sorted(t.cited_pmcids)
        refs = [p for p in cited if index.paper(p) is not None]
        missing = [p for p in cited if p not in refs]
        n_cited, n_missing = n_cited + len(cited), n_missing + len(missing)
        if not cited:
            continue
        row: dict[str, Any] = {"symbol": t.gene_symbol, "references": refs, "not_indexed": missing,
                               "not_indexed_share": len(missing) / len(cited), "ranks": {}}
        try:
            for pol in ranks:
                found = index.ranks(gid, pol, {"query": t.gene_symbol, "gene": gid}, set(refs)) if refs else {}
                row["ranks"][pol] = {p: found.get(p) for p in refs}
        except ClientError as e:
            skipped[gid] = f"{e.code}: {e.message}"
            continue
        for pol in ranks:
            ranks[pol] += [row["ranks"][pol][p] for p in refs]
        per_gene[gid] = row
    recall = {pol: {b: (sum(1 for r in rs if r is not None and r <= b) / len(rs) if rs else None) for b in budgets}
              for pol, rs in ranks.items()}
    return {"policies": list(ranks), "budgets": budgets, "depth": depth, "n_genes": len(per_gene),
            "n_references": len(next(iter(ranks.values()), [])), "n_cited": n_cited, "n_not_indexed": n_missing,
            "recall": recall, "genes": per_gene, "skipped": skipped}


def ceiling_table(ceiling: dict[str, Any]) -> str:
    """The recall-at-budget table as markdown ("n/a" where no reference is indexed)."""
    head = "| policy | " + " | ".join(f"@{b}" for b in ceiling["budgets"]) + " |"

    def cell(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    rows = [f"| {pol} | " + " | ".join(cell(ceiling["recall"][pol][b]) for b in ceiling["budgets"]) + " |"
            for pol in ceiling["policies"]]
    return "\n".join([head, "|---" * (len(ceiling["budgets"]) + 1) + "|", *rows])


def plot_ceiling(ceiling: dict[str, Any], path: str | Path) -> bool:
    """The recall-at-budget plot; nothing is drawn (False) when no reference is indexed."""
    if not ceiling["n_references"]:
        return False
    from eval.report import _pyplot

    plt = _pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    for pol in ceiling["policies"]:
        ax.plot(ceiling["budgets"], [ceiling["recall"][pol][b] for b in ceiling["budgets"]], marker="o", label=pol)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ceiling["budgets"], [str(b) for b in ceiling["budgets"]])
    ax.set_xlabel("reading budget (papers, best-ranked first)")
    ax.set_ylabel("recall of curator-cited papers")
    ax.set_ylim(0, 1)
    ax.set_title(f"Retrieval ceiling ({ceiling['n_references']} references, {ceiling['n_genes']} genes)")
    ax.legend(title="synonym policy")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
