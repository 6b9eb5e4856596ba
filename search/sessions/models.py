"""Sessions: one agent run (usually one gene) with a reading budget, hidden terms, a synonym policy and a trace.

The rules live here, independent of HTTP and of the store:

* **Budget.** ``distinct`` (default): reading a paper's text spends one unit per distinct pmcid, re-reading is
  free. ``flyaoc``: every ``get_paper_text`` call spends one unit, as FlyAOC's reference does (spec §2.2); a call
  that continues a paper with its (signed) cursor is a continuation of a read, not a new one. Searching is always
  free. At the limit the store raises ``BudgetExhausted`` with the message the agent reads.
* **Budget exactness: at most once, never for nothing.** The answer is computed first; then the store *reserves*
  the unit (atomically, so concurrent reads for the last unit cannot both win) and the unit is *spent* in the same
  transaction that records the answer as the call's trace event, just before the response's last byte is sent. A
  call that fails, or a process killed before that commit, spends nothing; its reservation lapses after
  ``RESERVATION_TTL_S``.
* **Synonym policy** (what ``gene=`` expands a search with): ``none``; ``snapshot`` (current symbol and full
  name); ``registered`` (plus names the agent registered in this session); ``full`` (the whole lexicon entry).
* **Coverage**: against curator-cited pmcids, what the session read, what search surfaced but the agent did not
  read, and what it never saw.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from search.core.errors import FlysiftError, InvalidRequest
from search.core.inputs import bounded_stored, quoted
from search.text.lexicon import Lexicon
from search.core.models import Gene
from search.ontology.hidden import HiddenSpec

SynonymPolicy = Literal["none", "snapshot", "registered", "full"]
BudgetPolicy = Literal["distinct", "flyaoc"]
MAX_PAPERS = 1000
MAX_NAME_CHARS = 200
MAX_GENE_REF_CHARS = 200
MAX_HIDDEN_IDS = 10_000
MAX_TERM_ID_CHARS = 64
#: what ``new_session_id`` makes (old stores hold the same shape); anything else is refused before a lookup
SESSION_ID = re.compile(r"ses_[A-Za-z0-9_-]{1,64}")
#: tools whose returned ids count as "surfaced" papers for coverage (everything that is not a read)
READ_TOOLS = frozenset({"get_paper"})
#: how long a reserved unit is held for an answer being recorded; a killed process's reservations lapse after it
RESERVATION_TTL_S = 60.0
T = TypeVar("T")


class BudgetExhausted(FlysiftError):
    status = 409
    code = "budget_exhausted"

    def __init__(self, used: int, max_papers: int):
        super().__init__(f"Paper limit reached ({used}/{max_papers}). Submit your annotations.",
                         details={"used": used, "max_papers": max_papers})


class SessionClosed(FlysiftError):
    status = 409
    code = "session_closed"

    def __init__(self, session_id: str):
        super().__init__(f"Session {session_id} is closed; create a new session to continue.",
                         details={"session_id": session_id})


class HiddenTerms(HiddenSpec):
    """Hidden terms as a request gives them: the stored :class:`HiddenSpec`, with bounds on what may be sent."""

    ids: list[Annotated[str, StringConstraints(min_length=3, max_length=MAX_TERM_ID_CHARS)]] = Field(
        default_factory=list, max_length=MAX_HIDDEN_IDS, description="Term ids, e.g. GO:0005634")


class SessionCreate(BaseModel):
    """Body of POST /v1/sessions."""

    model_config = ConfigDict(extra="forbid")

    gene: str = Field(min_length=1, max_length=MAX_GENE_REF_CHARS,
                      description="FlyBase id (FBgn…) or current symbol (case-sensitive)")
    team: str | None = Field(None, max_length=64, description="With auth on, the key's team (may be omitted); with "
                                                              "auth off, any label (default 'local')")
    max_papers: int = Field(16, ge=1, le=MAX_PAPERS, description="Reading budget")
    budget_policy: BudgetPolicy = Field("distinct", description="distinct: one unit per distinct paper; "
                                                                "flyaoc: one unit per get_paper_text call")
    synonym_policy: SynonymPolicy = "snapshot"
    hidden_terms: HiddenTerms | None = None
    label: str | None = Field(None, max_length=200, description="Free text, e.g. the harness and run name")


class Session(BaseModel):
    id: str
    team: str
    gene: Gene
    max_papers: int
    budget_policy: BudgetPolicy = "distinct"
    synonym_policy: SynonymPolicy = "snapshot"
    hidden_terms: HiddenSpec | None = None
    label: str | None = None
    status: Literal["open", "closed"] = "open"
    created_at: float
    closed_at: float | None = None
    budget_used: int = 0
    papers_read: list[str] = Field(default_factory=list, description="Distinct pmcids read, in first-read order")
    registered_names: list[str] = Field(default_factory=list)
    submissions: int = 0

    @property
    def budget_left(self) -> int:
        return max(0, self.max_papers - self.budget_used)


class ReadCharge(BaseModel):
    """What one read costs: ``charged`` is false for a free re-read (or a continuation page). ``used`` counts the
    units spent and held by answers being recorded. ``token`` names the store's reservation until it is committed."""

    pmcid: str
    charged: bool
    used: int
    max_papers: int
    continuation: bool = False
    token: str | None = None
    seq: int | None = Field(None, description="The trace number reserved for the read's event (cluster store)")


