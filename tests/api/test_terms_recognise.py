"""``POST /v1/terms/recognise`` against a real service on loopback: per-task resolution of a label a GO and an FBbt
term share, hidden terms, the molecular-function rule, the client method, and hostile input (sizes, names, shapes)."""

from __future__ import annotations

import httpx
import pytest

from search.api.app import create_app
from search.client import Client, InvalidRequestError, NotFoundError
from search.core.config import Settings
from search.engines.embedded.terms import TermIndex
from search.ontology.model import Ontology
from search.schema.terms import MAX_RECOGNISE_TEXT_CHARS, MAX_RECOGNISE_TEXTS

from helpers import LiveServer, term_service

GO = """format-version: 1.2
ontology: go

[Term]
id: GO:0030425
name: dendrite
namespace: cellular_component

[Term]
id: GO:0003677
name: DNA binding
namespace: molecular_function

[Term]
id: GO:0003823
name: antigen binding
namespace: molecular_function
synonym: "antibody" RELATED []

[Term]
id: GO:0016330
name: second mitotic wave involved in compound eye morphogenesis
namespace: biological_process
"""

FBBT = """format-version: 1.2
ontology: fbbt

[Term]
id: FBbt:00047680
name: dendrite

[Term]
id: FBbt:00004508
name: eye
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    data, cache = tmp_path_factory.mktemp("data"), tmp_path_factory.mktemp("cache")
    for name, text in (("go", GO), ("fbbt", FBBT)):
        path = cache / f"{name}.obo"
        path.write_text(text)
        term_service(data).index_ontology(Ontology.load(path, name, cache_dir=cache), TermIndex(data).write)
    with LiveServer(create_app(Settings(data_dir=data))) as srv:
        yield srv


TEXT = "Ey localises to the dendrite and the eye. An antibody against Ey stained it, and Ey shows DNA binding."


def ids(res) -> list[str]:
    return [m.term_id for m in res.mentions[0]]


def test_a_shared_label_resolves_per_task(served):
    """GO's "dendrite" used to lose to FBbt's when FBbt was added first; now the task decides."""
    with Client(served.url) as c:
        go = c.recognise_terms([TEXT], task="go")
        expression = c.recognise_terms([TEXT], task="expression")
        both = c.recognise_terms([TEXT])
    assert go.ontologies == ["go", "fbbt"] and expression.ontologies == ["fbbt", "go"]   # fbdv is not indexed
    assert ids(go) == ["GO:0030425", "FBbt:00004508", "GO:0003677"]
    assert ids(expression) == ["FBbt:00047680", "FBbt:00004508", "GO:0003677"]
    assert both.ontologies == ["fbbt", "go"] and ids(both) == ids(expression)  # the indexed order
    dendrite = go.mentions[0][0]
    assert (dendrite.start, dendrite.end, dendrite.text, dendrite.via, dendrite.name) == (20, 28, "dendrite", "name",
                                                                                         "dendrite")
    assert TEXT[dendrite.sentence_start:dendrite.sentence_end] == "Ey localises to the dendrite and the eye."


def test_molecular_function_rule_and_hidden_terms(served):
    with Client(served.url) as c:
        every = c.recognise_terms([TEXT], ontologies=["go"], molecular_function="all")
        hidden = c.recognise_terms(["The second mitotic wave involved in compound eye morphogenesis."],
                                   ontologies=["go"], hidden="GO:0016330")
    assert ids(every) == ["GO:0030425", "GO:0003823", "GO:0003677"]   # "antibody": only without the rule
    assert hidden.mentions == [[]]   # a hidden term is never reported (nor its span taken by a shorter one here)


def test_hostile_requests_get_clear_errors(served):
    url = served.url + "/v1/terms/recognise"
    with Client(served.url) as c:
        with pytest.raises(NotFoundError) as e:
            c.recognise_terms(["x"], ontologies=["fbdv"])
        assert "fbdv" in e.value.message
        with pytest.raises(InvalidRequestError) as e:
            c.recognise_terms(["x"], ontologies=["go"], task="go")
        assert e.value.details["field"] == "task"
        assert c.recognise_terms([]).mentions == []
        assert c.recognise_terms(["", "   "]).mentions == [[], []]
    cases = [
        ({"texts": ["x"] * (MAX_RECOGNISE_TEXTS + 1)}, "texts"),
        ({"texts": ["x" * (MAX_RECOGNISE_TEXT_CHARS + 1)]}, "texts[0]"),
        ({"texts": ["x"], "ontologies": ["../go"]}, "ontologies[0]"),
        ({"texts": ["x"], "task": "synonyms"}, "task"),
        ({"texts": ["x"], "extra": 1}, "extra"),
        ({"texts": "x"}, "texts"),
        ({}, "texts"),
    ]
    for body, field in cases:
        r = httpx.post(url, json=body)
        assert r.status_code == 422, (field, r.text[:200])
        assert field in r.json()["error"]["message"], r.json()["error"]["message"][:300]
    big = httpx.post(url, json={"texts": ["word " * 40_000] * 11}, timeout=60)   # 2.2 M characters in all
    assert big.status_code == 422 and big.json()["error"]["code"] == "limit_exceeded"
    assert len(big.text) < 1000
    assert httpx.get(url).status_code == 405
