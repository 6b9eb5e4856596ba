"""The audit pages: a team's sessions (``/sessions``), one session's audit (``/sessions/{id}``), curation runs
(``/runs``, ``/runs/{name}``).

An audit shows a session's trace as a timeline, its budget, its submission with the validation report, and why
each paper curators cited for the gene was or was not used: the reasons of ``flysift coverage``, by its one rule
(``search.flyaoc.coverage``), with papers looked up and queries ranked again through the search service here
(``ServiceIndex``) where ``flysift coverage`` asks the REST API. A run review shows the report ``flysift coverage``
wrote into the run directory when there is one, else the same rule over the run's traces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, cast

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from search.core.errors import FlysiftError
from search.core.names import DEFAULT_COLLECTION
from search.core.query import Filters
from search.flyaoc.coverage import NOT_RANKED, RANK_DEPTH, Ranker, detail_text, follow, gene_reasons
from search.flyaoc.groundtruth import GeneRecord, load_ground_truth
from search.retrieval.service import Mode
from search.schema.sessions import Session, SynonymPolicy
from search.sessions.policy import expansion_names
from search.web import runs as run_files
from search.web.pages import Ctx, check_csrf, int_param, param, quote_part, read_form
from search.web.security import HEADERS

#: trace events shown per page of a session audit
TRACE_PAGE = 500
SESSIONS_PAGE = 50
#: returned ids listed per trace event (the rest are counted)
IDS_SHOWN = 20
TERM_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]*:[A-Za-z0-9_.-]{1,60}")
PASSAGE_ID = re.compile(r"(.+):(\d+):(\d+)(?:\.(\d+))?")
#: a supplement passage's id: ``PMCID:S<file>.<part>:<chunk>`` (``search.core.supplements.passage_id``)
SUPPLEMENT_ID = re.compile(r"(.+):S(\d+)\.(\d+):(\d+)")
#: the most of a session's own paper searches a page asks again to rank the cited papers it never surfaced (each
#: is followed to rank ``RANK_DEPTH``); ``flysift coverage`` asks them all
MAX_ASKED_AGAIN = 50
#: the synonym policies of the ceiling queries (those of ``flysift coverage``)
CEILING_POLICIES = ("none", "snapshot", "full")
MODES = ("bm25", "dense", "hybrid")


# ---- the coverage reasons, through the search service -----------------------------------------------------------

class ServiceIndex:
    """What ``search.flyaoc.coverage.gene_reasons`` asks of a corpus, answered by the search service in this
    process: a paper's title and year (None: not indexed), and the ranks of papers in a query's answer asked again
    under a synonym policy (as ``flysift coverage`` asks the API in a session of that policy). A query that cannot
    be asked again (a dense search without the dense index, malformed filters) ranks nothing; ``problems`` says
    which."""

    def __init__(self, ctx: Ctx, collection: str = DEFAULT_COLLECTION, depth: int = RANK_DEPTH):
        self.ctx, self.collection, self.depth = ctx, collection, depth
        self.heads: dict[str, tuple[str | None, int | None] | None] = {}
        self.problems: list[str] = []

    def prefetch(self, pmcids: list[str]) -> None:
        """Read the heads of these papers in one call (``paper`` then answers from them)."""
        missing = [p for p in dict.fromkeys(pmcids) if p not in self.heads]
        if missing:
            found = self.ctx.search.engine(self.collection).paper_heads(missing)
            self.heads.update({p: (found[p].title, found[p].year) if p in found else None for p in missing})

    def paper(self, pmcid: str) -> tuple[str | None, int | None] | None:
        self.prefetch([pmcid])
        return self.heads[pmcid]

    def ranker(self, gene_id: str) -> Ranker:
        search, sessions = self.ctx.search, self.ctx.sessions

        def ranks(policy: str, request: dict[str, Any], wanted: set[str]) -> dict[str, int]:
            query = str(request.get("query", ""))
            try:
                gene = request.get("gene")
                names = expansion_names(cast(SynonymPolicy, policy), sessions.lexicon().resolve(gene)) \
                    if isinstance(gene, str) and gene else []
                raw = request.get("filters")
                mode = cast(Mode, request["mode"] if request.get("mode") in MODES else "bm25")
                asked = request.get("collection")
                collection = asked if isinstance(asked, str) else self.collection

                def page(limit: int, offset: int) -> list[str]:
                    filters = Filters.model_validate(raw) if isinstance(raw, dict) else None
                    return [h.pmcid for h in search.search_papers(
                        query, limit=limit, offset=offset, filters=filters, collection=collection, expansions=names,
                        mode=mode, foldable=sessions.fold_set(), compounds=sessions.compound_set(),
                        syntax="plain").hits]

                return follow(page, wanted, self.depth)
            except (FlysiftError, ValidationError) as exc:
                why = exc.message if isinstance(exc, FlysiftError) else "malformed filters"
                self.problems.append(f"{query[:80]!r} ({policy}) was not asked again: {why[:200]}")
                return {}

        return ranks


def reasons_for(index: ServiceIndex, gene_id: str, symbol: str, cited: list[str], events: list[dict[str, Any]],
                record: dict[str, Any] | None, budget: int, policy: str, rank: bool = True) -> dict[str, Any]:
    """The reasons of one gene's cited papers (``gene_reasons``), papers and ranks from ``index``."""
    index.prefetch(cited)
    return gene_reasons(gene_id, symbol, cited, {"events": events}, "trace", record, budget, policy,
                        CEILING_POLICIES, index.paper, index.ranker(gene_id) if rank else None,
                        max_requests=MAX_ASKED_AGAIN)


