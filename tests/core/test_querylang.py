"""Issue #26 item 1: the query language's grammar. Free text that merely contains its characters keeps its reading
(gene hazards, prose with "and", enumerations); operators, groups and fields are read as written; every syntax error
is ``query_syntax`` with the position, the rule and a hint."""

from __future__ import annotations

import pytest

from search.core.querylang import (
    MAX_DEPTH,
    Field,
    Group,
    Phrase,
    QuerySyntaxError,
    Unary,
    Word,
    leaves,
    parse,
)

HAZARDS = ["w[1118]", "y[1] w[*]", "abd-A", "Su(H)", "E(spl)m8-HLH", "l(2)gl", "α-Cat", "Dl", "dl", "Df(3L)ED4543",
           "(Su(H)),", "Ca2+", "GO:0007219", "Notch:Delta", "5'-UTR", "-/-", "1)", "BMP2/4", "wing (Fig. 2)"]


@pytest.mark.parametrize("text", HAZARDS)
def test_gene_hazards_and_prose_characters_are_text(text):
    parsed = parse(text)
    assert all(isinstance(leaf, Word | Phrase) for leaf in leaves(parsed.tree)), parsed
    # nothing of the text is lost or read as an operator (parentheses of a group aside)
    assert "".join(leaf.text for leaf in leaves(parsed.tree) if isinstance(leaf, Word)).replace("(", "").replace(
        ")", "") == "".join(text.split()).replace("(", "").replace(")", "")


def test_a_hyphen_inside_a_word_stays_and_one_in_front_excludes():
    assert parse("abd-A").tree == Word("abd-A", 0)
    tree = parse("Shh -limb").tree
    assert tree == Group("or", (Word("Shh", 0), Unary("not", Word("limb", 5), 4)), 0)
    assert parse("+Shh limb").tree == Group("or", (Unary("must", Word("Shh", 1), 0), Word("limb", 5)), 0)
    assert not parse("a - b").syntax   # a lone dash is text


def test_operators_only_in_capitals():
    assert not parse("role of Dl and dl in the wing").syntax
    assert not parse("to be or not to be").syntax
    tree = parse("Shh AND limb").tree
    assert isinstance(tree, Group) and tree.op == "and" and tree.items == (Word("Shh", 0), Word("limb", 8))
    # precedence: NOT binds tighter than AND, AND tighter than juxtaposition/OR
    tree = parse("a b AND NOT c").tree
    assert isinstance(tree, Group) and tree.op == "or" and tree.items[0] == Word("a", 0)
    assert tree.items[1] == Group("and", (Word("b", 2), Unary("not", Word("c", 12), 8)), 2, True)


def test_brackets_inside_a_word_are_the_word_and_at_its_start_a_group():
    assert parse("Su(H)").tree == Word("Su(H)", 0)
    tree = parse("(Su(H) OR Dl) wing").tree
    assert isinstance(tree, Group) and tree.items[0] == Group("or", (Word("Su(H)", 1), Word("Dl", 10)), 0, True)
    # a ) with no group open is text: the enumerations of pasted prose
    assert not parse("1) bile duct and 2) giant cell").syntax


def test_fields_glued_to_their_values():
    tree = parse('title:BRCA2 abstract:"DNA repair" year:2005..2010 section:results pmcid:PMC1 gene:Dl').tree
    assert isinstance(tree, Group)
    names = [(x.name, x.value) for x in tree.items if isinstance(x, Field)]
    assert names == [("title", Word("BRCA2", 6)), ("abstract", Phrase("DNA repair", 21)),
                     ("year", Word("2005..2010", 39)), ("section", Word("results", 58)), ("pmcid", Word("PMC1", 72)),
                     ("gene", Word("Dl", 82))]
    assert parse("title:(Shh OR Ihh)").tree == Field("title", Group("or", (Word("Shh", 7), Word("Ihh", 14)), 6,
                                                                       True), 0)
    assert not parse("genes: Dl and N").syntax   # prose with a colon


@pytest.mark.parametrize(("text", "rule", "position"), [
    ('"wing disc', "unbalanced_quote", 0),
    ('Dl "wing', "unbalanced_quote", 3),
    ("(Shh OR limb", "unbalanced_parenthesis", 0),
    ("Shh AND", "dangling_operator", 4),
    ("AND Shh", "dangling_operator", 0),
    ("Shh OR", "dangling_operator", 4),
    ("Shh NOT", "dangling_operator", 4),
    ("a OR OR b", "dangling_operator", 2),
    ("foo:bar", "unknown_field", 0),
    ("wing author:Smith", "unknown_field", 5),
    ("Title:BRCA2", "field_case", 0),
    ("title: BRCA2", "empty_field", 0),
    ("title:-x", "empty_field", 0),
    ("()", "empty_group", 0),
    ('""', "empty_phrase", 0),
    ("Shh*", "wildcard", 3),
    ("wing~2", "fuzzy", 4),
    ("title:(abstract:x)", "nested_field", 7),
    ("BRCA2[ti]", "pubmed_tag", 5),
    ("Shh[tiab] limb", "pubmed_tag", 3),
])
def test_syntax_errors_name_position_rule_and_hint(text, rule, position):
    with pytest.raises(QuerySyntaxError) as err:
        parse(text)
    e = err.value
    assert (e.status, e.code) == (422, "query_syntax")
    assert (e.details["rule"], e.details["position"]) == (rule, position), e.details
    assert e.details["hint"] and f"at character {position + 1}" in e.message
    assert len(e.details["excerpt"]) <= 62


def test_nesting_is_bounded():
    parse("(" * MAX_DEPTH + "x" + ")" * MAX_DEPTH)
    with pytest.raises(QuerySyntaxError) as err:
        parse("(" * (MAX_DEPTH + 1) + "x" + ")" * (MAX_DEPTH + 1))
    assert err.value.details["rule"] == "too_deep"


def test_an_error_quotes_only_a_little_of_a_long_query():
    text = "wing " * 150 + '"'
    with pytest.raises(QuerySyntaxError) as err:
        parse(text)
    assert len(err.value.message) < 300 and len(err.value.details["excerpt"]) <= 62
