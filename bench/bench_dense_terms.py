"""Dense term index benchmark (issue #15): term search with ``mode`` bm25 (the lexical ranking), dense and hybrid
(RRF) on bench_ontology's sets: the GO and FBbt synonym hold-outs (strict: the queried terms lose every synonym, in
the lexical index *and* in the dense index, which is built from the same cut ontology), the frozen mention list, the
FBbt 2025 labels, and term search latency on full GO with each mode.

    .venv/bin/python bench/bench_dense_terms.py [--data ../shared/data] [--ontologies go,fbbt] [--go-sample 2000]
        [--seed 13 | --dev-seed 7] [--rrf-k 5] [--dense-weight 0.1] [--parts name,synonyms,definition]
        [--cache /tmp/h6-dt] [--skip-sets] [--json out.json]

Embeddings are cached by text in ``--cache`` (``<ontology>-vectors.npy`` + ``<ontology>-texts.json``, written on the
first run): every hold-out index is built from the cache, so GO is embedded once. Tune (RRF k, parts) only with
``--dev-seed``, whose GO sample shares no term with the test sample (FBbt: a seeded half of its synonyms); the
mention list and the 2025 labels only measure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_ontology import FILES, draw, eligible, fbbt_2025, read_mentions  # noqa: E402
from bench.common import folder_terms  # noqa: E402
from search.engines.dense import load_encoder, model_name, resolve_encoder  # noqa: E402
from search.engines.embedded.terms import TermIndex  # noqa: E402
from search.ontology import dense_terms  # noqa: E402
from search.ontology.model import Ontology  # noqa: E402
from search.ontology.service import TermService  # noqa: E402

MODES = ("bm25", "dense", "hybrid")


class CachedEmbedder:
    """Texts → unit float32 rows, from a cache of an ontology's texts (made on first use with the CPU encoder the
    passage index defaults to), embedding only texts it lacks."""

    def __init__(self, cache: Path, ont: Ontology, data_dir: Path):
        self.backend, self.device, self.dtype = resolve_encoder("cpu", None)
        self.encoder = load_encoder(model_name(), self.backend, self.device, self.dtype, data_dir)
        vec_path, txt_path = cache / f"{ont.name}-vectors.npy", cache / f"{ont.name}-texts.json"
        if not vec_path.exists():
            _, _, _, texts = dense_terms.term_labels(ont)
            texts = list(dict.fromkeys(texts))
            t0, c0 = time.perf_counter(), time.process_time()
            vecs = self._encode(texts)
            print(f"- embedded {len(texts)} texts of {ont.name} in {time.perf_counter() - t0:.0f} s wall, "
                  f"{time.process_time() - c0:.0f} s CPU ({self.backend})", flush=True)
            np.save(vec_path, vecs.astype(np.float16), allow_pickle=False)
            txt_path.write_text(json.dumps(texts))
        self.vectors = np.load(vec_path, allow_pickle=False).astype(np.float32)
        self.row = {t: i for i, t in enumerate(json.loads(txt_path.read_text()))}

    def _encode(self, texts: list[str]) -> np.ndarray:
        order = sorted(range(len(texts)), key=lambda j: len(texts[j]))
        out = np.zeros((len(texts), self.encoder.dim), dtype=np.float32)
        done = 0
        for vecs in self.encoder.stream(iter([[texts[j] for j in order[k:k + 64]]
                                              for k in range(0, len(order), 64)])):
            out[order[done:done + len(vecs)]] = vecs
            done += len(vecs)
        return out

    def __call__(self, texts: list[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self.row and t.strip() not in self.row))
        extra = self._encode(missing) if missing else np.zeros((0, self.encoder.dim), np.float32)
        got = {t: extra[i] for i, t in enumerate(missing)}
        return np.stack([got[t] if t in got else self.vectors[self.row.get(t, self.row.get(t.strip(), 0))]
                         for t in texts]) if texts else np.zeros((0, self.encoder.dim), np.float32)


def service(ont: Ontology, path: Path, embedder: CachedEmbedder, parts: tuple[str, ...],
            drop: set[str] | None = None) -> TermService:
    """A service over fresh lexical and dense indexes of ``ont``, the terms in ``drop`` without synonyms (strict)."""
    if drop:
        ont = Ontology.from_terms(ont.name, [t.model_copy(update={"synonyms": []}) if t.id in drop else t
                                             for t in ont.terms()])
    svc = folder_terms(path)
    svc.index_ontology(ont, TermIndex(path).write)
    dense_terms.build(path, ont, parts=parts, embedder=embedder)
    return folder_terms(path)   # reads the saved files, as a served instance does


def score(svc: TermService, queries: list[tuple[str, str, str]], mode: str) -> dict:
    """``(ontology, query, want id)`` → top-1 / top-5, wall and CPU per query."""
    n1 = n5 = 0
    wall, cpu = [], []
    for ont, q, want in queries:
        t0, c0 = time.perf_counter(), time.process_time()
        hits = [h.id for h in svc.search(ont, q, limit=5, mode=mode).hits]
        cpu.append((time.process_time() - c0) * 1000)
        wall.append((time.perf_counter() - t0) * 1000)
        n1 += hits[:1] == [want]
        n5 += want in hits
    n = max(1, len(queries))
    wall.sort()
    cpu.sort()
    p = lambda xs, f: xs[min(len(xs) - 1, int(f * len(xs)))] if xs else 0.0  # noqa: E731
    return {"mode": mode, "queries": len(queries), "top1": n1 / n, "top5": n5 / n,
            "wall_p50": p(wall, .5), "wall_p99": p(wall, .99), "cpu_p50": p(cpu, .5), "cpu_p99": p(cpu, .99)}


def fusion_grid(svc: TermService, queries: list[tuple[str, str, str]], ks: list[int], weights: list[float]
                ) -> list[dict[str, Any]]:
    """Top-1 / top-5 of hybrid for each RRF constant in ``ks`` and dense weight in ``weights``, from one lexical and
    one dense list per query (for the dev split only)."""
    lists = []
    for ont, q, want in queries:
        lexical = svc.search(ont, q, limit=dense_terms.LEXICAL_DEPTH).hits
        index = svc.dense.get(ont, partial(svc.ontology, ont), svc._indexed(ont))
        dense = index.nearest(svc.dense.query_vector(index, q), dense_terms.DENSE_POOL)
        lists.append((lexical, dense, want))
    out = [{"rrf_k": side, "queries": len(lists), "top1": sum([d.id for d in got][:1] == [w] for got, w in pairs)
            / len(lists), "top5": sum(w in [d.id for d in got][:5] for got, w in pairs) / len(lists)}
           for side, pairs in (("bm25 alone", [(lex, w) for lex, _, w in lists]),
                               ("dense alone", [(dense, w) for _, dense, w in lists]))]
    for k in ks:
        for weight in weights:
            fused = [([tid for tid, _ in dense_terms.fuse([h.id for h in lex], dense, 5, k, weight)], want)
                     for lex, dense, want in lists]
            out.append({"rrf_k": k, "dense_weight": weight, "queries": len(lists),
                        "top1": sum(f[:1] == [w] for f, w in fused) / len(lists),
                        "top5": sum(w in f for f, w in fused) / len(lists)})
    return out


def row(label: str, r: dict) -> str:
    return (f"| {label} | {r['mode']} | {r['queries']} | {r['top1']:.3f} | {r['top5']:.3f} | {r['wall_p50']:.1f} / "
            f"{r['wall_p99']:.1f} | {r['cpu_p50']:.1f} / {r['cpu_p99']:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--ontologies", type=lambda s: s.split(","), default=["go", "fbbt"])
    ap.add_argument("--go-sample", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=13, help="The fixed test sample of GO synonyms")
    ap.add_argument("--dev-seed", type=int, help="Score a dev sample instead (tuning: terms disjoint from the test "
                                                  "sample's; FBbt: a seeded half of its synonyms)")
    ap.add_argument("--rrf-k", type=int, default=dense_terms.TERM_RRF_K)
    ap.add_argument("--parts", type=lambda s: tuple(s.split(",")), default=dense_terms.PARTS,
                    help="What is embedded per term: name, synonyms, definition")
    ap.add_argument("--modes", type=lambda s: s.split(","), default=list(MODES))
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "h6-dt")
    ap.add_argument("--weight-grid", type=lambda s: [float(w) for w in s.split(",")], default=[1.0],
                    help="With --rrf-grid: dense weights to try (1: plain RRF)")
    ap.add_argument("--dense-weight", type=float, default=dense_terms.DENSE_WEIGHT)
    ap.add_argument("--skip-sets", action="store_true", help="Only the synonym hold-outs")
    ap.add_argument("--rrf-grid", type=lambda s: [int(k) for k in s.split(",")],
                    help="With --dev-seed: hybrid top-1/top-5 of the hold-out for each RRF constant (e.g. 5,20,60)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    dense_terms.fuse.__defaults__ = (args.rrf_k, args.dense_weight)   # the fusion under test
    args.cache.mkdir(parents=True, exist_ok=True)
    onts = {n: Ontology.load(args.data / FILES[n], n) for n in args.ontologies}
    out: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        embedders = {n: CachedEmbedder(args.cache, o, args.cache / "data") for n, o in onts.items()}
        print(f"\nencoder: {next(iter(embedders.values())).backend} on cpu; parts {','.join(args.parts)}; RRF k "
              f"{args.rrf_k}, dense weight {args.dense_weight}; CPU threads {len(os.sched_getaffinity(0))}\n")
        print("| set | mode | queries | top-1 | top-5 | wall p50 / p99 ms | CPU p50 / p99 ms |\n"
              "|---|---|---|---|---|---|---|")
        for name, sample in (("go", args.go_sample), ("fbbt", None)):
            if name not in onts:
                continue
            cands = eligible(onts[name])
            queries = draw(cands, sample, args.seed)
            label = f"{name} strict, test (seed {args.seed})" if sample else f"{name} strict, all"
            if args.dev_seed is not None:
                queries = (draw(cands, sample, args.dev_seed, {tid for _, tid in queries}) if sample else
                           draw(cands, len(cands) // 2, args.dev_seed))
                label = f"{name} strict, dev (seed {args.dev_seed})"
            svc = service(onts[name], tmp / f"{name}-strict", embedders[name], args.parts,
                          drop={tid for _, tid in queries})
            if args.rrf_grid and args.dev_seed is not None:
                for r in fusion_grid(svc, [(name, q, tid) for q, tid in queries], args.rrf_grid, args.weight_grid):
                    out.append(r | {"set": label})
                    what = (f"hybrid, RRF k {r['rrf_k']}, dense weight {r['dense_weight']}"
                            if isinstance(r["rrf_k"], int) else r["rrf_k"])
                    print(f"| {label} | {what} | {r['queries']} | {r['top1']:.3f} | {r['top5']:.3f} | | |", flush=True)
                continue
            for mode in args.modes:
                r = score(svc, [(name, q, tid) for q, tid in queries], mode) | {"set": label}
                out.append(r)
                print(row(label, r), flush=True)
        if not args.skip_sets:
            for n, o in onts.items():
                service(o, tmp / "full", embedders[n], args.parts)
            svc = folder_terms(tmp / "full")
            sets = {"mention list v1": [(r["ontology"], r["mention"], r["expected_id"]) for r in read_mentions()
                                        if r["ontology"] in onts]}
            if "fbbt" in onts:
                sets["FBbt 2025 labels"] = [(o, q, i) for o, q, i, _ in fbbt_2025(args.data, onts["fbbt"])]
            for label, qs in sets.items():
                for mode in args.modes:
                    r = score(svc, qs, mode) | {"set": label}
                    out.append(r)
                    print(row(label, r), flush=True)
            if "go" in onts:
                import random

                qs = [("go", q, t) for q, t in random.Random(args.seed).sample(eligible(onts["go"]), 500)]
                for mode in args.modes:
                    svc.search("go", "warm up", mode=mode)
                    r = score(svc, qs, mode) | {"set": "GO latency, 500 synonyms (full GO)"}
                    out.append(r)
                    print(row(r["set"], r), flush=True)
                m = svc.dense.get("go", lambda: svc.ontology("go"), svc._indexed("go")).manifest
                out.append({"manifest": {k: v for k, v in m.items() if k not in ("ids", "aspects")}})
                print(f"\nGO dense term index: {m['vectors']} vectors ({m['counts']}), {m['terms']} terms, "
                      f"{os.path.getsize(tmp / 'full' / 'ontologies' / 'go.dense-terms.npy') / 2**20:.0f} MiB")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
