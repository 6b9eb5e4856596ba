"""The term encoder's training curve (issue #30: "if a target is missed, report the curve (pairs, epochs, hard
negatives) and what moved it"): small variants of `flysift train term-encoder`, one factor changed at a time from
the settings of the one full run, each trained on the same fixed subset and scored on the subset's held-out terms
(the full run's split). What the subset is and why: search/ontology/encoder/curve.py.

    nice -n 5 .venv/bin/python bench/bench_term_encoder_curve.py [--data ../shared/data] [--go-terms 2000]
        [--sample-seed 13] [--points base,baseline,epochs-1,...] [--threads 2] [--work DIR]
        [--json curve.json] [--markdown curve.md]

Points run one at a time, in the order given; after each, the JSON file is rewritten, and a rerun with the same
subset skips the points it already holds (so a long curve resumes). Per point: training pairs per epoch, epochs,
hard negatives, training CPU and wall seconds (the loop only: not loading, not the evaluation), and the encoder
alone's strict and leave-one-out top-1/top-5 on the test and dev terms (every synonym of a held-out term is a
query; strict: all held-out synonyms are gone from the candidates, the names stay). Labels are embedded by the
trained torch model (float32), not the int8 ONNX graph the service uses. The fused (hybrid) figures need the
lexical hold-out indexes of bench/bench_ontology.py --encoder on a published artefact: not measured here.
Choose on the dev figures (the script names the best point by dev strict top-5); the test figures are reported.
Needs the dense extra. Never reads CRAFT or FlyAOC.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # before torch starts OpenMP (train.py says why)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine  # noqa: E402
from search.core.extras import ExtraMissing, require  # noqa: E402
from search.ontology.encoder import curve  # noqa: E402
from search.ontology.encoder.labels import LabelTable, split  # noqa: E402
from search.ontology.encoder.pairs import Corpus  # noqa: E402
from search.ontology.encoder.train import Data, Run, TrainConfig, fit, heldout_metrics  # noqa: E402
from search.ontology.model import Ontology  # noqa: E402

FILES = {"go": "ontologies/go-basic.obo.gz", "fbbt": "ontologies/fbbt-2013-07-26.obo", "fbdv": "ontologies/fbdv.obo"}
#: the ontologies sampled (the others are taken whole)
SAMPLED = ("go",)
DEFAULT_POINTS = ("base", "baseline", "epochs-1", "epochs-3", "pairs-1", "pairs-all", "neg-random", "neg-siblings")


def load_tables(data: Path, names: list[str], go_terms: int, sample_seed: int, cache: Path
                ) -> tuple[list[LabelTable], dict[str, Any]]:
    """The subset's label tables and a description of it (what the output says the subset is)."""
    tables, about = [], {}
    for name in names:
        ont = Ontology.load(data / FILES[name], name, cache_dir=cache)
        full = LabelTable.of(ont, hierarchy=True)
        table = curve.subset(full, curve.sample_families(full, go_terms, sample_seed)) if name in SAMPLED else full
        tables.append(table)
        about[name] = {"file": FILES[name], "data_version": full.data_version, "terms": len(table.ids),
                       "of_terms": len(full.ids), "labels": len(table.texts), "digest": table.digest,
                       "sample": (f"{go_terms} terms as sibling families, seed {sample_seed}" if name in SAMPLED
                                  else "all live terms")}
    return tables, about


def embed(model: Any, texts: list[str]) -> Any:
    import numpy as np

    vectors = model.encode(texts, batch_size=128, normalize_embeddings=True, convert_to_numpy=True,
                           show_progress_bar=False)
    return np.asarray(vectors, dtype=np.float32)


