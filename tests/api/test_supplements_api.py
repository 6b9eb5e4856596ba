"""Supplements over REST, the client, MCP and the CLI: list a paper's files, read a sheet (JSON and CSV), within a
session's budget; FlyAOC-parity sessions have none."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from indexer.pipeline import index_corpus
from search.cli.main import main
from search.client import AsyncClient, Client, ClientError
from search.core.config import Settings
from search.core.models import Gene
from search.mcp.server import SessionTools, build_server
from search.services import Services
from search.text.lexicon import Lexicon

from helpers import SHEET_ONLY_ALLELE, LiveServer, needs_supplement_readers, supplement_package


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    needs_supplement_readers()
    root = tmp_path_factory.mktemp("supp")
    settings = Settings(data_dir=root / "data")
    index_corpus([supplement_package(root / "pkg")], Services.open(settings), workers=1)
    Lexicon([Gene(id="FBgn0000463", symbol="Dl", fullname="Delta")]).save(root / "data" / "lexicon.tsv")
    return root / "data"


@pytest.fixture(scope="module")
def api(data: Path):
    from search.api.app import create_app

    with LiveServer(create_app(Settings(data_dir=data))) as srv:
        yield srv


def test_list_and_read_a_sheet_over_rest(api):
    with Client(api.url) as c:
        files = c.list_supplements("PMC990001").files
        assert [f.status for f in files] == ["ok", "ok", "ok", "missing", "missing", "ok"]
        page = c.read_supplement("PMC990001", 1, part="Alleles")
        assert page.part.header[0] == "Allele" and page.rows[0].cells[0] == SHEET_ONLY_ALLELE
        assert c.read_supplement_csv("PMC990001", 2).splitlines() == [
            "gene,go_id,note", "Dl,GO:0007219,\"'=HYPERLINK(\"\"x\"\")\"", "Ser,GO:0045747,-2"]
        with pytest.raises(ClientError) as missing:
            c.read_supplement("PMC990001", 4)
        assert missing.value.code == "supplement_unavailable" and missing.value.status == 409
        with pytest.raises(ClientError) as unknown:
            c.read_supplement("PMC990001", "Table_S9.xls")
        assert unknown.value.code == "supplement_not_found" and unknown.value.status == 404
        with pytest.raises(ClientError) as escape:   # a name is looked up in the registry, never a path
            c.read_supplement("PMC990001", "..%2F..%2Fetc%2Fpasswd")
        assert escape.value.status == 404


def test_reading_a_supplement_is_reading_its_paper_in_a_session(api):
    with Client(api.url) as c:
        s = c.create_session("Dl", max_papers=1)
        c.session_id = s.id
        c.list_supplements("PMC990001")                      # listing is free
        assert c.get_session().budget_used == 0
        c.read_supplement("PMC990001", 1)
        after = c.get_session()
        assert after.budget_used == 1 and after.papers_read == ["PMC990001"]
        c.read_supplement("PMC990001", 2)                    # the same paper: free under distinct
        c.get_paper("PMC990001")
        assert c.get_session().budget_used == 1


def test_flyaoc_parity_sessions_have_no_supplements(api):
    with Client(api.url) as c:
        s = c.create_session("Dl", max_papers=3, budget_policy="flyaoc")
        c.session_id = s.id
        with pytest.raises(ClientError) as off:
            c.read_supplement("PMC990001", 1)
        assert off.value.code == "supplements_off" and off.value.status == 409
        with pytest.raises(ClientError):
            c.list_supplements("PMC990001")
        assert c.search_passages(SHEET_ONLY_ALLELE).total == 0 and c.search_papers(SHEET_ONLY_ALLELE).total == 0
        assert c.get_session().budget_used == 0
        c.session_id = None
        assert c.search_papers(SHEET_ONLY_ALLELE).total == 1


def test_mcp_tools_list_and_read_a_sheet(api):
    async def run():
        async with AsyncClient(api.url) as c:
            session = await c.create_session("Dl", max_papers=2)
            c.session_id = session.id
            tools = SessionTools(c, session)
            listed = json.loads(await tools.list_supplements("PMC990001"))
            sheet = json.loads(await tools.read_supplement("PMC990001", 1, part="Alleles"))
            found = json.loads(await tools.search_passages(SHEET_ONLY_ALLELE))
            names = {t.name for t in await build_server(c, session).list_tools()}
            parity = await c.create_session("Dl", max_papers=2, budget_policy="flyaoc")
            parity_names = {t.name for t in await build_server(c, parity).list_tools()}
            return listed, sheet, found, names, parity_names

    listed, sheet, found, names, parity_names = asyncio.run(run())
    assert listed[0]["name"] == "S1.xlsx" and listed[0]["parts"][0]["header"][0] == "Allele"
    assert sheet["header"][0] == "Allele" and sheet["rows"][0] == {"n": 4, "cells": [SHEET_ONLY_ALLELE, "notched",
                                                                                      "rough"]}
    assert found[0]["supplement"] == {"file": 1, "name": "S1.xlsx", "sheet": "Alleles", "rows": [4, 5]}
    assert {"list_supplements", "read_supplement"} <= names
    assert not {"list_supplements", "read_supplement"} & parity_names   # FlyAOC's tool set, unchanged


def test_cli_search_finds_the_paper_and_the_sheet_row(data: Path):
    runner = CliRunner()
    out = runner.invoke(main, ["search", SHEET_ONLY_ALLELE, "--data-dir", str(data)], env={"COLUMNS": "240"})
    assert out.exit_code == 0, out.output
    assert "PMC990001" in out.output and "S1.xlsx › Alleles, rows 4-5" in out.output
    listed = runner.invoke(main, ["supplements", "list", "PMC990001", "--data-dir", str(data)],
                           env={"COLUMNS": "240"})
    assert "S4.pdf" in listed.output and "missing" in listed.output
    read = runner.invoke(main, ["supplements", "read", "PMC990001", "1", "--csv", "--data-dir", str(data)])
    assert read.output.splitlines()[:2] == ["Allele,Phenotype / wing,Phenotype / eye",
                                           f"{SHEET_ONLY_ALLELE},notched,rough"]
    bad = runner.invoke(main, ["supplements", "read", "PMC990001", "5", "--data-dir", str(data)])
    assert bad.exit_code == 2 and bad.output.count("\n") == 1 and "supplement_unavailable" in bad.output
