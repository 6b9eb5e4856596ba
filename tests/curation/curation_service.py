"""A real flysift service over the curation fixtures (three short JATS articles, mini GO/FBbt/FBdv, a two-gene
lexicon), for the lexical curator and batch-run tests."""

from __future__ import annotations

from pathlib import Path

from search.api import create_app
from search.core.config import Settings
from search.core.models import Gene
from search.engines.embedded.terms import TermIndex
from search.ontology.model import Ontology
from search.services import Services
from search.text.lexicon import Lexicon

from helpers import LiveServer, term_service

FIX = Path(__file__).resolve().parents[1] / "fixtures"
CUR = FIX / "curation"
GENES = [Gene(id="FBgn0005558", symbol="ey", fullname="eyeless", symbol_synonyms=["Pax6", "ey-1"]),
         Gene(id="FBgn0000463", symbol="Dl", fullname="Delta")]
ONTOLOGIES = (("go", FIX / "mini.obo"), ("fbbt", FIX / "mini_fbbt.obo"), ("fbdv", CUR / "mini_fbdv.obo"))


def build_data(data: Path, cache: Path) -> Path:
    from indexer.pipeline import index_corpus

    index_corpus(sorted(CUR.glob("*.nxml")), Services.open(Settings(data_dir=data)))
    Lexicon(GENES).save(data / "lexicon.tsv")
    for name, path in ONTOLOGIES:
        term_service(data).index_ontology(Ontology.load(path, name, cache_dir=cache), TermIndex(data).write)
    return data


def serve(data: Path) -> LiveServer:
    return LiveServer(create_app(Settings(data_dir=data)))
