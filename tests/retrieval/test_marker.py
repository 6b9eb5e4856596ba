"""The paper view's marker: marking a paper's title, abstract and body in one pass gives each text the marks it gets
on its own, field restrictions kept."""

from __future__ import annotations

import pytest

from search.core.query import Clause
from search.retrieval.browse import Marker
from search.retrieval.planner import expansion_clause
from search.text.highlight import Highlighters

TITLE = ["Dl and l(2)gl: expression of lethal (2) giant larvae"]
ABSTRACT = ["Dl expression in the disc.", "", "The lethal (2) giant larvae gene; dl is not Dl."]
BODY = ["Expression of l(2)gl needs Dl.", "No match here.", "giant larvae, lethal, and Dl expression (Dl)."]
FIELDS = [("title", TITLE), ("abstract", ABSTRACT), (None, BODY)]
GENE = [expansion_clause("l(2)gl"), expansion_clause("lethal (2) giant larvae")]


@pytest.mark.parametrize("clauses", [
    [Clause(text="Dl", view="symbol"), Clause(text="expression"), *GENE],            # no field: one pass
    [Clause(text="Dl", view="symbol", field="title"), Clause(text="expression"), *GENE],   # title apart
    [Clause(text="expression", field="abstract"), *GENE],
    [],
])
def test_fields_marked_together_get_the_marks_of_each_text_alone(clauses):
    marker = Marker(clauses)
    together = marker.marks_fields(FIELDS)
    for (field, texts), marks in zip(FIELDS, together, strict=True):
        assert len(marks) == len(texts)
        for text, (found, names) in zip(texts, marks, strict=True):
            alone = marker.marks(text, field)
            assert (found, names) == (alone.highlights, alone.names)
            assert all(text[s:e] for s, e in found)
    if clauses:
        assert any(found for marks in together for found, _ in marks)


def test_fields_lit_by_the_same_clauses_share_one_highlighter():
    plain = Highlighters([Clause(text="Dl", view="symbol"), Clause(text="expression")])
    assert plain.for_field("title") is plain.for_field("abstract") is plain.for_field(None)
    titled = Highlighters([Clause(text="Dl", view="symbol", field="title"), Clause(text="expression")])
    assert titled.for_field("title") is not titled.for_field(None)
    assert titled.for_field("abstract") is titled.for_field(None)
    assert titled.for_field("title").spans("Dl expression") == [(0, 2), (3, 13)]
    assert titled.for_field(None).spans("Dl expression") == [(3, 13)]