M = TypeVar("M", bound=BaseModel)


def _from_stored(cls: type[M], raw: str | bytes, unreadable: dict[str, Any]) -> M:
    """A stored record, read even when an older version stored what the fast parser refuses (e.g. a body nested 200
    deep): such values are cut (``search.core.inputs.bounded``); a record no parser can read becomes ``unreadable``."""
    try:
        return cls.model_validate_json(raw)
    except ValidationError:
        pass
    data = bounded_stored(raw)
    if isinstance(data, dict):
        try:
            return cls.model_validate(data)
        except ValidationError:
            pass
    seq = re.match(rb'\{"seq":(\d{1,18})[,}]', raw if isinstance(raw, bytes) else raw.encode("utf-8", "replace"))
    return cls.model_validate({**unreadable, "seq": int(seq.group(1)) if seq else 0})


class TraceEvent(BaseModel):
    seq: int = 0
    time: float
    tool: str
    method: str = ""
    path: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)
    returned_ids: list[str] = Field(default_factory=list)
    latency_ms: float
    status: int
    error: dict[str, Any] | None = None

    @classmethod
    def from_stored(cls, raw: str | bytes) -> TraceEvent:
        return _from_stored(cls, raw, {"time": 0.0, "tool": "(unreadable)", "latency_ms": 0.0, "status": 0,
                                       "error": {"code": "unreadable_record", "message": "This event was stored "
                                                 "in a form that cannot be read back."}})


class Submission(BaseModel):
    seq: int = 0
    time: float
    annotations: dict[str, Any]
    report: dict[str, Any]
    valid: bool

    @classmethod
    def from_stored(cls, raw: str | bytes) -> Submission:
        return _from_stored(cls, raw, {"time": 0.0, "annotations": {}, "valid": False,
                                       "report": {"errors": ["This submission was stored in a form that cannot be "
                                                             "read back."]}})


class Coverage(BaseModel):
    gene: str
    cited: list[str]
    read: list[str]
    surfaced_not_read: list[str]
    never_surfaced: list[str]
    read_fraction: float = Field(description="Cited papers read / cited papers (0 when none are cited)")
    surfaced_fraction: float = Field(description="Cited papers read or surfaced by search / cited papers")
    source: str = Field(description="Where the cited list came from: request or ground_truth")


def new_session_id() -> str:
    return "ses_" + secrets.token_urlsafe(12)


