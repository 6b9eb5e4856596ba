"""Shared fixtures: a small hand-written corpus with the hard gene-symbol cases, indexed into a temp data dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from search.config import Settings
from search.engines.embedded import EmbeddedEngine
from search.models import Paper, Section
from search.passages import split_passages

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
          sections=[Section(type="RESULTS", paragraphs=["dpp and wg control growth of the wing disc."])]),
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
