"""Sessions: one agent run with a reading budget, hidden terms, a synonym policy and a trace.

``models`` (the shapes), ``policy`` (the rules: budget decisions, expansions, coverage), ``service``
(``SessionService``: what routes and the trace middleware call), ``store`` and ``cluster_store`` (where sessions
live), ``keys`` (teams, API keys, scopes, rate limits).
"""

from search.sessions.keys import Principal
from search.sessions.models import (
                                    BudgetExhausted,
                                    BudgetPolicy,
                                    Coverage,
                                    HiddenSpec,
                                    ReadCharge,
                                    Session,
                                    SessionClosed,
                                    SessionCreate,
                                    Submission,
                                    SynonymPolicy,
                                    TraceEvent,
)
from search.sessions.service import SessionService
from search.sessions.store import SessionStore, open_store

__all__ = ["BudgetExhausted", "BudgetPolicy", "Coverage", "HiddenSpec", "Principal", "ReadCharge", "Session",
           "SessionClosed", "SessionCreate", "SessionService", "SessionStore", "Submission", "SynonymPolicy",
           "TraceEvent", "open_store"]
