"""The lexical curator end to end against a real service over three short JATS articles written for these tests
(tests/fixtures/curation): exact expected ids, evidence, synonyms, budget and hidden terms."""

from __future__ import annotations

import pytest
from curation_service import build_data, serve

from curation.agent import GeneTask, make_agent
from curation.lexical import find_synonyms, paper_units
from search.client import Client


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    data = build_data(tmp_path_factory.mktemp("data"), tmp_path_factory.mktemp("cache"))
    with serve(data) as srv:
        yield srv


def run(url: str, **kw) -> tuple:
    task = GeneTask(gene_id="FBgn0005558", symbol="ey", budget=kw.pop("budget", 16), **kw)
    with Client(url) as client:
        res = make_agent("lexical").run(task, client)
        client.session_id = None
        session = client.get_session(res.session_id)
    return res, session


def test_the_service_recognises_terms_for_the_curator(service):
    """The recogniser behind POST /v1/terms/recognise over the service's GO, FBbt and FBdv: per text, each mention
    with its term, span, matched text, how it matched and its sentence; per task."""
    text = "Nuclei and the cell nucleus of the CNS in the L3 stage. The eye grows."
    later = "The central nervous system is large."   # the document names the CNS in full: its acronym counts
    with Client(service.url) as c:
        res = c.recognise_terms([text, later])
        go = c.recognise_terms([text, later], task="go")
        expression = c.recognise_terms([text, later], task="expression")
        alone = c.recognise_terms([text], task="expression")
    assert res.ontologies == ["fbbt", "fbdv", "go"]
    assert [(m.text, m.term_id, m.via) for m in res.mentions[0]] == [
        ("Nuclei", "GO:0005634", "name"), ("cell nucleus", "GO:0005634", "synonym"),
        ("CNS", "FBbt:00005095", "synonym"), ("L3 stage", "FBdv:00005336", "synonym"), ("eye", "FBbt:00004508", "name")]
    first = res.mentions[0][0]
    assert (first.start, first.end, first.sentence_start, first.sentence_end) == (0, 6, 0, 55)  # plural folded:
    assert not first.inflected                                                                   # not a word form
    assert go.ontologies == ["go", "fbbt", "fbdv"] and expression.ontologies == ["fbbt", "fbdv", "go"]
    assert go.mentions == res.mentions == expression.mentions   # no label here is shared by two ontologies
    assert [m.text for m in alone.mentions[0]] == ["Nuclei", "cell nucleus", "L3 stage", "eye"]  # "CNS" alone: ?
    only = c_recognise(service, [text, later], ontologies=["fbbt"])
    assert [m.term_id for m in only.mentions[1]] == ["FBbt:00005095"] and {m.ontology for m in only.mentions[0]} \
        == {"fbbt"}


def c_recognise(service, texts, **kw):
    with Client(service.url) as c:
        return c.recognise_terms(texts, **kw)


def test_lexical_curator_end_to_end(service):
    res, session = run(service.url)
    assert res.error is None and res.output is not None
    out = res.output
    go = [i["go_id"] for i in out["task1_function"]]
    # the nucleus is named next to ey in two papers; the rest in one; organelle/intracellular sentences lack ey
    assert go[0] == "GO:0005634"
    assert set(go) == {"GO:0005634", "GO:0048749", "GO:0003700", "GO:0016330"}
    aspects = {i["go_id"]: (i["aspect"], i["qualifier"]) for i in out["task1_function"]}
    assert aspects["GO:0005634"] == ("C", "located_in") and aspects["GO:0003700"] == ("F", "enables")
    assert aspects["GO:0048749"] == ("P", "involved_in")
    # the CNS: two RESULTS mentions beside ey transcripts, staged in the same paper; the eye: one INTRO mention
    assert [{k: v for k, v in i.items() if k != "evidence"} for i in out["task2_expression"]] == [
        {"expression_type": "transcript", "anatomy_id": "FBbt:00005095", "stage_id": "FBdv:00005289"},
        {"expression_type": "polypeptide", "anatomy_id": "FBbt:00004508", "stage_id": None}]
    assert out["task3_synonyms"] == {"fullname_synonyms": [], "symbol_synonyms": ["Pax6"]}
    ev = out["task1_function"][0]["evidence"]
    assert ev["pmcid"] in {"PMC900001", "PMC900002"} and ev["section"] == "RESULTS"
    assert ev["passage_id"].startswith(ev["pmcid"] + ":")
    # the paper about no gene is never read; both papers about ey are
    assert sorted(session.papers_read) == ["PMC900001", "PMC900002"] and session.status == "closed"
    assert res.usage["papers_read"] == 2 and res.usage["cost_usd"] == 0.0
    record = res.to_run_record()
    assert set(record) >= {"output", "usage", "error", "session_id", "elapsed_s"}


