"""``SessionService``: what a session does, for every interface. Routes and the trace middleware call it; the rules
are ``search.sessions.policy``, the data is a ``SessionStore``.

It owns creating and listing sessions (who may see which), the expansions a search gets from a session, reads (the
answer first, then the unit reserved, then spent with the answer's record: ``read`` and ``record``), registered names,
traces, coverage (with the ground truth's cited papers cached) and submissions (validated, then stored).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, TypeVar

from search.core.config import Settings
from search.core.errors import FlysiftError, InvalidRequest, NotFound, PaperNotFound, PayloadTooLarge
from search.flyaoc.validation import lookup_in, validate_output
from search.ontology.model import Ontology
from search.schema.flyaoc import ValidationReport
from search.schema.sessions import Coverage, Session, SessionCreate, Submission, TraceEvent
from search.sessions.keys import ApiKey, Forbidden, Principal, check_team_name
from search.sessions.models import ReadCharge, check_session_id, session_not_found
from search.sessions.policy import cited_pmcids, clean_names, coverage, hidden_ids_for, new_session, search_expansions
from search.sessions.store import SessionStore
from search.text.lexicon import Lexicon

#: a FlyAOC prediction object is a few KB; this bounds what one submission stores (twice: submission and trace)
MAX_SUBMISSION_BYTES = 1_000_000
#: coverage reads at most this many trace events of a session
MAX_COVERAGE_EVENTS = 1_000_000
T = TypeVar("T")


class Ontologies(Protocol):
    """What submission checks need of the term service: the indexed ontologies by name."""

    def names(self) -> list[str]: ...
    def ontology(self, name: str) -> Ontology: ...


def load_lexicon(spec: str | None, data_dir: Path) -> Callable[[], Lexicon]:
    """A loader of the gene lexicon: the configured sources, else ``<data_dir>/lexicon.tsv[.gz]``, else the FlyBase
    gene table shipped with flysift (``Lexicon.bundled``: sessions work without configuration), loaded once."""
    @lru_cache(maxsize=1)
    def _load() -> Lexicon:
        if spec:
            return Lexicon.load(p.strip() for p in spec.split(",") if p.strip())
        for name in ("lexicon.tsv", "lexicon.tsv.gz"):
            if (data_dir / name).exists():
                return Lexicon.load([data_dir / name])
        return Lexicon.bundled()

    return _load


class SessionService:
    """Sessions over ``store``; ``terms`` (the term service) checks submitted ids, none: ids are checked for format.
    With ``settings.auth`` a caller sees its team's sessions only; another team's session is a 404, like a missing
    one."""

    def __init__(self, store: SessionStore, settings: Settings, terms: Ontologies | None = None):
        self.store = store
        self.settings = settings
        self.terms = terms
        self._lexicon = load_lexicon(settings.lexicon, settings.data_dir)
        self._cited: dict[Path, dict[str, list[str]]] = {}
        self._cited_lock = threading.Lock()

    # ---- who and what -----------------------------------------------------------------------------------------
    def lexicon(self) -> Lexicon:
        """The gene lexicon; without one, genes cannot be named (404 ``lexicon_missing``)."""
        lex = self._lexicon()
        if not len(lex):
            raise NotFound("No gene lexicon is loaded: set FLYSIFT_LEXICON to fb_synonym_*.tsv, genes.csv or "
                           "ground_truth_*.jsonl files (comma-separated), or put lexicon.tsv in the data directory.",
                           code="lexicon_missing")
        return lex

    def api_key(self, key_id: str) -> ApiKey | None:
        return self.store.get_key(key_id)

    def _team(self, caller: Principal, team: str | None) -> str:
        """The team a call acts for: with auth on, the key's (naming another is 403); with auth off, any valid name."""
        if self.settings.auth:
            if team not in (None, caller.team):
                raise Forbidden(f"This key belongs to team {caller.team!r}; it cannot create sessions for {team!r}.",
                                details={"team": caller.team})
            return caller.team
        return check_team_name(team or caller.team)

    # ---- sessions ---------------------------------------------------------------------------------------------
    def create(self, body: SessionCreate, caller: Principal) -> Session:
        team = self._team(caller, body.team)
        session = new_session(body, team, self.lexicon().resolve(body.gene))
        hidden_ids_for(session)  # an unknown named set fails here, not at the first term search
        self.store.create_session(session)
        return session

    def list_sessions(self, caller: Principal, team: str | None, limit: int, offset: int) -> list[Session]:
        """The caller's team's sessions (with auth off: ``team``'s, default the caller's), newest first."""
        who = caller.team if self.settings.auth else check_team_name(team or caller.team)
        return self.store.list_sessions(who, limit, offset)

    def get(self, session_id: str, caller: Principal) -> Session:
        """The session if the caller's team owns it (any session with auth off); another team's id is a 404."""
        s = self.store.get_session(check_session_id(session_id))
        if s is None or (self.settings.auth and s.team != caller.team):
            raise session_not_found(session_id)
        return s

    def close(self, session: Session) -> Session:
        return self.store.close_session(session.id)

    def fold_set(self) -> frozenset[str]:
        """The loaded lexicon's fold set (``Lexicon.foldable``: symbols it writes in several cases for one gene only)
        for the planner's reading of free text; empty without a lexicon. Its symbols are not passed as known symbols:
        a third of FlyBase's current symbols are English words (``egg``, ``arm``, ``cold``, ``Hand``, ``Men``) that
        prose must keep reading as words; ``gene:``, quotes and ``gene=`` force the gene reading."""
        try:
            lex = self._lexicon()
        except (FlysiftError, OSError):   # a lexicon that does not load fails sessions (which say why), not search
            return frozenset()
        return lex.foldable() if lex is not None else frozenset()

    def compound_set(self) -> frozenset[str]:
        """The loaded lexicon's names with a slash or hyphen (``Lexicon.compounds``), which the planner keeps whole;
        empty without a lexicon."""
        try:
            lex = self._lexicon()
        except (FlysiftError, OSError):
            return frozenset()
        return lex.compounds() if lex is not None else frozenset()

    def expansions(self, gene_ref: str | None, session: Session | None) -> list[str]:
        """The names a search's ``gene=`` adds, under the session's synonym policy (``snapshot`` without one)."""
        return search_expansions(self.lexicon(), gene_ref, session) if gene_ref else []

    # ---- reads and the trace ----------------------------------------------------------------------------------
    def read(self, session: Session, pmcid: str, continuation: bool, answer: Callable[[], T],
             hold: Callable[[ReadCharge], None]) -> tuple[T, ReadCharge]:
        """Compute the answer, then reserve its unit and pass the reservation to ``hold``: whoever records the answer
        spends it with ``record`` (over HTTP the trace middleware, with the call's event), so nothing is spent for a
        call that fails. A bad argument never costs; under ``flyaoc`` an unknown pmcid does (the reference counts
        every call), and the reservation is held for the 404 answer."""
        try:
            text = answer()
        except PaperNotFound:
            if session.budget_policy == "flyaoc":
                hold(self.store.reserve_read(session.id, pmcid, continuation))
            raise
        charge = self.store.reserve_read(session.id, pmcid, continuation)
        hold(charge)
        return text, charge

    def record(self, session_id: str, event: TraceEvent, charge: ReadCharge | None = None) -> None:
        """Store a call's trace event; a read's reserved unit is spent in the same transaction (when it was
        answered: status below 500). A session deleted meanwhile has nothing to record into."""
        try:
            if charge is None:
                self.store.append_trace(session_id, event)
            else:
                self.store.commit_read(session_id, charge, event, event.status < 500)
        except FlysiftError:
            pass

    def trace(self, session: Session, after: int, limit: int) -> list[TraceEvent]:
        return self.store.trace(session.id, after, limit)

    def register_names(self, session: Session, names: Iterable[str]) -> list[str]:
        return self.store.register_names(session.id, clean_names(names))

    # ---- coverage ---------------------------------------------------------------------------------------------
    def coverage(self, session: Session, pmcids: list[str] | None) -> Coverage:
        """Coverage of ``pmcids`` (repeated or comma-separated), else of the gene's cited papers in the configured
        FlyAOC ground truth."""
        if pmcids:
            cited, source = [x.strip() for v in pmcids for x in v.split(",") if x.strip()], "request"
        else:
            gt = self.settings.ground_truth
            if gt is None:
                raise InvalidRequest("No cited papers: pass pmcids=… or load a FlyAOC ground truth with "
                                     "FLYSIFT_GROUND_TRUTH.", details={"field": "pmcids"})
            cited, source = self._cited_by(gt).get(session.gene.id, []), "ground_truth"
        return coverage(session, self.store.trace(session.id, 0, MAX_COVERAGE_EVENTS), cited, source)

    def _cited_by(self, ground_truth: Path) -> dict[str, list[str]]:
        with self._cited_lock:
            if ground_truth not in self._cited:
                self._cited[ground_truth] = cited_pmcids(ground_truth)
            return self._cited[ground_truth]

    # ---- submissions ------------------------------------------------------------------------------------------
    def _ontologies(self) -> list[Ontology]:
        return [self.terms.ontology(n) for n in self.terms.names()] if self.terms is not None else []

    def submit(self, session: Session, annotations: dict[str, Any]) -> tuple[ValidationReport, int]:
        """Validate a FlyAOC prediction against the session (hidden ids, papers read, gene) and the indexed
        ontologies, and store it with its report; returns the report and the submission's number."""
        size = len(json.dumps(annotations, ensure_ascii=False).encode())
        if size > MAX_SUBMISSION_BYTES:
            raise PayloadTooLarge(f"The submission is {size:,} bytes; at most {MAX_SUBMISSION_BYTES:,} are stored.",
                                  details={"field": "body", "max_bytes": MAX_SUBMISSION_BYTES})
        onts = self._ontologies()
        go = next((o for o in onts if getattr(o, "name", "") == "go"), None)
        report = validate_output(annotations, lookup=lookup_in(onts) if onts else None,
                                 hidden=hidden_ids_for(session, go), read_pmcids=set(session.papers_read),
                                 gene_id=session.gene.id)
        seq = self.store.add_submission(session.id, Submission(time=time.time(), annotations=annotations,
                                                               report=report.model_dump(), valid=report.valid))
        return report, seq

    def submissions(self, session: Session) -> list[Submission]:
        return self.store.submissions(session.id)
