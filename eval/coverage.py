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


# ---- diagnostics: what an agent read, surfaced and never saw; what any agent could have seen -------------------------

def _pmcid_of(returned_id: str) -> str:
    """A trace's returned id as a paper: passage ids are ``PMCID:section:paragraph``; term ids are not papers."""
    return returned_id.split(":", 1)[0] if returned_id.startswith("PMC") else returned_id


def surfaced_pmcids_from_trace(events: Any) -> set[str]:
    """Papers any call of the session returned (searches and reads alike)."""
    if isinstance(events, dict):
        events = events.get("events")
    return {_pmcid_of(i) for ev in events or [] if isinstance(ev, dict) and not ev.get("error")
            for i in ev.get("returned_ids") or [] if isinstance(i, str) and not i.startswith(("GO:", "FB"))}


def run_coverage(truth: Mapping[str, GeneTruth], traces_dir: str | Path) -> dict[str, Any]:
    """Per gene of the run (genes with a trace) and overall: the curator-cited papers the agent read, surfaced but
    did not read, and never surfaced."""
    traces_dir = Path(traces_dir)
    genes, totals = {}, {"cited": 0, "read": 0, "surfaced_not_read": 0, "never_surfaced": 0}
    for path in sorted(traces_dir.glob("*.json")):
        gid = path.stem
        if gid not in truth:
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        read = read_pmcids_from_trace(data, str(path))
        surfaced = surfaced_pmcids_from_trace(data) | read
        cited = truth[gid].cited_pmcids
        row: dict[str, Any] = {"cited": len(cited), "read": sorted(cited & read),
                               "surfaced_not_read": sorted((cited & surfaced) - read),
                               "never_surfaced": sorted(cited - surfaced)}
        genes[gid] = row
        totals["cited"] += len(cited)
        for k in ("read", "surfaced_not_read", "never_surfaced"):
            totals[k] += len(row[k])
    share = {k: (totals[k] / totals["cited"] if totals["cited"] else 0.0)
             for k in ("read", "surfaced_not_read", "never_surfaced")}
    return {"source": str(traces_dir), "n_genes": len(genes), "totals": totals, "shares": share, "genes": genes}


#: budgets at which the retrieval ceiling is reported (FlyAOC's 1…32, and 64)
CEILING_BUDGETS = (1, 2, 4, 8, 16, 32, 64)


def retrieval_ceiling(client: Any, truth: Mapping[str, GeneTruth], policies: Iterable[str] = ("none", "snapshot",
                      "full"), budgets: Iterable[int] = CEILING_BUDGETS, depth: int = 100) -> dict[str, Any]:
    """Without any agent: for every gene, the rank of each in-corpus cited paper in a gene search (the symbol as
    query, ``gene=`` under each synonym policy, in a session of that policy), and the recall of cited papers at
    each budget. ``client`` is a ``search.client.Client``; searching spends no budget."""
    from search.client import ClientError, NotFoundError

    budgets = sorted(budgets)
    present: dict[str, bool] = {}

    def in_corpus(pmcid: str) -> bool:
        if pmcid not in present:
            try:
                client.get_paper(pmcid, sections=["ABSTRACT"], max_chars=200)
                present[pmcid] = True
            except NotFoundError:
                present[pmcid] = False
        return present[pmcid]

    per_gene: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    ranks: dict[str, list[int | None]] = {p: [] for p in policies}
    for gid, t in truth.items():
        refs = sorted(p for p in t.cited_pmcids if in_corpus(p))
        if not refs:
            continue
        row: dict[str, Any] = {"symbol": t.gene_symbol, "references": refs, "ranks": {}}
        try:
            for pol in ranks:
                session = client.create_session(gid, synonym_policy=pol, max_papers=1, label="coverage ceiling")
                client.session_id = session.id
                try:
                    hits = client.search_papers(t.gene_symbol, limit=depth, gene=gid).hits
                finally:
                    client.close_session()
                    client.session_id = None
                order = {h.pmcid: n for n, h in enumerate(hits, start=1)}
                row["ranks"][pol] = {p: order.get(p) for p in refs}
                ranks[pol] += [order.get(p) for p in refs]
        except ClientError as e:
            skipped[gid] = f"{e.code}: {e.message}"
            continue
        per_gene[gid] = row
    recall = {pol: {b: (sum(1 for r in rs if r is not None and r <= b) / len(rs) if rs else 0.0) for b in budgets}
              for pol, rs in ranks.items()}
    return {"policies": list(ranks), "budgets": budgets, "depth": depth, "n_genes": len(per_gene),
            "n_references": len(next(iter(ranks.values()), [])), "recall": recall, "genes": per_gene,
            "skipped": skipped}


def ceiling_table(ceiling: dict[str, Any]) -> str:
    """The recall-at-budget table as markdown."""
    head = "| policy | " + " | ".join(f"@{b}" for b in ceiling["budgets"]) + " |"
    rows = [f"| {pol} | " + " | ".join(f"{ceiling['recall'][pol][b]:.3f}" for b in ceiling["budgets"]) + " |"
            for pol in ceiling["policies"]]
    return "\n".join([head, "|---" * (len(ceiling["budgets"]) + 1) + "|", *rows])


def plot_ceiling(ceiling: dict[str, Any], path: str | Path) -> None:
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