def test_evidence_offsets_point_into_the_read_paragraph(service):
    res, _ = run(service.url)
    with Client(service.url) as c:
        for item in res.output["task1_function"]:
            ev = item["evidence"]
            units = {u.passage_id: u.text for u in paper_units(c.get_paper(ev["pmcid"], max_chars=100_000))}
            para = units[ev["passage_id"]]
            assert ev["text"] in para and para[ev["start"]:ev["end"]] in ev["text"]
            found = c.recognise_terms([para], task="go").mentions[0]
            assert item["go_id"] in [m.term_id for m in found if (m.start, m.end) == (ev["start"], ev["end"])]


def test_budget_limits_reading(service):
    res, session = run(service.url, budget=1)
    assert res.error is None and len(session.papers_read) == 1 and res.usage["papers_read"] == 1
    assert session.papers_read == ["PMC900001"]  # gene in the title first


def test_hidden_term_is_neither_proposed_nor_named(service):
    """Recognition runs inside the session, so a hidden term is not recognised at all: the curator can neither
    submit its id nor learn its name from the service and pass it off as a description."""
    res, session = run(service.url, hidden="GO:0016330")
    items = res.output["task1_function"]
    assert "GO:0016330" not in [i.get("go_id") for i in items]
    assert not [i for i in items if "description" in i]
    assert {"GO:0005634", "GO:0048749", "GO:0003700"} <= {i.get("go_id") for i in items}   # the rest still found
    with Client(service.url) as c:
        paths = {e.path for e in c.get_trace(res.session_id)}
    assert "/v1/terms/recognise" in paths   # asked inside the session, and traced there


def test_synonyms_are_the_names_the_papers_give_the_gene():
    """A-priori naming patterns anchored on the symbol and full name, with evidence; genotypes (a slash), figure
    references and the gene's own names are not synonyms."""
    from curation.lexical import Unit

    units = [Unit("PMC1", "RESULTS", "PMC1:1:0", "Ubx (also known as Ultrabithorax-like) and abx/Ubx flies. "
                                                 "Ubx, formerly called bithorax protein, acts. Ubx (Fig. 2) and "
                                                 "Ubx (CG10388) bind. The Ultrabithorax (Ubx) protein binds."),
             Unit("PMC2", "INTRO", "PMC2:0:0", "Ubx, the bx gene product, and Ubx (also known as Ultrabithorax-like) "
                                               "are one. The homeotic selector Ultrabithorax (Ubx) acts.")]
    full, symbols, evidence = find_synonyms(units, "Ubx", "Ultrabithorax")
    assert full == ["bithorax protein"] and symbols == ["Ultrabithorax-like", "CG10388", "bx"]
    assert evidence["Ultrabithorax-like"] == {"pmcid": "PMC1", "passage_id": "PMC1:1:0", "text": units[0].text[:500]}
    assert evidence["bithorax protein"]["text"].startswith("Ubx, formerly called")
    # a bracketed symbol after words it does not abbreviate (Schwartz & Hearst), or after itself, names nothing
    noise = [Unit("PMC4", "RESULTS", "PMC4:1:0", "Mutants of Ubx during a (Ubx) screen; the wing (Ubx) grew.")]
    assert find_synonyms(noise, "Ubx", None) == ([], [], {})
    # the lexicon's names are never copied: only what the text states counts
    assert find_synonyms([Unit("PMC3", "RESULTS", "PMC3:1:0", "Ubx is expressed.")], "Ubx", None) == ([], [], {})
