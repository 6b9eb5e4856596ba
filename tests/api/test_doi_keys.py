"""Papers keyed by their DOI (no PMCID or PMID: 29 of CRAFT's 97) hold a slash in their key; every paper route takes
them, and the client escapes keys, so the API, the client and MCP read them as they read a PMCID."""

from __future__ import annotations

from pathlib import Path

import pytest

from search.client import Client, ClientError
from search.core.config import Settings
from search.core.models import Gene, Paper, Section
from search.text.lexicon import Lexicon

from helpers import PAPERS, LiveServer, build_index

DOI_PAPER = Paper(pmcid="DOI:10.1000/fin.1", doi="10.1000/fin.1", year=2012, title="Zebrafish fin regeneration",
                  abstract="Fin regeneration after amputation needs a blastema.",
                  sections=[Section(type="RESULTS", paragraphs=["The blastema forms within two days of amputation."])])
#: a DOI may hold characters a URL gives meaning to (SICI-style DOIs have # ; < > and ?)
ODD_PAPER = Paper(pmcid="DOI:10.1002/(SICI)1097+4695;2-B", year=1999, title="Regeneration of the blastema",
                  abstract="A blastema regenerates the fin ray.",
                  sections=[Section(type="RESULTS", paragraphs=["Blastema cells proliferate after amputation."])])


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    from search.api.app import create_app

    data: Path = tmp_path_factory.mktemp("doi") / "data"
    build_index(data, [*PAPERS, DOI_PAPER, ODD_PAPER])
    Lexicon([Gene(id="FBgn0000463", symbol="Dl", fullname="Delta")]).save(data / "lexicon.tsv")
    with LiveServer(create_app(Settings(data_dir=data))) as srv:
        yield srv


@pytest.mark.parametrize("key", [DOI_PAPER.pmcid, ODD_PAPER.pmcid])
def test_a_doi_keyed_paper_is_read_through_every_paper_route(api, key):
    with Client(api.url) as c:
        text = c.get_paper(key)
        assert text.pmcid == key and "blastema" in (text.abstract or "")
        similar = c.similar_papers(key)
        assert key not in [h.pmcid for h in similar.hits]
        assert c.list_supplements(key).files == []


def test_a_doi_keyed_paper_spends_budget_in_a_session(api):
    with Client(api.url) as c:
        c.session_id = c.create_session("FBgn0000463", max_papers=1).id
        assert c.get_paper(DOI_PAPER.pmcid).pmcid == DOI_PAPER.pmcid
        with pytest.raises(ClientError) as spent:
            c.get_paper(ODD_PAPER.pmcid)
        assert spent.value.code == "budget_exhausted"
        reads = [e for e in c.get_trace() if e.tool == "get_paper"]
        assert [e.returned_ids for e in reads if e.status == 200] == [[DOI_PAPER.pmcid]]


def test_an_unknown_doi_key_is_the_papers_404_not_a_routing_one(api):
    with Client(api.url) as c, pytest.raises(ClientError) as missing:
        c.get_paper("DOI:10.1000/none")
    assert missing.value.status == 404 and "DOI:10.1000/none not found" in str(missing.value)
