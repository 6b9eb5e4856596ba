"""Shared fixtures: a small hand-written corpus with the hard gene-symbol cases, indexed into a temp data dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from search.core.config import Settings
from search.engines.embedded.engine import EmbeddedEngine
from search.core.models import Paper, Section
from search.text.passages import split_passages

PAPERS = [
    Paper(pmcid="PMC100001", year=2001, journal="Dev Biol", title="Delta and Notch signalling in the wing",
          abstract="Dl activates N in wing margin cells.",
          sections=[Section(type="INTRO", paragraphs=["The ligand Dl binds the receptor N. Su(H), the effector, "
                                                      "then enters the nucleus."]),
                    Section(type="RESULTS", paragraphs=["Loss of Dl abolishes E(spl)m8-HLH expression (Fig. 2)."])]),
    Paper(pmcid="PMC100002", year=2005, journal="Development", title="The dorsal morphogen gradient",
          abstract="The dl gradient patterns the dorsoventral axis of the embryo.",
          sections=[Section(type="INTRO", paragraphs=["dl is a Rel-family transcription factor; n = 12 embryos."]),
                    Section(type="METHODS", paragraphs=["Embryos were fixed and stained with anti-dl."])]),
    Paper(pmcid="PMC100003", year=2010, journal="Genetics", title="Suppressor of Hairless targets",
          abstract="We mapped binding sites of Suppressor of Hairless (Su(H)).",
          sections=[Section(type="RESULTS", paragraphs=["Su(H); Hairless complexes repress targets.",
                                                        "Mutants of l(2)gl and abd-A were examined."]),
                    Section(type="DISCUSS", paragraphs=["α-Cat and Df(3L)ED4543 are discussed."])]),
    Paper(pmcid="PMC100004", year=2015, journal="PLoS Genet", title="Wing disc growth",
          abstract="Growth of the wing imaginal disc depends on morphogens.",
          sections=[Section(type="RESULTS", paragraphs=["dpp and wg control growth of the wing disc.",
                                                        "Cells proliferate in the pouch. " * 40]),
                    Section(type="DISCUSS", paragraphs=["Growth stops when the disc reaches its final size. " * 10])]),
]


def build_index(data_dir: Path, papers: list[Paper] = PAPERS, collection: str = "default") -> EmbeddedEngine:
    engine = EmbeddedEngine(data_dir, collection=collection)
    build = engine.open_build("fixture", resume=False)
    for p in papers:
        build.add(p, split_passages(p))
    build.commit({})
    build.publish()
    return engine


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    build_index(d)
    return d


@pytest.fixture
def settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir)


class LiveServer:
    """A real uvicorn server on a free loopback port, in a thread (the same HTTP agents use)."""

    def __init__(self, app):
        import socket
        import threading

        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        import time

        self.thread.start()
        for _ in range(200):
            if self.server.started:
                return self
            time.sleep(0.02)
        raise RuntimeError("server did not start")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def live_server(settings):
    from search.api.app import create_app

    with LiveServer(create_app(settings)) as srv:
        yield srv
