"""Hidden terms (search.schema.hidden names them, search.ontology.hidden resolves them): the session's spec, the
merge of a request's hidden terms with the session's, the ids a spec hides, and the ``--hidden`` text of the MCP
command line."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from search.ontology.hidden import spec_ids
from search.ontology.model import Ontology
from search.schema.hidden import HiddenQuery, HiddenSpec, hidden_query, named_set, spec_from_text

FIX = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def go(tmp_path_factory) -> Ontology:
    return Ontology.load(FIX / "mini.obo", "go", cache_dir=tmp_path_factory.mktemp("cache"))


def test_spec_checks_ids_and_lists_its_names():
    spec = HiddenSpec(set="flyaoc", ids=["GO:1", "GO:2", "GO:1"], descendants=True)
    assert spec.ids == ["GO:1", "GO:2"] and spec.names() == ["flyaoc", "GO:1", "GO:2"]
    assert HiddenSpec().names() == []
    for bad in ({"ids": ["nucleus"]}, {"set": "other"}, {"colour": "red"}):
        with pytest.raises(ValidationError):
            HiddenSpec.model_validate(bad)


def test_hidden_ids_keep_given_ids_and_add_primaries_and_descendants(go):
    assert spec_ids(HiddenSpec(), go) == frozenset()
    assert spec_ids(HiddenSpec(set="flyaoc")) == frozenset(named_set("flyaoc"))
    alt = spec_ids(HiddenSpec(ids=["GO:0042051"]), go)
    assert alt == {"GO:0042051", "GO:0001745"}                          # the alt id as given and its primary
    deep = spec_ids(HiddenSpec(ids=["GO:0001745"], descendants=True), go)
    assert "GO:0016330" in deep and "GO:0048749" not in deep            # descendants hidden, ancestors not
    assert "GO:0016330" not in spec_ids(HiddenSpec(ids=["GO:0001745"]), go)


def test_a_request_adds_hidden_terms_and_never_unhides():
    session = HiddenSpec(set="flyaoc", ids=["GO:9"], descendants=True)
    assert hidden_query("GO:1", False, session) == HiddenQuery("GO:1,flyaoc,GO:9", True)
    assert hidden_query(None, False, session) == HiddenQuery("flyaoc,GO:9", True)
    assert hidden_query("GO:1", True, None) == HiddenQuery("GO:1", True)
    assert hidden_query() == HiddenQuery(None, False)
    assert hidden_query(spec=HiddenSpec(descendants=True)) == HiddenQuery(None, True)


def test_params_for_the_term_endpoints():
    assert hidden_query(spec=HiddenSpec(ids=["GO:1"])).params() == {"hidden": "GO:1", "hidden_descendants": False}
    assert hidden_query(spec=HiddenSpec(descendants=True)).params() == {}   # nothing hidden: no parameters
    assert hidden_query(spec=None).params() == {}


def test_spec_from_command_line_text():
    assert spec_from_text(None) is None and spec_from_text("") is None
    assert spec_from_text("flyaoc, GO:1,GO:2", True) == {"set": "flyaoc", "ids": ["GO:1", "GO:2"], "descendants": True}
    assert spec_from_text("GO:1") == {"set": None, "ids": ["GO:1"], "descendants": False}
    with pytest.raises(ValueError, match="at most one named set"):
        spec_from_text("flyaoc,other")
