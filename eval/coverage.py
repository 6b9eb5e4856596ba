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
from search.client import ClientError
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


# ---- diagnostics: why a cited paper was missed --------------------------------------------------------------------

#: why a curator-cited paper was or was not used by a run, from the worst for the corpus to the best for the agent
REASONS = ("not_indexed", "never_retrieved", "beyond_budget", "surfaced_not_read", "read_not_annotated",
           "read_and_cited")
#: how deep a query is followed to tell ``beyond_budget`` from ``never_retrieved``
RANK_DEPTH = 1000
#: tools whose answers are ranked lists of papers or passages (a rank there means something)
SEARCH_TOOLS = frozenset({"search_papers", "search_passages", "search_corpus"})
PAGE = 100


def _pmcid_of(returned_id: str) -> str:
    """A trace's returned id as a paper: passage ids are ``PMCID:section:paragraph``; term ids are not papers."""
    return returned_id.split(":", 1)[0] if returned_id.startswith("PMC") else returned_id


def _events(data: Any, source: str) -> list[dict[str, Any]]:
    events = data.get("events") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise InputError("trace must be a list of events or an object with 'events'", source=source)
    return [ev for ev in events if isinstance(ev, dict)]


def _request(ev: dict[str, Any]) -> dict[str, Any]:
    """A traced call's request: its JSON body (POST) or its query and path parameters."""
    args: dict[str, Any] = ev["arguments"] if isinstance(ev.get("arguments"), dict) else {}
    body = args.get("body")
    return body if isinstance(body, dict) else args


def surfaced_from_trace(data: Any, source: str = "trace") -> dict[str, dict[str, Any]]:
    """Papers the agent saw in a ranked answer (a search, not a read), each with the call that ranked it best:
    ``{pmcid: {call, tool, query, rank}}``; the rank counts distinct papers and adds the request's offset."""
    out: dict[str, dict[str, Any]] = {}
    for n, ev in enumerate(_events(data, source)):
        if ev.get("error") or ev.get("tool") not in SEARCH_TOOLS:
            continue
        req = _request(ev)
        offset: int = req["offset"] if isinstance(req.get("offset"), int) else 0
        order: list[str] = []
        for rid in ev.get("returned_ids") or []:
            if isinstance(rid, str) and rid.startswith("PMC") and (pid := _pmcid_of(rid)) not in order:
                order.append(pid)
        for rank, pid in enumerate(order, start=offset + 1):
            if pid not in out or rank < out[pid]["rank"]:
                out[pid] = {"call": ev.get("seq", n), "tool": ev["tool"], "query": str(req.get("query", ""))[:200],
                            "rank": rank}
    return out


def surfaced_pmcids_from_trace(events: Any) -> set[str]:
    """Papers any call of the session returned (searches and reads alike)."""
    if isinstance(events, dict):
        events = events.get("events")
    return {_pmcid_of(i) for ev in events or [] if isinstance(ev, dict) and not ev.get("error")
            for i in ev.get("returned_ids") or [] if isinstance(i, str) and not i.startswith(("GO:", "FB"))}


