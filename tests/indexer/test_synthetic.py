"""The synthetic corpus generator: determinism, FlyAOC shape, the gene-mention styles, and the answer key."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from indexer.synthetic import (
    SyntheticConfig,
    answer_key,
    bundled_genes,
    generate,
    read_genes_tsv,
    sample_command,
    write_corpus,
)
from search.core.errors import InputError, InvalidRequest
from search.core.models import Paper
from search.text.analysis import symbol_tokens

SMALL = dict(n_papers=120, words_per_paper=1200, seed=11, vocabulary=5000)


@pytest.fixture(scope="module")
def papers() -> list[Paper]:
    return list(generate(SyntheticConfig(**SMALL)))


@pytest.fixture(scope="module")
def genes_by_symbol():
    return {g.symbol: g for g in bundled_genes()}


def _text(p: Paper) -> str:
    return "\n".join([p.title, p.abstract, *(x for s in p.sections for x in s.paragraphs)])


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path):
    cfg = dict(n_papers=15, words_per_paper=600, vocabulary=3000)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    write_corpus(SyntheticConfig(seed=3, **cfg), a)
    write_corpus(SyntheticConfig(seed=3, **cfg), b)
    write_corpus(SyntheticConfig(seed=4, **cfg), c)
    for name in ("corpus.jsonl", "answer_key.json", "genes.tsv"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "corpus.jsonl").read_bytes() != (c / "corpus.jsonl").read_bytes()


def test_papers_have_flyaoc_shape(papers: list[Paper]):
    assert len(papers) == SMALL["n_papers"]
    assert len({p.pmcid for p in papers}) == len(papers)
    order = ["INTRO", "METHODS", "RESULTS", "DISCUSS", "CONCL"]
    for p in papers:
        assert re.fullmatch(r"PMC9\d{6}", p.pmcid)
        assert p.title and p.abstract and p.journal and 1985 <= p.year <= 2025
        types = [s.type for s in p.sections]
        assert types == [t for t in order if t in types] and {"INTRO", "RESULTS"} <= set(types)
        assert all(s.paragraphs and all(x.strip() for x in s.paragraphs) for s in p.sections)
        assert all(x == " ".join(x.split()) for s in p.sections for x in s.paragraphs)
    mean_words = sum(p.word_count() for p in papers) / len(papers)
    assert 0.85 * SMALL["words_per_paper"] < mean_words < 1.25 * SMALL["words_per_paper"]


def test_written_records_are_flyaoc_export_rows(tmp_path: Path):
    summary = write_corpus(SyntheticConfig(n_papers=8, words_per_paper=500, vocabulary=3000), tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    assert summary["papers"] == len(rows) == 8
    assert summary["words"] == sum(len(" ".join([r["title"], r["abstract"], *(x for v in r["sections"].values()
                                                                             for x in v)]).split()) for r in rows)
    for r in rows:
        assert set(r) == {"pmcid", "title", "abstract", "year", "journal", "sections"}
        assert all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in r["sections"].values())
    assert [g.id for g in read_genes_tsv(tmp_path / "genes.tsv")] == [g.id for g in bundled_genes()]


def test_mention_styles_occur(papers: list[Paper]):
    corpus = "\n".join(_text(p) for p in papers)
    for s in ("(Su(H))", "Su(H),", "α-Cat", "alpha-Cat", "Df(3L)ED4543", "Suppressor of Hairless (Su(H))"):
        assert s in corpus, s
    assert re.search(r"\bn = \d+", corpus)
    # symbols before , . ; survive as whole symbol-view tokens
    tokens = Counter(symbol_tokens(corpus))
    assert tokens["Su(H)"] > 0 and tokens["E(spl)m8-HLH"] > 0 and tokens["l(2)gl"] > 0 and tokens["abd-A"] > 0


def test_case_collisions_sit_in_papers_about_different_genes(papers: list[Paper], genes_by_symbol):
    key = answer_key(SyntheticConfig(**SMALL))
    by_id = {p.pmcid: p for p in papers}
    about_dl, about_Dl = set(key[genes_by_symbol["dl"].id]), set(key[genes_by_symbol["Dl"].id])
    only_dl, only_Dl = about_dl - about_Dl, about_Dl - about_dl
    assert only_dl and only_Dl
    for pid in only_dl:
        t = Counter(symbol_tokens(_text(by_id[pid])))
        assert t["dl"] > t["Dl"]
    for pid in only_Dl:
        t = Counter(symbol_tokens(_text(by_id[pid])))
        assert t["Dl"] > t["dl"]


def test_answer_key_matches_the_text(papers: list[Paper]):
    cfg = SyntheticConfig(**SMALL)
    key = answer_key(cfg)
    genes = {g.id: g for g in bundled_genes()}
    assert set(key) == set(genes) and all(key.values())   # every gene has a paper once n ≥ number of genes
    tokens = {p.pmcid: Counter(symbol_tokens(_text(p))) for p in papers}
    for gid, pmcids in key.items():
        sym = genes[gid].symbol
        assert all(tokens[pid][sym] > 0 for pid in pmcids), sym
        # the papers about a gene name it far more often than the papers that mention it in passing
        about = sum(tokens[pid][sym] for pid in pmcids) / len(pmcids)
        others = [tokens[pid][sym] for pid in tokens if pid not in set(pmcids)]
        assert about > 3 * (sum(others) / len(others)), sym


def test_answer_key_file_equals_answer_key(tmp_path: Path):
    cfg = SyntheticConfig(n_papers=60, words_per_paper=400, vocabulary=3000, seed=5)
    write_corpus(cfg, tmp_path)
    assert json.loads((tmp_path / "answer_key.json").read_text()) == answer_key(cfg)


def test_custom_gene_list_is_used(tmp_path: Path):
    genes = [g for g in bundled_genes() if g.symbol in ("N", "Dl", "Su(H)", "wg")]
    papers = list(generate(SyntheticConfig(n_papers=6, words_per_paper=400, vocabulary=3000, genes=genes)))
    allowed = {n for g in genes for n in (g.symbol, *g.symbol_synonyms)}
    other = {g.symbol for g in bundled_genes()} - allowed - {"arm"}     # "arm" is also an ordinary word
    seen = {t for p in papers for t in symbol_tokens(_text(p))}
    assert seen & allowed and not (seen & other)


def test_bad_gene_tsv_names_file_line_and_field(tmp_path: Path):
    path = tmp_path / "genes.tsv"
    path.write_text("id\tsymbol\tfullname\tsymbol_synonyms\tfullname_synonyms\nFBgn12\tN\tNotch\t\t\n")
    with pytest.raises(InputError) as e:
        read_genes_tsv(path)
    assert e.value.field == "id" and e.value.record == 2 and str(path) in e.value.message
    path.write_text("# comment\nid\tsymbol\tfullname\tsymbol_synonyms\tfullname_synonyms\nFBgn0004647\t\tNotch\t\t\n")
    with pytest.raises(InputError) as e:
        read_genes_tsv(path)
    assert e.value.field == "symbol" and e.value.record == 3
    path.write_text("gene\tname\n")
    with pytest.raises(InputError) as e:
        read_genes_tsv(path)
    assert e.value.field == "header"


def test_bad_config_is_refused():
    with pytest.raises(InvalidRequest, match="n_papers"):
        SyntheticConfig(n_papers=0)
    with pytest.raises(InvalidRequest, match="genes"):
        SyntheticConfig(genes=bundled_genes()[:2])


def test_sample_command_writes_corpus(tmp_path: Path):
    out = tmp_path / "corpus"
    result = CliRunner().invoke(sample_command, ["--papers", "5", "--words", "400", "--seed", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["papers"] == 5 and summary["words"] > 0
    assert len((out / "corpus.jsonl").read_text(encoding="utf-8").splitlines()) == 5
