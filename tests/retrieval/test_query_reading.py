"""Issue #26 items 1 and 2: the query language read into the engine query, and slash/hyphen compounds.

A query whose syntax changes nothing is planned exactly as plain text (what every plain query got before); operators
and fields become the ``tree`` both engines compile; compounds are read as their parts unless the whole is a name."""

from __future__ import annotations

import pytest

from search.core.query import BoolNode, Clause, FilterNode
from search.core.querylang import QuerySyntaxError, parse
from search.retrieval.boolean import positive_text, read_query
from search.retrieval.planner import compound_parts, explain, plan
from search.text.lexicon import Lexicon

PLAIN = ["Dl", "dl gradient", "What is the role of Dl in the wing?", "WING DISC GROWTH", "abd-A Su(H) l(2)gl α-Cat",
         "E(spl)m8-HLH", '"wing disc" growth', "gene:so eye", "Parkinson's disease", "1) bile duct and 2) giant cell",
         "to be or not to be", "Wnt/β-catenin signaling"]


def read(text, target="papers", **kw):
    return read_query(text, parse(text), target, **kw)[0]


@pytest.mark.parametrize("text", PLAIN)
def test_a_query_without_syntax_is_planned_as_plain_text(text):
    assert read(text) == plan(text)


def test_alternatives_and_top_level_filters_change_nothing_else():
    assert read("(Dl OR wing) disc") == plan("Dl wing disc")
    q = read("Shh year:2005..2010 section:results pmcid:(PMC1 OR PMC2)")
    assert q.tree is None and q.clauses == plan("Shh").clauses
    assert q.filters.model_dump(exclude_none=True) == {"year_from": 2005, "year_to": 2010,
                                                         "section_types": ["RESULTS"], "pmcids": ["PMC1", "PMC2"]}


def test_minus_and_AND_build_a_tree_whose_words_keep_their_reading():
    q = read("Shh -limb")
    assert q.tree == BoolNode(should=[Clause(text="Shh", view="symbol")],
                              must_not=[BoolNode(should=[Clause(text="limb"),
                                                         Clause(text="limb", view="symbol", boost=0.5)])])
    assert [c.text for c in q.clauses] == ["Shh"]   # highlighting: only what can match
    q = read("Shh AND limb")
    assert len(q.tree.must) == 2 and not q.tree.should
    # the hazards stay symbols inside a tree
    q = read("abd-A AND Su(H) -dl")
    assert q.tree.should[0].must == [Clause(text="abd-A", view="symbol"), Clause(text="Su(H)", view="symbol")]


def test_fields_mark_their_clauses_and_filters_restrict_or_exclude():
    q = read('title:BRCA2 abstract:"DNA repair"')
    assert {c.field for c in q.clauses} == {"title", "abstract"} and q.fields() == {"title", "abstract"}
    q = read("Shh -section:methods year:2005")
    assert q.tree.must_not == [FilterNode(field="section", values=["METHODS"])]
    assert q.tree.filter == [FilterNode(field="year", year_from=2005, year_to=2005)]
    q = read("Shh (limb OR year:2005)")   # inside a group a filter is an operand
    assert FilterNode(field="year", year_from=2005, year_to=2005) in q.tree.should[1].should


def test_stop_words_of_a_longer_query_leave_their_group():
    q = read("the AND wing disc growth")
    assert q.dropped == ["the"] and q.tree.should[0] == BoolNode(must=[Clause(text="wing")])


@pytest.mark.parametrize(("text", "target", "rule"), [
    ("NOT limb", "papers", "nothing_to_find"),
    ("-limb -wing", "papers", "nothing_to_find"),
    ("year:20x5", "papers", "year"),
    ("year:2010..2005", "papers", "year"),
    ("section:introductions", "papers", "section"),
    ("section:abstract Dl", "papers", "section"),
    ("title:Dl", "passages", "field_target"),
    ('year:"2005"', "papers", "filter_value"),
])
def test_what_the_reader_refuses_is_a_syntax_error_with_a_position(text, target, rule):
    with pytest.raises(QuerySyntaxError) as err:
        read(text, target)
    assert err.value.details["rule"] == rule and isinstance(err.value.details["position"], int)


def test_abstract_applies_to_passages_and_section_abstract_filters_them():
    assert read("abstract:Dl", "passages").clauses == [Clause(text="Dl", view="symbol", field="abstract")]
    assert read("section:abstract Dl", "passages").filters.section_types == ["ABSTRACT"]


def test_dense_search_embeds_the_words_searched_for():
    assert positive_text(parse('Shh -limb title:"sonic hedgehog" year:2005')) == "Shh sonic hedgehog"


def test_explain_reads_the_tree_token_by_token():
    text = "Shh AND NOT limb"
    q, reader = read_query(text, parse(text), "papers")
    trace, case = reader.reading()
    out = explain(text, q, trace=trace, case=case)
    assert [t["token"] for t in out["tokens"]] == ["Shh", "limb"]


# ---- item 2: compounds ------------------------------------------------------------------------------------------

def views(q):
    return [(c.text, c.view) for c in q.clauses]


def test_slash_and_hyphen_compounds_are_read_as_their_parts_too():
    assert views(plan("Wnt/β-catenin"))[:3] == [("Wnt/β-catenin", "symbol"), ("Wnt", "symbol"), ("β-catenin", "symbol")]
    assert views(plan("PI3K/Akt")) == [("PI3K/Akt", "symbol"), ("PI3K", "symbol"), ("Akt", "symbol")]
    assert views(plan("Notch/Delta")) == [("Notch/Delta", "symbol"), ("Notch", "word"), ("Delta", "word")]
    assert views(plan("Notch-Delta signaling"))[:3] == [("Notch-Delta", "symbol"), ("Notch", "word"),
                                                        ("Delta", "word")]
    out = explain("PI3K/Akt", plan("PI3K/Akt"))
    assert out["tokens"][0]["why"] == "compound: read as its parts too"
    assert [p["token"] for p in out["tokens"][0]["parts"]] == ["PI3K", "Akt"]


@pytest.mark.parametrize("token", ["abd-A", "Abd-B", "α-Cat", "β-catenin", "E(spl)m8-HLH", "Su(var)3-9", "iab-4",
                                   "l(2)gl", "high-fat", "and/or", "mg/kg", "BMP2/4", "A/P", "D/V", "Dl-GAL4"])
def test_names_and_prose_stay_whole(token):
    assert compound_parts(token) == []


def test_a_name_the_lexicon_knows_stays_whole():
    lex = Lexicon.bundled()
    known = lex.compounds()
    assert "MYPT-75D" in known and compound_parts("MYPT-75D") == ["MYPT", "75D"]
    assert compound_parts("MYPT-75D", compounds=known) == []
    assert views(plan("MYPT-75D", compounds=known)) == [("MYPT-75D", "symbol")]