def check_session_id(session_id: str) -> str:
    """``session_id`` if it is shaped like one (:data:`SESSION_ID`), else 422: ids are looked up, never guessed at."""
    if not SESSION_ID.fullmatch(session_id):
        raise InvalidRequest(f"Invalid session id {quoted(session_id)}: session ids look like ses_… as "
                             "POST /v1/sessions returns them.", details={"field": "session_id",
                                                                         "pattern": SESSION_ID.pattern})
    return session_id


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


def hidden_ids_for(session: Session | None, ontology=None) -> frozenset[str]:
    """The term ids hidden from this session: its named set plus its ids, with descendants in ``ontology`` (a
    ``search.ontology.model.Ontology``) when the session asks for them. Without a session nothing is hidden."""
    spec = session.hidden_terms if session else None
    return spec.hidden_ids(ontology) if spec is not None else frozenset()


# ---- coverage -------------------------------------------------------------------------------------------------

def cited_pmcids(ground_truth: Path) -> dict[str, list[str]]:
    """Gene id → pmcids cited by curators in a FlyAOC ground truth (in-corpus GO and expression rows)."""
    out: dict[str, list[str]] = {}
    with open(ground_truth, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            row = json.loads(line)
            rows = [*row.get("task1_function", []), *row.get("task2_expression", [])]
            out[row["gene_id"]] = list(dict.fromkeys(r["pmcid"] for r in rows if r.get("in_corpus") and r.get("pmcid")))
    return out


def pmcid_of(returned_id: str) -> str:
    """Passage ids are ``PMCID:section:paragraph``; paper ids are the pmcid."""
    return returned_id.split(":", 1)[0]


def coverage(session: Session, trace: Iterable[TraceEvent], cited: Sequence[str], source: str) -> Coverage:
    cited = list(dict.fromkeys(cited))
    read = set(session.papers_read)
    surfaced = {pmcid_of(i) for ev in trace if ev.tool not in READ_TOOLS and ev.error is None for i in ev.returned_ids}
    c_read = [p for p in cited if p in read]
    c_surf = [p for p in cited if p not in read and p in surfaced]
    never = [p for p in cited if p not in read and p not in surfaced]
    n = len(cited)
    return Coverage(gene=session.gene.id, cited=cited, read=c_read, surfaced_not_read=c_surf, never_surfaced=never,
                    read_fraction=round(len(c_read) / n, 4) if n else 0.0,
                    surfaced_fraction=round((len(c_read) + len(c_surf)) / n, 4) if n else 0.0, source=source)


def charge_decision(session_id: str, status: str, policy: str, max_papers: int, used: int, already_read: bool,
                    continuation: bool) -> bool:
    """Whether a read spends a unit (every store calls this inside its atomic step); raises when it may not read."""
    require_open(session_id, status)
    if already_read and (policy == "distinct" or continuation):
        return False
    if used >= max_papers:
        raise BudgetExhausted(used, max_papers)
    return True


@dataclass(frozen=True)
class Reservation:
    """A unit held for an answer being recorded (``unit`` 0: the read is free, or shares a paper's pending unit)."""

    token: str
    pmcid: str
    unit: int
    expires_at: float


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


def charged_read(store, session: Session, pmcid: str, continuation: bool, read: Callable[[], T],
                 hold: Callable[[ReadCharge], None]) -> tuple[T, ReadCharge]:
    """Compute the answer with ``read``, then reserve its unit in ``store`` and pass the reservation to ``hold``:
    whoever records the answer commits it (``store.commit_read``, the trace middleware over HTTP), so nothing is
    spent for a call that fails. A bad argument never costs; under ``flyaoc`` an unknown pmcid does (the reference
    counts every call), and the reservation is held for the 404 answer."""
    from search.retrieval.service import PaperNotFound

    try:
        answer = read()
    except PaperNotFound:
        if session.budget_policy == "flyaoc":
            hold(store.reserve_read(session.id, pmcid, continuation))
        raise
    charge = store.reserve_read(session.id, pmcid, continuation)
    hold(charge)
    return answer, charge
