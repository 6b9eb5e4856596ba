"""Why a paper curators cited was or was not used by an agent: the one home of the coverage reasons.

``flysift coverage`` (``eval/coverage.py``, over the API), the session audit page and the run review (``search/web``,
in the service) all classify a gene's cited papers with :func:`gene_reasons`. What differs between them is only how
a paper is looked up and how a query is ranked again: the caller passes those two functions (the client's calls, or
the search service's). Everything here is pure: traces and prediction records are the JSON shapes a run directory
or a session trace holds, and nothing is read from disk or the network.

The reasons, from the worst for the corpus to the best for the agent (:data:`REASONS`):

- ``read_and_cited`` / ``read_not_annotated``: read in the session; a submitted annotation cites it, or none does;
- ``surfaced_not_read``: in a ranked answer the agent saw (the call and the rank);
- ``not_indexed``: the collection does not hold it (a corpus gap, not a retrieval miss);
- ``beyond_budget``: indexed and ranked within the depth by a paper search of the run (asked again, under the run's
  synonym policy) or a ceiling query (the symbol with ``gene=`` under each policy), but never in an answer the agent
  saw: the best rank, the query and policy that reached it, and ``within_budget`` when that rank is within the
  run's budget (the agent's own queries missed a paper a plain gene search finds);
- ``never_retrieved``: indexed, but none of those queries ranks it within the depth.

Trace events are ``{"tool": str, "arguments": {...}, "returned_ids": [...], "error": ...}`` (a session trace's
events, or a run directory's ``traces/<gene>.json``); a read is an event of a reading tool (:data:`READ_TOOLS`)
without an error, and the papers it read are ``arguments.pmcid``, ``arguments.pmcids`` and ``returned_ids``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from search.core.errors import InputError

#: Tools whose calls put a paper's text in front of the agent (FlyAOC's names and ours).
READ_TOOLS = frozenset({"get_paper_text", "analyze_papers_batch", "read_paper", "get_paper", "read_passages"})
#: why a curator-cited paper was or was not used by a run, from the worst for the corpus to the best for the agent
REASONS = ("not_indexed", "never_retrieved", "beyond_budget", "surfaced_not_read", "read_not_annotated",
           "read_and_cited")
#: how deep a query is followed to tell ``beyond_budget`` from ``never_retrieved``
RANK_DEPTH = 1000
#: tools whose answers are ranked lists of papers or passages (a rank there means something)
SEARCH_TOOLS = frozenset({"search_papers", "search_passages", "search_corpus"})
#: hits asked per page while following a query down to the depth
PAGE = 100
#: the synonym policies of the ceiling queries, by default
POLICIES = ("none", "snapshot", "full")
#: not a reason: what a paper gets when the caller asked for no ranking (``ranks=None``, e.g. a table of many genes
#: that ranks one gene at a time): indexed, never read or surfaced, so ``never_retrieved`` or ``beyond_budget``
NOT_RANKED = "not_ranked"

#: ``paper(pmcid)``: (title, year) of an indexed paper, None when the collection does not hold it
PaperLookup = Callable[[str], "tuple[str | None, int | None] | None"]
#: ``ranks(policy, request, wanted)``: the 1-based ranks (up to the depth) of the ``wanted`` papers in the answer to
#: ``request`` (``query`` and optionally ``gene``, ``filters``, ``mode``, ``collection``) under ``policy``
Ranker = Callable[[str, dict[str, Any], set[str]], dict[str, int]]


def pmcid_of(returned_id: str) -> str:
    """A trace's returned id as a paper: passage ids are ``PMCID:section:paragraph``; term ids are not papers."""
    return returned_id.split(":", 1)[0] if returned_id.startswith("PMC") else returned_id


def events_of(data: Any, source: str) -> list[dict[str, Any]]:
    """The events of a trace: a list, or an object with ``events`` (what a run directory's trace file holds)."""
    events = data.get("events") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise InputError("trace must be a list of events or an object with 'events'", source=source)
    return [ev for ev in events if isinstance(ev, dict)]


def request_of(ev: dict[str, Any]) -> dict[str, Any]:
    """A traced call's request: its JSON body (POST) or its query and path parameters."""
    args: dict[str, Any] = ev["arguments"] if isinstance(ev.get("arguments"), dict) else {}
    body = args.get("body")
    return body if isinstance(body, dict) else args


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