def references(g: dict[str, Any]) -> list[run_files.Reference]:
    """A gene's reasons as the rows a page shows (the report's rows have the same shape)."""
    return [run_files.Reference(pmcid=r["pmcid"], reason=r["reason"], title=r.get("title"), year=r.get("year"),
                                detail=detail_text(r["reason"], r.get("detail"))) for r in g["references"]]


# ---- sessions -----------------------------------------------------------------------------------------------------

async def sessions_page(ctx: Ctx) -> Response:
    offset = int_param(ctx.request, "offset", 0, 9000, 0) or 0
    team = param(ctx.request, "team", 64) or None
    rows = await run_in_threadpool(ctx.sessions.list_sessions, ctx.caller, team, SESSIONS_PAGE + 1, offset)
    return ctx.page("sessions.html", sessions=rows[:SESSIONS_PAGE], more=len(rows) > SESSIONS_PAGE, offset=offset,
                    page_size=SESSIONS_PAGE, team=team, title="Sessions")


@dataclass
class Event:
    """A trace event as the timeline shows it."""

    seq: int
    time: float
    kind: str           # search, read, terms, submit, names, other
    tool: str
    status: int
    summary: str
    ids: list[tuple[str, str]]   # (id, link)
    more_ids: int
    error: dict[str, Any] | None
    refused: bool


def link_for(returned: str) -> str:
    supp = SUPPLEMENT_ID.fullmatch(returned)
    if supp:
        return f"/papers/{quote_part(supp.group(1))}/supplements/{supp.group(2)}?part={supp.group(3)}"
    m = PASSAGE_ID.fullmatch(returned)
    if returned.startswith("PMC") and m:
        return f"/papers/{quote_part(m.group(1))}#{quote_part(returned)}"
    if returned.startswith(("PMC", "PMID:", "DOI:")):
        return f"/papers/{quote_part(returned)}"
    if TERM_ID.fullmatch(returned):
        return f"/terms/{quote_part(returned)}"
    return ""


def _summary(args: dict[str, Any]) -> str:
    raw = args.get("body")
    body: dict[str, Any] = raw if isinstance(raw, dict) else {}
    parts = []
    for key in ("query", "q", "text", "gene", "pmcid", "term_id", "sections", "names"):
        v = body.get(key) if key in body else args.get(key)
        if v not in (None, "", []):
            parts.append(f"{key}={v if isinstance(v, str) else str(v)}"[:200])
    return " · ".join(parts)