def run_point(name: str, data: Data, base_cfg: TrainConfig, threads: int, work: Path) -> dict[str, Any]:
    cfg = curve.variant(name, base_cfg)
    factor = curve.VARIANTS[name][0]
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {factor}, {cfg.epochs} epochs, {cfg.max_pairs_per_term} "
          f"pairs/term, {curve.negatives_of(cfg)} negatives, lr {cfg.lr:g}, {cfg.frozen_layers} frozen", flush=True)
    model, training = fit(work, data, cfg, Run(device="cpu", threads=threads, checkpoint_s=1e9, restart=True))
    t0, c0 = time.perf_counter(), time.process_time()
    metrics = {}
    for table, parts in zip(data.tables, data.splits, strict=True):
        vectors = embed(model, table.texts)
        metrics[table.ontology] = {s: heldout_metrics(table, parts, vectors, s) for s in ("test", "dev")}
    point = {"point": name, "factor": factor, "epochs": cfg.epochs, "max_pairs_per_term": cfg.max_pairs_per_term,
             "negatives": curve.negatives_of(cfg), "lr": cfg.lr, "frozen_layers": cfg.frozen_layers,
             "pairs_per_epoch": training["pairs_per_epoch"], "train_seconds": training["seconds"],
             "train_cpu_seconds": training["cpu_seconds"], "precision": training["precision"],
             "threads": training["threads"], "per_epoch": training["epochs"],
             "eval_seconds": round(time.perf_counter() - t0, 1), "eval_cpu_seconds": round(time.process_time() - c0, 1),
             "metrics": metrics}
    strict = {o: {s: m[s].get("strict", {}) for s in ("test", "dev")} for o, m in metrics.items()}
    figs = "; ".join(f"{o} test {m['test'].get('top1', 0):.3f}/{m['test'].get('top5', 0):.3f} dev "
                     f"{m['dev'].get('top1', 0):.3f}/{m['dev'].get('top5', 0):.3f}" for o, m in strict.items())
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {point['pairs_per_epoch']:,} pairs/epoch, training "
          f"{point['train_cpu_seconds']:.0f} s CPU / {point['train_seconds']:.0f} s wall; strict top-1/top-5 {figs}",
          flush=True)
    return point


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--ontologies", default="fbbt,go", help="comma-separated, of " + ", ".join(FILES))
    ap.add_argument("--go-terms", type=int, default=2000, help="GO terms in the sample (sibling families)")
    ap.add_argument("--sample-seed", type=int, default=13)
    ap.add_argument("--points", default=",".join(DEFAULT_POINTS),
                    help="comma-separated, of " + ", ".join(curve.VARIANTS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=None, help="checkpoints and the ontology cache [a temporary dir]")
    ap.add_argument("--json", type=Path, default=None, help="the curve as JSON (read back: done points are skipped)")
    ap.add_argument("--markdown", type=Path, default=None, help="the curve as a Markdown table")
    args = ap.parse_args()
    try:
        require("sentence_transformers", "dense", "bench_term_encoder_curve.py")
    except ExtraMissing as e:
        sys.exit(str(e))
    names = [n.strip() for n in args.ontologies.split(",") if n.strip()]
    points = [p.strip() for p in args.points.split(",") if p.strip()]
    bad = [n for n in names if n not in FILES] + [p for p in points if p not in curve.VARIANTS]
    if bad:
        sys.exit(f"unknown ontology or point: {', '.join(bad)[:200]} (ontologies: {', '.join(FILES)}; points: "
                 f"{', '.join(curve.VARIANTS)})")
    with tempfile.TemporaryDirectory(prefix="flysift-curve-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        base_cfg = TrainConfig(ontologies=tuple(names))
        tables, about = load_tables(args.data, names, args.go_terms, args.sample_seed, work / "cache")
        splits = [split(t, base_cfg.split_seed, base_cfg.test_fraction, base_cfg.dev_fraction) for t in tables]
        defs = any(curve.variant(p, base_cfg).definition_share > 0 for p in points)
        data = Data(tables, splits, Corpus(tables, splits, definitions=defs))
        for o, s in zip(names, splits, strict=True):
            about[o]["split_terms"] = {k: s.count(k) for k in ("train", "dev", "test")}
        print(f"subset: {json.dumps(about)}", flush=True)
        done: list[dict[str, Any]] = []
        if args.json and args.json.is_file():
            old = json.loads(args.json.read_text())
            if old.get("subset") == about:
                done = [p for p in old.get("points", []) if p.get("point") in curve.VARIANTS]
            else:
                print(f"{args.json}: another subset, its points are not reused", flush=True)
        for name in points:
            if any(p["point"] == name for p in done):
                continue
            done.append(run_point(name, data, base_cfg, args.threads, work))
            order = {n: i for i, n in enumerate(curve.VARIANTS)}
            done.sort(key=lambda p: order[p["point"]])
            if args.json:
                args.json.write_text(json.dumps({"subset": about, "split_seed": base_cfg.split_seed,
                                                 "machine": machine(), "points": done}, indent=1))
    table = curve.markdown(done)
    print(table)
    best = curve.best_on_dev(done)
    if best:
        print(f"best on the dev terms (strict top-5, mean over ontologies): {best['point']} "
              f"({curve.dev_score(best):.3f})")
    if args.markdown:
        args.markdown.write_text(table)


if __name__ == "__main__":
    main()