def _search_requests(data: Any, source: str) -> list[dict[str, Any]]:
    """The paper searches of a trace, as requests that can be asked again (query, gene, filters, mode, collection)."""
    out, seen = [], set()
    for ev in _events(data, source):
        if ev.get("tool") != "search_papers" or ev.get("error"):
            continue
        req = _request(ev)
        if not isinstance(req.get("query"), str):
            continue
        again = {k: req[k] for k in ("query", "gene", "filters", "mode", "collection") if req.get(k) is not None}
        key = json.dumps(again, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(again)
    return out


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
        found: dict[str, int] = {}
        try:
            offset = 0
            while offset < self.depth and wanted - set(found):
                limit = min(PAGE, self.depth - offset)
                hits = self.client.search_papers(request["query"], limit=limit, offset=offset,
                                                 **{k: v for k, v in request.items() if k != "query"}).hits
                for rank, h in enumerate(hits, start=offset + 1):
                    if h.pmcid in wanted:
                        found.setdefault(h.pmcid, rank)
                if len(hits) < limit:
                    break
                offset += limit
        finally:
            try:
                self.client.close_session()
            finally:
                self.client.session_id = None
        return found


def _evidence_pmcids(record: dict[str, Any] | None) -> set[str]:
    out = (record or {}).get("output") if isinstance(record, dict) and "output" in record else record
    if not isinstance(out, dict):
        return set()
    return {ev["pmcid"] for key in ("task1_function", "task2_expression") for it in out.get(key) or []
            if isinstance(it, dict) and isinstance(ev := it.get("evidence"), dict) and isinstance(ev.get("pmcid"), str)}


def run_reasons(client: Any, truth: Mapping[str, GeneTruth], run_dir: str | Path,
                policies: Iterable[str] = ("none", "snapshot", "full"), depth: int = RANK_DEPTH) -> dict[str, Any]:
    """For every curator-cited paper of every gene of a run (genes with a trace), why the run did or did not use it
    (:data:`REASONS`), with its title and year:

    - ``read_and_cited`` / ``read_not_annotated``: read in the session; a submitted (output) annotation cites it, or
      none does;
    - ``surfaced_not_read``: in a ranked answer the agent saw (the call and the rank);
    - ``not_indexed``: the collection does not hold it (a corpus gap, not a retrieval miss);
    - ``beyond_budget``: indexed and ranked within ``depth`` by a paper search of the run (asked again, under the
      run's synonym policy) or a ceiling query (the symbol with ``gene=`` under each of ``policies``), but never in
      an answer the agent saw: the best rank, the query and policy that reached it, and ``within_budget`` when that
      rank is within the run's budget (the agent's own queries missed a paper a plain gene search finds);
    - ``never_retrieved``: indexed, but none of those queries ranks it within ``depth``.
    """
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
            genes[gid] = _gene_reasons(index, gid, truth[gid], data, str(path), record, budget, run_policy, policies)
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


def _gene_reasons(index: _Index, gid: str, truth: GeneTruth, trace: Any, source: str, record: dict[str, Any] | None,
                  budget: int, run_policy: str, policies: list[str]) -> dict[str, Any]:
    read = read_pmcids_from_trace(trace, source)
    surfaced = surfaced_from_trace(trace, source)
    cited_in_output = _evidence_pmcids(record)
    refs: list[dict[str, Any]] = []
    unexplained: set[str] = set()
    for pmcid in sorted(truth.cited_pmcids):
        paper = index.paper(pmcid)
        ref: dict[str, Any] = {"pmcid": pmcid, "title": paper.title if paper else None,
                               "year": paper.year if paper else None}
        if pmcid in read:
            ref["reason"] = "read_and_cited" if pmcid in cited_in_output else "read_not_annotated"
        elif pmcid in surfaced:
            ref["reason"], ref["detail"] = "surfaced_not_read", surfaced[pmcid]
        elif paper is None:
            ref["reason"] = "not_indexed"
        else:
            unexplained.add(pmcid)
        refs.append(ref)
    if unexplained:
        best: dict[str, dict[str, Any]] = {}
        asked = [("run", run_policy, r) for r in _search_requests(trace, source)]
        asked += [("ceiling", pol, {"query": truth.gene_symbol, "gene": gid}) for pol in policies]
        for origin, policy, request in asked:
            for pmcid, rank in index.ranks(gid, policy, request, unexplained).items():
                if pmcid not in best or rank < best[pmcid]["best_rank"]:
                    best[pmcid] = {"best_rank": rank, "query": request["query"][:200], "policy": policy,
                                   "from": origin, "within_budget": rank <= budget}
        for ref in refs:
            if ref["pmcid"] in unexplained:
                found = best.get(ref["pmcid"])
                ref["reason"] = "beyond_budget" if found else "never_retrieved"
                if found:
                    ref["detail"] = found
    counts = dict.fromkeys(REASONS, 0)
    for ref in refs:
        counts[ref["reason"]] += 1
    return {"symbol": truth.gene_symbol, "cited": len(refs), "counts": counts,
            "not_indexed_share": counts["not_indexed"] / len(refs) if refs else None, "references": refs}


def reasons_table(report: dict[str, Any]) -> str:
    """The per-gene counts of :func:`run_reasons` as Markdown, a total row last; reasons no reference has are left
    out, and a gene's missing share is "n/a" when it cites nothing."""
    shown = [r for r in REASONS if report["totals"][r]] or list(REASONS[:1])
    head = "| gene | symbol | cited | " + " | ".join(shown) + " | not indexed |"
    lines = [head, "|---" * (len(shown) + 4) + "|"]
    for gid, g in report["genes"].items():
        share = "n/a" if g["not_indexed_share"] is None else f"{g['not_indexed_share']:.0%}"
        lines.append(f"| {gid} | {g['symbol']} | {g['cited']} | " + " | ".join(str(g["counts"][r]) for r in shown)
                     + f" | {share} |")
    cited = report["cited"]
    share = "n/a" if not cited else f"{report['totals']['not_indexed'] / cited:.0%}"
    lines.append(f"| **all** | | {cited} | " + " | ".join(str(report["totals"][r]) for r in shown) + f" | {share} |")
    return "\n".join(lines)


def references_table(report: dict[str, Any], title_chars: int = 70) -> str:
    """One row per cited paper: gene, paper, year, title (cut at a word), reason and what reached it."""
    lines = ["| gene | paper | year | title | reason | detail |", "|---|---|---|---|---|---|"]
    for g in report["genes"].values():
        for ref in g["references"]:
            d = ref.get("detail") or {}
            if ref["reason"] == "surfaced_not_read":
                detail = f"rank {d['rank']} in {d['tool']} call {d['call']} ({d['query']!r})"
            elif ref["reason"] == "beyond_budget":
                detail = (f"best rank {d['best_rank']} ({d['from']} query {d['query']!r}, policy {d['policy']})"
                          + ("; within the budget" if d["within_budget"] else ""))
            else:
                detail = ""
            lines.append(f"| {g['symbol']} | {ref['pmcid']} | {ref['year'] or ''} | "
                         f"{_cut_words(ref['title'] or '', title_chars)} | {ref['reason']} | {detail} |")
    return "\n".join(lines)


def _cut_words(text: str, limit: int) -> str:
    text = " ".join(text.replace("|", "/").split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return (cut or text[:limit]) + " …"


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