KIND_OF = {"search_papers": "search", "search_passages": "search", "get_paper": "read", "submit": "submit",
           "register_names": "names"}


def timeline(trace: list[Any]) -> list[Event]:
    out = []
    for ev in trace:
        kind = KIND_OF.get(ev.tool, "terms" if "term" in ev.tool else "other")
        out.append(Event(seq=ev.seq, time=ev.time, kind=kind, tool=ev.tool, status=ev.status,
                         summary=_summary(ev.arguments), ids=[(i, link_for(i)) for i in ev.returned_ids[:IDS_SHOWN]],
                         more_ids=max(0, len(ev.returned_ids) - IDS_SHOWN), error=ev.error,
                         refused=bool(ev.error) and ev.status in (403, 409, 429)))
    return out


def _term_names(ctx: Ctx, session: Session | None, ids: list[str]) -> dict[str, str | None]:
    """Names of submitted term ids; ``None`` for an id the session hides (its name stays hidden too)."""
    hidden = session.hidden_terms if session else None
    names = hidden.names() if hidden is not None else []
    out: dict[str, str | None] = {}
    for i in ids[:500]:
        try:
            found = ctx.terms.lookup(i, hidden=names or None, hidden_descendants=bool(hidden and hidden.descendants))
            out[i] = found.term.name
        except FlysiftError as exc:
            out[i] = None if exc.code == "term_hidden" else ""
    return out


def _submitted_ids(annotations: dict[str, Any]) -> list[str]:
    ids = []
    for key, fields in (("task1_function", ("go_id",)), ("task2_expression", ("anatomy_id", "stage_id"))):
        items = annotations.get(key)
        for item in items if isinstance(items, list) else []:
            for f in fields:
                if isinstance(item, dict) and isinstance(item.get(f), str):
                    ids.append(item[f])
    return list(dict.fromkeys(ids))


def session_reasons(ctx: Ctx, s: Session, last: Any) -> dict[str, Any]:
    """Why each paper curators cited for the session's gene was or was not used (needs the ground truth)."""
    sessions = ctx.sessions
    try:
        cited = sessions.coverage(s, None).cited   # the gene's cited papers in the configured ground truth
    except FlysiftError as exc:
        return {"reasons": None, "reasons_note": exc.message, "reason_problems": []}
    events = [ev.model_dump() for ev in sessions.trace(s, 0, run_files.MAX_TRACE_EVENTS)]
    index = ServiceIndex(ctx)
    g = reasons_for(index, s.gene.id, s.gene.symbol, cited, events, last.annotations if last else None,
                    s.max_papers, s.synonym_policy)
    return {"reasons": g, "reason_rows": references(g), "reasons_note": None, "reason_problems": index.problems}


def session_view(ctx: Ctx, session_id: str, after: int) -> dict[str, Any]:
    sessions = ctx.sessions
    s = sessions.get(session_id, ctx.caller)
    trace = sessions.trace(s, after, TRACE_PAGE + 1)
    subs = sessions.submissions(s)
    last = subs[-1] if subs else None
    names = _term_names(ctx, s, _submitted_ids(last.annotations)) if last else {}
    return {"s": s, "events": timeline(trace[:TRACE_PAGE]), "more_events": len(trace) > TRACE_PAGE,
            "next_after": trace[TRACE_PAGE - 1].seq if len(trace) > TRACE_PAGE else None, "submissions": subs,
            "last": last, "term_names": names, **session_reasons(ctx, s, last),
            "refusals": sum(1 for e in trace if e.error and e.status in (403, 409, 429))}


async def session_page(ctx: Ctx) -> Response:
    sid = ctx.request.path_params["session_id"]
    after = int_param(ctx.request, "after", 0, 2**62, 0) or 0
    view = await run_in_threadpool(session_view, ctx, sid, after)
    return ctx.page("session.html", **view, title=f"Session {view['s'].id}")


