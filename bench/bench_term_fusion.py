"""Fusion forms for the term encoder's hybrid search (issue #30), on the encoder's **dev** terms: would another way
of combining the lexical ranking and the encoder rank the held-out terms better than the served linear sum?

It builds bench_ontology's strict hold-out on the dev terms (the same queries, cut index and service:
search.ontology.encoder.holdout), gathers what each query's hybrid search would fuse
(``TermService.fusion_candidates``: the lexical top 30 with their scores, the encoder's nearest 30 with their
cosines, the cosines of lexical candidates the encoder lacks, the exact labels pinned first) and ranks those
candidates again, offline, with each form:

- ``linear``: lexical score + w × cosine (what is served; w from ``--weights``);
- ``normalised``: lexical score / the query's best lexical score + w × cosine;
- ``rrf``: reciprocal ranks, 1 / (k + lexical rank) + 1 / (k + encoder rank);
- ``learned``: a listwise linear model (a softmax over each query's candidates) on eight features of both sides,
  cross-validated in five folds by term: no query is ranked by a model that saw its term.

Exact labels stay first in every form, as served. Dev terms only: the test terms are for one confirmation of a
chosen form (bench_ontology.py without ``--dev``). The ``linear`` row at the served weight equals
bench_ontology's hybrid figure (the same candidates, the same formula).

    .venv/bin/python bench/bench_term_fusion.py --data ../shared/data --encoder D [--go-sample 1000] [--json out]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench.bench_ontology as bo  # noqa: E402
from search.ontology.encoder import holdout  # noqa: E402
from search.ontology.model import Ontology  # noqa: E402

Score = Callable[[str, dict], float]
FOLDS = 5
#: the learned model's L2 penalty and gradient steps (plain full-batch descent on standardised features)
L2, STEPS, STEP = 1e-3, 1500, 0.5


def record(onts: dict[str, Ontology], args: argparse.Namespace, tmp: Path) -> list[dict]:
    """Each dev query with the candidates its hybrid search gathers (search.ontology.encoder.fusion.gather, through
    the service of bench_ontology's strict dev cut) and its answer, in bench_ontology's order."""
    from search.ontology.encoder import fusion

    folder, manifest = bo.encoder_artefact(args.encoder)
    out: list[dict] = []
    for name in args.ontologies:
        if name not in manifest["held_out"]:
            continue
        ont = onts[name]
        batch = holdout.queries(ont, manifest, "dev", args.go_sample, args.seed)
        svc = holdout.cut_service(tmp / f"dev-{name}", ont, holdout.strict_drop(batch),
                                  holdout.LabelRows(folder, manifest, ont))
        for q, t in batch:
            c = svc.fusion_candidates(name, q, 5)
            if c is None:
                sys.exit(f"{name}: the dev query {q[:60]!r} is an id lookup, not a fusion")
            out.append({"lex": list(zip(c.lexical.ids, c.lexical.scores, strict=True)),
                        "full": len(c.lexical) >= c.depth, "nb": [(n.id, float(n.score)) for n in c.neighbours],
                        "cos": {tid: float(cos) for tid, (cos, _) in c.cosines.items()},
                        "pinned": fusion.exact_ids(q, c.lexical.labels()), "ontology": name, "query": q, "want": t})
    return out


def context(r: dict) -> dict:
    """What the forms read of one recorded fusion: both sides' scores and ranks, the lexical floor, the candidates
    in the served tie order, the pinned labels apart."""
    lex = dict(r["lex"])
    cos = dict(r["cos"]) | dict(r["nb"])
    pinned = set(r["pinned"])
    order = [t for t in dict.fromkeys([*lex, *(t for t, _ in r["nb"])]) if t not in pinned]
    return {"lex": lex, "cos": cos, "nb": dict(r["nb"]), "order": order, "pinned": r["pinned"],
            "floor": min(lex.values()) if lex and r["full"] else 0.0,
            "lmax": max(lex.values(), default=1.0) or 1.0, "cmax": max(cos.values(), default=0.0),
            "lrank": {t: i for i, t in enumerate(lex)},
            "crank": {t: i for i, t in enumerate(sorted(cos, key=lambda t: -cos[t]))}}


def ranked(c: dict, score: Callable[[str], float]) -> list[str]:
    """Pinned labels first, then the rest by score (ties in the served order)."""
    pos = {t: i for i, t in enumerate(c["order"])}
    return c["pinned"] + sorted(c["order"], key=lambda t: (-score(t), pos[t]))


def bound(score: Score, c: dict) -> Callable[[str], float]:
    return lambda t: score(t, c)


FORMS: dict[str, Callable[[float], Score]] = {
    "linear": lambda w: lambda t, c: c["lex"].get(t, c["floor"]) + w * c["cos"].get(t, 0.0),
    "normalised": lambda w: lambda t, c: c["lex"].get(t, c["floor"]) / c["lmax"] + w * c["cos"].get(t, 0.0),
    "rrf": lambda k: lambda t, c: 1 / (k + c["lrank"].get(t, 60)) + 1 / (k + c["crank"].get(t, 60)),
}


def features(t: str, c: dict) -> list[float]:
    lex, cos = c["lex"].get(t, c["floor"]), c["cos"].get(t, 0.0)
    return [lex, cos, lex - c["lmax"], cos - c["cmax"], float(t in c["lex"]), float(t in c["nb"]),
            1 / (1 + c["lrank"].get(t, 60)), 1 / (1 + c["crank"].get(t, 60))]


def fit(lists: list[tuple[np.ndarray, int]]) -> np.ndarray:
    """Weights of a listwise softmax over each list's candidates (rows: candidates, the answer at the index)."""
    width = max(len(x) for x, _ in lists)
    dims = lists[0][0].shape[1]
    xs = np.zeros((len(lists), width, dims))
    mask = np.zeros((len(lists), width), bool)
    for i, (x, _) in enumerate(lists):
        xs[i, : len(x)], mask[i, : len(x)] = x, True
    answer = np.array([a for _, a in lists])
    w = np.zeros(dims)
    for _ in range(STEPS):
        s = np.where(mask, xs @ w, -np.inf)
        p = np.exp(s - s.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        grad = (np.einsum("qc,qcd->d", p, xs) - xs[np.arange(len(lists)), answer].sum(0)) / len(lists) + 2 * L2 * w
        w -= STEP * grad
    return w


def learned(rows: list[dict], ctxs: list[dict], seed: int) -> list[list[str]]:
    """Each query ranked by a model fitted on the other folds' terms (features standardised on those folds)."""
    terms = sorted({r["want"] for r in rows})
    random.Random(seed).shuffle(terms)
    fold = {t: i % FOLDS for i, t in enumerate(terms)}
    feats = [np.array([features(t, c) for t in c["order"]]).reshape(-1, 8) for c in ctxs]
    out: list[list[str]] = [[] for _ in rows]
    for f in range(FOLDS):
        train = [i for i, r in enumerate(rows) if fold[r["want"]] != f and r["want"] in ctxs[i]["order"]]
        stacked = np.concatenate([feats[i] for i in train])
        mu, sd = stacked.mean(0), stacked.std(0) + 1e-9
        w = fit([((feats[i] - mu) / sd, ctxs[i]["order"].index(rows[i]["want"])) for i in train])
        for i, r in enumerate(rows):
            if fold[r["want"]] == f:
                s = dict(zip(ctxs[i]["order"], ((feats[i] - mu) / sd) @ w, strict=True))
                out[i] = ranked(ctxs[i], s.__getitem__)
    return out


def topk(rows: list[dict], lists: list[list[str]]) -> dict:
    n = max(1, len(rows))
    return {"top1": sum(lst[:1] == [r["want"]] for r, lst in zip(rows, lists, strict=True)) / n,
            "top5": sum(r["want"] in lst[:5] for r, lst in zip(rows, lists, strict=True)) / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--encoder", type=Path, required=True, help="A data dir with a term encoder trained on these "
                                                                 "ontology files (as bench_ontology.py --encoder)")
    ap.add_argument("--go-sample", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--ontologies", type=lambda s: s.split(","), default=["go", "fbbt"])
    ap.add_argument("--weights", type=lambda s: [float(w) for w in s.split(",")], default=[0.5, 1, 1.5, 2, 3])
    ap.add_argument("--rrf-k", type=lambda s: [float(k) for k in s.split(",")], default=[1, 10, 60])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    onts = {n: Ontology.load(args.data / bo.FILES[n], n) for n in args.ontologies}
    with tempfile.TemporaryDirectory() as tmp:
        recorded = record(onts, args, Path(tmp))
    results = []
    print("\n## Fusion forms on the dev terms (strict)\n\n| ontology | queries | answer among the candidates | "
          "form | parameter | top-1 | top-5 |\n|---|---|---|---|---|---|---|")
    for name in args.ontologies:
        rows = [r for r in recorded if r["ontology"] == name]
        if not rows:
            continue
        ctxs = [context(r) for r in rows]
        reach = sum(r["want"] in c["pinned"] or r["want"] in c["order"] for r, c in zip(rows, ctxs, strict=True))
        grid = [(form, p) for form, ps in (("linear", args.weights), ("normalised", args.weights),
                                           ("rrf", args.rrf_k)) for p in ps]
        for form, p in grid:
            score = FORMS[form](p)
            results.append({"ontology": name, "form": form, "parameter": p, **topk(
                rows, [ranked(c, bound(score, c)) for c in ctxs])})
        results.append({"ontology": name, "form": "learned", "parameter": f"{FOLDS}-fold by term",
                        **topk(rows, learned(rows, ctxs, args.seed))})
        for r in results:
            if r["ontology"] == name:
                print(f"| {name} | {len(rows)} | {reach / len(rows):.3f} | {r['form']} | {r['parameter']} | "
                      f"{r['top1']:.3f} | {r['top5']:.3f} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
