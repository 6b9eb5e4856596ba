"""Sessions, the rules: one agent run (usually one gene) with a reading budget, hidden terms, a synonym policy and
a trace. They are plain functions, independent of HTTP and of the store (every store calls the budget decisions inside
its atomic step; ``search.sessions.service`` runs the rest):

* **Budget.** ``distinct`` (default): reading a paper's text spends one unit per distinct pmcid, re-reading is
  free. ``flyaoc``: every ``get_paper_text`` call spends one unit, as FlyAOC's reference does (spec §2.2); a call
  that continues a paper with its (signed) cursor is a continuation of a read, not a new one. Searching is always
  free. At the limit the decision raises ``BudgetExhausted`` with the message the agent reads.
* **Budget exactness: at most once, never for nothing.** The answer is computed first; then the store *reserves*
  the unit (atomically, so concurrent reads for the last unit cannot both win) and the unit is *spent* in the same
  transaction that records the answer as the call's trace event, just before the response's last byte is sent. A
  call that fails, or a process killed before that commit, spends nothing; its reservation lapses after
  ``RESERVATION_TTL_S``.
* **Synonym policy** (what ``gene=`` expands a search with): ``none``; ``snapshot`` (current symbol and full
  name); ``registered`` (plus names the agent registered in this session); ``full`` (the whole lexicon entry).
* **Supplementary files.** Reading one (a page of a sheet, table, text or PDF) is reading its paper: it spends that
  paper's unit under ``distinct`` (free once the paper was read, and it makes the paper read), one unit per call
  under ``flyaoc``… except that FlyAOC parity has no supplements: a ``flyaoc`` session cannot list or read them
  (``SupplementsOff``) and its searches see the articles' text only (``search_filters``). Listing is free.
* **Coverage**: against curator-cited pmcids, what the session read, what search surfaced but the agent did not
  read, and what it never saw.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

from search.core.errors import InvalidRequest
from search.core.models import Gene
from search.core.query import Filters
from search.flyaoc import groundtruth
from search.ontology.hidden import spec_ids
from search.ontology.model import Ontology
from search.schema.hidden import HiddenSpec
from search.schema.sessions import MAX_NAME_CHARS, Coverage, Session, SessionCreate, SynonymPolicy, TraceEvent
from search.sessions.models import BudgetExhausted, Reservation, SessionClosed, SupplementsOff, new_session_id
from search.text.lexicon import Lexicon

#: tools whose returned ids count as "surfaced" papers for coverage (everything that is not a read); reading a
#: paper's supplementary file is reading the paper
READ_TOOLS = frozenset({"get_paper", "read_supplement"})


def new_session(body: SessionCreate, team: str, gene: Gene) -> Session:
    hidden = HiddenSpec.model_validate(body.hidden_terms.model_dump()) if body.hidden_terms else None
    return Session(id=new_session_id(), team=team, gene=gene, max_papers=body.max_papers,
                   budget_policy=body.budget_policy, synonym_policy=body.synonym_policy,
                   hidden_terms=hidden, label=body.label, created_at=time.time())


def clean_names(names: Iterable[str]) -> list[str]:
    """Names an agent registers: stripped, non-empty, bounded, deduplicated."""
    out = [n.strip() for n in names if n and n.strip()]
    long = [n for n in out if len(n) > MAX_NAME_CHARS]
    if long:
        raise InvalidRequest(f"names are at most {MAX_NAME_CHARS} characters", details={"field": "names"})
    if not out:
        raise InvalidRequest("give at least one non-empty name", details={"field": "names"})
    return list(dict.fromkeys(out))


def expansion_names(policy: SynonymPolicy, gene: Gene, registered: Sequence[str] = ()) -> list[str]:
    """The names a search for ``gene`` is expanded with under ``policy`` (symbol first)."""
    if policy == "none":
        return []
    names = [gene.symbol, gene.fullname or ""]
    if policy == "registered":
        names += registered
    elif policy == "full":
        names += [*gene.symbol_synonyms, *gene.fullname_synonyms]
    return list(dict.fromkeys(n for n in names if n))


def search_expansions(lexicon: Lexicon, gene_ref: str, session: Session | None) -> list[str]:
    """Expansion names for a search's ``gene=``: the session's policy (registered names count only for the
    session's own gene); without a session, ``snapshot``."""
    gene = lexicon.resolve(gene_ref)
    if session is None:
        return expansion_names("snapshot", gene)
    registered = session.registered_names if gene.id == session.gene.id else ()
    return expansion_names(session.synonym_policy, gene, registered)


def supplements_allowed(session: Session | None) -> None:
    """Raise ``SupplementsOff`` for a FlyAOC-parity (``flyaoc`` budget) session."""
    if session is not None and session.budget_policy == "flyaoc":
        raise SupplementsOff(session.id)


def search_filters(session: Session | None, filters: Filters | None) -> Filters | None:
    """A search's filters under the session's rules: a ``flyaoc`` session searches the articles only."""
    if session is None or session.budget_policy != "flyaoc":
        return filters
    return (filters or Filters()).model_copy(update={"source": "paper"})


def hidden_ids_for(session: Session | None, ontology: Ontology | None = None) -> frozenset[str]:
    """The term ids hidden from this session: its named set plus its ids, with descendants in ``ontology`` when the
    session asks for them. Without a session nothing is hidden."""
    spec = session.hidden_terms if session else None
    return spec_ids(spec, ontology) if spec is not None else frozenset()


# ---- coverage -----------------------------------------------------------------------------------------------------

def cited_pmcids(ground_truth: Path) -> dict[str, list[str]]:
    """Gene id → pmcids cited by curators in a FlyAOC ground truth (in-corpus GO and expression rows), as the one
    ground-truth reader (``search.flyaoc.groundtruth``) reads them."""
    return groundtruth.cited_pmcids(ground_truth)


def pmcid_of(returned_id: str) -> str:
    """Passage ids are ``PMCID:section:paragraph``; paper ids are the pmcid."""
    return returned_id.split(":", 1)[0]


def coverage(session: Session, trace: Iterable[TraceEvent], cited: Sequence[str], source: str) -> Coverage:
    return trace_coverage(session.gene.id, session.papers_read, trace, cited, source)


def papers_read_in(trace: Iterable[TraceEvent]) -> list[str]:
    """The papers a trace read (a read tool answered without an error), in first-read order: a session's
    ``papers_read`` when only its trace is kept (a curation run directory)."""
    return list(dict.fromkeys(str(ev.arguments["pmcid"]) for ev in trace
                              if ev.tool in READ_TOOLS and ev.error is None and ev.status < 400
                              and isinstance(ev.arguments.get("pmcid"), str)))


def trace_coverage(gene_id: str, papers_read: Iterable[str], trace: Iterable[TraceEvent], cited: Sequence[str],
                   source: str) -> Coverage:
    """Coverage of ``cited`` by what was read and what the trace's other calls surfaced."""
    cited = list(dict.fromkeys(cited))
    read = set(papers_read)
    surfaced = {pmcid_of(i) for ev in trace if ev.tool not in READ_TOOLS and ev.error is None for i in ev.returned_ids}
    c_read = [p for p in cited if p in read]
    c_surf = [p for p in cited if p not in read and p in surfaced]
    never = [p for p in cited if p not in read and p not in surfaced]
    n = len(cited)
    return Coverage(gene=gene_id, cited=cited, read=c_read, surfaced_not_read=c_surf, never_surfaced=never,
                    read_fraction=round(len(c_read) / n, 4) if n else 0.0,
                    surfaced_fraction=round((len(c_read) + len(c_surf)) / n, 4) if n else 0.0, source=source)


# ---- the budget ---------------------------------------------------------------------------------------------------

def charge_decision(session_id: str, status: str, policy: str, max_papers: int, used: int, already_read: bool,
                    continuation: bool) -> bool:
    """Whether a read spends a unit (every store calls this inside its atomic step); raises when it may not read."""
    require_open(session_id, status)
    if already_read and (policy == "distinct" or continuation):
        return False
    if used >= max_papers:
        raise BudgetExhausted(used, max_papers)
    return True


def held_units(policy: str, live: Iterable[Reservation], papers_read: Collection[str]) -> int:
    """Units held by live reservations: under ``distinct`` one per pending paper not read yet, else their units."""
    if policy == "distinct":
        return len({r.pmcid for r in live if r.pmcid not in papers_read})
    return sum(r.unit for r in live)


def reserve_decision(session_id: str, status: str, policy: str, max_papers: int, used: int,
                     live: Sequence[Reservation], papers_read: Collection[str], pmcid: str,
                     continuation: bool) -> tuple[int, int]:
    """(unit, units spent or held once reserved) for a new read; raises when it may not read. Under ``distinct`` a
    read of a paper whose first read is still pending shares that read's unit."""
    pending_same = policy == "distinct" and any(r.pmcid == pmcid for r in live)
    held = held_units(policy, live, papers_read)
    unit = int(charge_decision(session_id, status, policy, max_papers, used + held,
                               pmcid in papers_read or pending_same, continuation))
    return unit, used + held + unit


def commit_decision(policy: str, max_papers: int, used: int, reservations: Iterable[Reservation],
                    papers_read: Collection[str], token: str | None, pmcid: str, continuation: bool,
                    now: float) -> bool:
    """Whether recording the answer of reservation ``token`` spends a unit. Never raises (the answer exists): a
    reservation that lapsed is charged only if a unit is still free, so the budget is never overspent."""
    live = [r for r in reservations if r.expires_at > now]
    mine = next((r for r in live if r.token == token), None)
    others = [r for r in live if r.token != token]
    if policy == "distinct":
        if pmcid in papers_read:
            return False
        if mine is not None or any(r.pmcid == pmcid for r in others):
            return True
    elif mine is not None:
        return bool(mine.unit)
    elif pmcid in papers_read and continuation:
        return False
    return used + held_units(policy, others, papers_read) < max_papers


def require_open(session_id: str, status: str) -> None:
    """Closed sessions take no reads, names or submissions."""
    if status != "open":
        raise SessionClosed(session_id)