async def close_session(ctx: Ctx) -> Response:
    form = await read_form(ctx.request)
    check_csrf(ctx, form)
    sid = ctx.request.path_params["session_id"]
    await run_in_threadpool(lambda: ctx.sessions.close(ctx.sessions.get(sid, ctx.caller)))
    return RedirectResponse(f"/sessions/{quote_part(sid)}", status_code=303, headers=HEADERS)


# ---- runs ---------------------------------------------------------------------------------------------------------

def _truth(ctx: Ctx) -> dict[str, GeneRecord] | None:
    """The configured FlyAOC ground truth, read once per process."""
    gt = ctx.app.state.settings.ground_truth
    if gt is None:
        return None
    cache = ctx.app.state.__dict__.setdefault("web_truth", {})
    if gt not in cache:
        cache[gt] = load_ground_truth(gt)
    return cache[gt]


async def runs_page(ctx: Ctx) -> Response:
    root = ctx.app.state.settings.runs_dir
    listed = await run_in_threadpool(run_files.list_runs, root)
    return ctx.page("runs.html", runs=list(listed), root_set=root is not None, title="Runs")


def run_view(ctx: Ctx, name: str, gene: str) -> dict[str, Any]:
    """The per-gene table, and for the chosen gene its predictions beside the ground truth and the reasons of its
    cited papers: from the run's coverage report, else by the rule over its trace (ranked for the chosen gene
    only: every other gene's unsurfaced papers are counted as not ranked yet)."""
    run = run_files.open_run(ctx.app.state.settings.runs_dir, name)
    truth = _truth(ctx)
    raw = run.info.get("config")
    config: dict[str, Any] = raw if isinstance(raw, dict) else {}
    budget = config["budget"] if isinstance(config.get("budget"), int) else 16
    policy = str(config.get("synonym_policy") or "snapshot")
    index = ServiceIndex(ctx)
    rows: list[dict[str, Any]] = []
    for gid in run.genes:
        g = run.gene(gid)
        t = truth.get(gid) if truth else None
        live = None
        if t is not None and g.trace and run.coverage is None:
            live = reasons_for(index, gid, g.symbol or t.gene_symbol, list(t.cited_pmcids),
                               [ev.model_dump() for ev in g.trace], g.record, budget, policy, rank=gid == gene)
        counts = run.coverage.counts.get(gid) if run.coverage else \
            ({r: n for r, n in live["counts"].items() if n} if live else None)
        rows.append({"g": g, "compare": run_files.compare(g.prediction, t), "truth": t, "counts": counts,
                     "live": live})
    chosen = next((r for r in rows if r["g"].gene_id == gene), None)
    if gene and chosen is None:
        run.gene(gene)   # 404 gene_not_in_run
    refs = None
    if chosen is not None:
        refs = run.coverage.references.get(gene) if run.coverage else \
            (references(chosen["live"]) if chosen["live"] else None)
    ids = [i for c in chosen["compare"] if c.task != "synonyms" for i in (*c.hits, *c.misses, *c.wrong)] \
        if chosen else []
    tasks = [t for t in ("go", "anatomy", "synonyms")   # a task no gene predicts or expects is left out
             if any(c.task == t and (c.hits or c.misses or c.wrong) for r in rows for c in r["compare"])]
    return {"run": run, "rows": rows, "chosen": chosen, "has_truth": truth is not None, "tasks": tasks,
            "refs": refs, "reason_problems": index.problems, "not_ranked": NOT_RANKED,
            "term_names": _term_names(ctx, None, list(dict.fromkeys(ids)))}


async def run_page(ctx: Ctx) -> Response:
    name = ctx.request.path_params["name"]
    gene = param(ctx.request, "gene", 40)
    view = await run_in_threadpool(run_view, ctx, name, gene)
    return ctx.page("run.html", **view, title=f"Run {name}")
