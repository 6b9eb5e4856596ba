"""SessionService without HTTP: who sees which session, a read is reserved after its answer and spent with its record,
coverage reads the ground truth once, submissions are bounded and validated against the session."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from search.core.config import Settings
from search.core.errors import NotFound, PaperNotFound, PayloadTooLarge
from search.core.models import Gene
from search.schema.sessions import SessionCreate, TraceEvent
from search.sessions.keys import LOCAL, Forbidden, Principal
from search.sessions.models import BudgetExhausted, ReadCharge
from search.sessions.service import MAX_SUBMISSION_BYTES, SessionService
from search.sessions.store import SqliteStore
from search.text.lexicon import Lexicon

GENE = Gene(id="FBgn0000463", symbol="Dl", fullname="Delta")


def _service(tmp_path: Path, auth: bool = False, **settings) -> SessionService:
    Lexicon([GENE]).save(tmp_path / "lexicon.tsv")
    return SessionService(SqliteStore(tmp_path / "sessions.sqlite"),
                          Settings(data_dir=tmp_path, auth=auth, **settings))


def _caller(team: str) -> Principal:
    return Principal(team=team, scopes=["agent"], key_id=f"k_{team}")


def _event(tool: str, returned: list[str] = (), status: int = 200) -> TraceEvent:
    return TraceEvent(time=time.time(), tool=tool, latency_ms=1.0, status=status, returned_ids=list(returned))


def test_with_auth_a_team_sees_only_its_own_sessions(tmp_path):
    svc = _service(tmp_path, auth=True)
    s = svc.create(SessionCreate(gene="Dl"), _caller("a"))
    assert s.team == "a" and s.gene.id == GENE.id
    assert svc.get(s.id, _caller("a")).id == s.id
    with pytest.raises(NotFound):  # another team's session is a 404, like a missing one
        svc.get(s.id, _caller("b"))
    with pytest.raises(Forbidden):
        svc.create(SessionCreate(gene="Dl", team="b"), _caller("a"))
    assert [x.id for x in svc.list_sessions(_caller("a"), None, 10, 0)] == [s.id]
    assert svc.list_sessions(_caller("b"), "a", 10, 0) == []  # with auth on, team= cannot look elsewhere


def test_a_read_is_spent_only_when_its_answer_is_recorded(tmp_path):
    svc = _service(tmp_path)
    s = svc.create(SessionCreate(gene="Dl", max_papers=1), LOCAL)
    held: list[ReadCharge] = []
    text, charge = svc.read(s, "PMC1", False, lambda: "the text", held.append)
    assert text == "the text" and held == [charge] and charge.charged
    assert svc.get(s.id, LOCAL).budget_used == 0  # reserved, not spent
    with pytest.raises(BudgetExhausted):  # ...but held: a second paper cannot take the last unit
        svc.read(s, "PMC2", False, lambda: "other", held.append)
    svc.record(s.id, _event("get_paper", ["PMC1"]), charge)
    after = svc.get(s.id, LOCAL)
    assert after.budget_used == 1 and after.papers_read == ["PMC1"]
    assert [e.tool for e in svc.trace(after, 0, 10)] == ["get_paper"]


def test_a_failed_answer_costs_nothing_except_an_unknown_paper_under_flyaoc(tmp_path):
    svc = _service(tmp_path)

    def missing() -> str:
        raise PaperNotFound("no such paper")

    for policy, cost in (("distinct", 0), ("flyaoc", 1)):
        s = svc.create(SessionCreate(gene="Dl", budget_policy=policy), LOCAL)
        held: list[ReadCharge] = []
        with pytest.raises(PaperNotFound):
            svc.read(s, "PMC404", False, missing, held.append)
        for charge in held:
            svc.record(s.id, _event("get_paper", status=404), charge)
        assert len(held) == cost and svc.get(s.id, LOCAL).budget_used == cost


def test_coverage_reads_the_ground_truth_once(tmp_path):
    gt = tmp_path / "gt.jsonl"
    row = {"gene_id": GENE.id, "gene_symbol": "Dl", "task2_expression": [],
           "task1_function": [{"go_id": "GO:0000001", "pmcid": "PMC1", "in_corpus": True},
                              {"go_id": "GO:0000002", "pmcid": "PMC2", "in_corpus": True}],
           "task3_synonyms": {"fullname_synonyms": [], "symbol_synonyms": []}}
    gt.write_text(json.dumps(row) + "\n")
    svc = _service(tmp_path, ground_truth=gt)
    s = svc.create(SessionCreate(gene="Dl"), LOCAL)
    svc.record(s.id, _event("search_papers", ["PMC2"]))
    cov = svc.coverage(svc.get(s.id, LOCAL), None)
    assert (cov.cited, cov.surfaced_not_read, cov.source) == (["PMC1", "PMC2"], ["PMC2"], "ground_truth")
    gt.write_text("")  # cached: the file is not read again
    assert svc.coverage(s, None).cited == ["PMC1", "PMC2"]
    assert svc.coverage(s, ["PMC9,PMC1"]).cited == ["PMC9", "PMC1"]


def test_submissions_are_bounded_and_checked_against_the_session(tmp_path):
    svc = _service(tmp_path)
    s = svc.create(SessionCreate(gene="Dl", hidden_terms={"ids": ["GO:0000001"]}), LOCAL)
    with pytest.raises(PayloadTooLarge):
        svc.submit(s, {"gene_id": GENE.id, "x": "a" * MAX_SUBMISSION_BYTES})
    pred = {"gene_id": GENE.id, "gene_symbol": "Dl",
            "task1_function": [{"go_id": "GO:0000001", "aspect": "P", "qualifier": "involved_in"}]}
    report, seq = svc.submit(s, pred)
    assert seq == 1 and not report.valid and any("GO:0000001" in e for e in report.errors)
    assert [x.valid for x in svc.submissions(s)] == [False]