def surfaced_from_trace(data: Any, source: str = "trace") -> dict[str, dict[str, Any]]:
    """Papers the agent saw in a ranked answer (a search, not a read), each with the call that ranked it best:
    ``{pmcid: {call, tool, query, rank}}``; the rank counts distinct papers and adds the request's offset."""
    out: dict[str, dict[str, Any]] = {}
    for n, ev in enumerate(events_of(data, source)):
        if ev.get("error") or ev.get("tool") not in SEARCH_TOOLS:
            continue
        req = request_of(ev)
        offset: int = req["offset"] if isinstance(req.get("offset"), int) else 0
        order: list[str] = []
        for rid in ev.get("returned_ids") or []:
            if isinstance(rid, str) and rid.startswith("PMC") and (pid := pmcid_of(rid)) not in order:
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
    return {pmcid_of(i) for ev in events or [] if isinstance(ev, dict) and not ev.get("error")
            for i in ev.get("returned_ids") or [] if isinstance(i, str) and not i.startswith(("GO:", "FB"))}


def search_requests(data: Any, source: str) -> list[dict[str, Any]]:
    """The paper searches of a trace, as requests that can be asked again (query, gene, filters, mode, collection)."""
    out, seen = [], set()
    for ev in events_of(data, source):
        if ev.get("tool") != "search_papers" or ev.get("error"):
            continue
        req = request_of(ev)
        if not isinstance(req.get("query"), str):
            continue
        again = {k: req[k] for k in ("query", "gene", "filters", "mode", "collection") if req.get(k) is not None}
        key = json.dumps(again, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(again)
    return out


def evidence_pmcids(record: dict[str, Any] | None) -> set[str]:
    """Papers the annotations of a prediction cite as evidence: a run record (``{"output": …}``) or a submission's
    annotations themselves."""
    out = (record or {}).get("output") if isinstance(record, dict) and "output" in record else record
    if not isinstance(out, dict):
        return set()
    return {ev["pmcid"] for key in ("task1_function", "task2_expression") for it in out.get(key) or []
            if isinstance(it, dict) and isinstance(ev := it.get("evidence"), dict) and isinstance(ev.get("pmcid"), str)}


def follow(search: Callable[[int, int], list[str]], wanted: set[str], depth: int = RANK_DEPTH) -> dict[str, int]:
    """Ranks (1-based, up to ``depth``) of the ``wanted`` papers in a ranking read a page at a time:
    ``search(limit, offset)`` returns the pmcids of that page; pages stop once every wanted paper is found or the
    hits run out."""
    found: dict[str, int] = {}
    offset = 0
    while offset < depth and wanted - set(found):
        limit = min(PAGE, depth - offset)
        page = search(limit, offset)
        for rank, pmcid in enumerate(page, start=offset + 1):
            if pmcid in wanted:
                found.setdefault(pmcid, rank)
        if len(page) < limit:
            break
        offset += limit
    return found


def _explained(cited: Iterable[str], read: set[str], surfaced: dict[str, Any], cited_in_output: set[str],
               paper: PaperLookup) -> tuple[list[dict[str, Any]], set[str]]:
    """Each cited paper with what the trace and the index say of it alone, and the papers they leave unexplained
    (indexed, never read, never surfaced: only ranking them again can tell)."""
    refs: list[dict[str, Any]] = []
    unexplained: set[str] = set()
    for pmcid in sorted(set(cited)):
        head = paper(pmcid)
        ref: dict[str, Any] = {"pmcid": pmcid, "title": head[0] if head else None, "year": head[1] if head else None}
        if pmcid in read:
            ref["reason"] = "read_and_cited" if pmcid in cited_in_output else "read_not_annotated"
        elif pmcid in surfaced:
            ref["reason"], ref["detail"] = "surfaced_not_read", surfaced[pmcid]
        elif head is None:
            ref["reason"] = "not_indexed"
        else:
            unexplained.add(pmcid)
        refs.append(ref)
    return refs, unexplained


def _best_ranks(ranks: Ranker, asked: list[tuple[str, str, dict[str, Any]]], wanted: set[str],
                budget: int) -> dict[str, dict[str, Any]]:
    """The best rank of each ``wanted`` paper over the searches ``asked`` again (origin, policy, request)."""
    best: dict[str, dict[str, Any]] = {}
    for origin, policy, request in asked:
        for pmcid, rank in ranks(policy, request, wanted).items():
            if pmcid not in best or rank < best[pmcid]["best_rank"]:
                best[pmcid] = {"best_rank": rank, "query": request["query"][:200], "policy": policy,
                               "from": origin, "within_budget": rank <= budget}
    return best


def gene_reasons(gene_id: str, symbol: str, cited: Iterable[str], trace: Any, source: str,
                 record: dict[str, Any] | None, budget: int, run_policy: str, policies: Iterable[str],
                 paper: PaperLookup, ranks: Ranker | None, max_requests: int | None = None) -> dict[str, Any]:
    """Every cited paper of one gene with its reason (:data:`REASONS`), title and year, and the gene's counts.

    ``trace``: the session's events; ``record``: the prediction (a run record or the submitted annotations);
    ``budget`` and ``run_policy``: the run's; ``policies``: those of the ceiling queries. Ranking is asked only for
    papers the trace does not explain (indexed, never read, never surfaced); without ``ranks`` they are
    :data:`NOT_RANKED` (counted under that name too). ``max_requests``: ask at most this many of the run's own
    searches again (``asked_again`` and ``searches`` say how many were and are)."""
    refs, unexplained = _explained(cited, read_pmcids_from_trace(trace, source), surfaced_from_trace(trace, source),
                                   evidence_pmcids(record), paper)
    searches = search_requests(trace, source)
    kept = searches if max_requests is None else searches[:max_requests]
    best: dict[str, dict[str, Any]] = {}
    if unexplained and ranks is not None:
        asked = [("run", run_policy, r) for r in kept]
        asked += [("ceiling", pol, {"query": symbol, "gene": gene_id}) for pol in policies]
        best = _best_ranks(ranks, asked, unexplained, budget)
    for ref in refs:
        if ref["pmcid"] in unexplained:
            found = best.get(ref["pmcid"])
            ref["reason"] = NOT_RANKED if ranks is None else "beyond_budget" if found else "never_retrieved"
            if found:
                ref["detail"] = found
    counts = dict.fromkeys(REASONS, 0)
    if unexplained and ranks is None:
        counts[NOT_RANKED] = 0
    for ref in refs:
        counts[ref["reason"]] += 1
    out = {"symbol": symbol, "cited": len(refs), "counts": counts,
           "not_indexed_share": counts["not_indexed"] / len(refs) if refs else None, "references": refs}
    if max_requests is not None:
        out["searches"], out["asked_again"] = len(searches), len(kept) if unexplained and ranks else 0
    return out


def detail_text(reason: str, detail: Any) -> str:
    """What reached a reference, in words (the Markdown report and the pages say it the same way)."""
    d = detail if isinstance(detail, dict) else {}
    if reason == "surfaced_not_read" and d:
        return f"rank {d.get('rank')} in {d.get('tool')} call {d.get('call')} ({str(d.get('query', ''))[:200]!r})"
    if reason == "beyond_budget" and d:
        return (f"best rank {d.get('best_rank')} ({d.get('from')} query {str(d.get('query', ''))[:200]!r}, policy "
                f"{d.get('policy')})" + ("; within the budget" if d.get("within_budget") else ""))
    return ""


def reasons_table(report: dict[str, Any]) -> str:
    """The per-gene counts of a run's reasons as Markdown, a total row last; reasons no reference has are left out,
    and a gene's missing share is "n/a" when it cites nothing."""
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
            lines.append(f"| {g['symbol']} | {ref['pmcid']} | {ref['year'] or ''} | "
                         f"{cut_words(ref['title'] or '', title_chars)} | {ref['reason']} | "
                         f"{detail_text(ref['reason'], ref.get('detail'))} |")
    return "\n".join(lines)


def cut_words(text: str, limit: int) -> str:
    """``text`` on one line, cut at a word boundary to at most ``limit`` characters (then `` …``)."""
    text = " ".join(text.replace("|", "/").split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return (cut or text[:limit]) + " …"
