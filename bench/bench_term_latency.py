"""Term search latency with the term encoder, this tree against a baseline (another git ref), side by side in one
run: two worker processes, each with its own warm service over the same data dir, take the same queries in
alternating blocks, so the machine's load falls on both alike. Per query: wall and CPU time (the process's, both
threads of a hybrid search), in-process, limit 10; and whether the trees' answers (hits, scores, matched synonyms)
are equal. Queries are distinct seeded synonyms of the ontology's live terms (each process sees each query once per
mode: the query-vector cache never answers, except in the ``--repeat`` pass, labelled as such). The machine's load
average is printed before and after.

    .venv/bin/python bench/bench_term_latency.py --data-dir /tmp/data [--baseline main] [--this HEAD]
        [--ontologies go,fbbt] [--queries 300] [--modes bm25,hybrid] [--block 25] [--repeat] [--json out.json]

``--baseline none`` measures this tree alone. The baseline is ``git archive REF`` extracted to a temporary folder
and run with this virtual environment.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(data_dir: Path) -> None:
    """A worker: reads JSON requests ({"ontology", "mode", "queries"}) from stdin, answers per query wall and CPU ms."""
    from search.core.config import Settings
    from search.services import Services

    svc = Services.open(Settings(data_dir=data_dir, engine="embedded")).terms
    print(json.dumps({"ready": True, "root": str(Path(sys.modules["search"].__file__ or "").parents[1])}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("warm"):
            for mode in req["modes"]:
                svc.search(req["ontology"], "warm up", mode=mode)
            print(json.dumps({"ok": True}), flush=True)
            continue
        out = []
        for q in req["queries"]:
            t0, c0 = time.perf_counter(), time.process_time()
            hits = svc.search(req["ontology"], q, limit=10, mode=req["mode"]).hits
            wall, cpu = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
            out.append((wall, cpu, [h.model_dump(mode="json") for h in hits]))
        print(json.dumps(out), flush=True)


def queries(data_dir: Path, name: str, n: int, seed: int) -> list[str]:
    """``n`` distinct synonyms of live terms of the served ontology ``name`` (seeded)."""
    sys.path.insert(0, str(ROOT))
    from bench.bench_ontology import eligible
    from bench.common import folder_terms

    texts = sorted({text for text, _ in eligible(folder_terms(data_dir).ontology(name))})
    return random.Random(seed).sample(texts, min(n, len(texts)))


def pct(xs: list[float], f: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * len(xs)))]


def measure(procs: dict[str, subprocess.Popen], args: argparse.Namespace) -> dict[str, dict]:
    """Each ontology and mode: the same queries to every worker, in blocks, who goes first alternating."""
    def ask(label: str, req: dict) -> list:
        p = procs[label]
        p.stdin.write(json.dumps(req) + "\n")   # type: ignore[union-attr]
        p.stdin.flush()   # type: ignore[union-attr]
        return json.loads(p.stdout.readline())   # type: ignore[union-attr]

    results: dict[str, dict] = {}
    for name in args.ontologies:
        qs = queries(args.data_dir, name, args.queries, args.seed)
        for label in procs:
            ask(label, {"warm": True, "ontology": name, "modes": args.modes})
        passes = [(m, m) for m in args.modes]
        if args.repeat and "hybrid" in args.modes:   # the same queries again: this tree's cache answers them
            passes.append(("hybrid, repeated queries", "hybrid"))
        for shown, mode in passes:
            got: dict[str, list] = {label: [] for label in procs}
            for b, s in enumerate(range(0, len(qs), args.block)):
                order = list(procs) if b % 2 == 0 else list(procs)[::-1]
                for label in order:
                    got[label] += ask(label, {"ontology": name, "mode": mode, "queries": qs[s:s + args.block]})
            answers = [[a for _, _, a in xs] for xs in got.values()]
            differ = [q for i, q in enumerate(qs) if any(a[i] != answers[0][i] for a in answers[1:])]
            for label, xs in got.items():
                wall, cpu = [w for w, _, _ in xs], [c for _, c, _ in xs]
                results[f"{name} {shown} {label}"] = {
                    "ontology": name, "mode": shown, "tree": label, "queries": len(xs),
                    "wall_p50": pct(wall, .5), "wall_p99": pct(wall, .99),
                    "cpu_p50": pct(cpu, .5), "cpu_p99": pct(cpu, .99),
                    "answers_differ": len(differ), "first_differing": differ[:3]}
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True, help="A data dir with the ontologies indexed and a term "
                                                                 "encoder (flysift train term-encoder)")
    ap.add_argument("--baseline", default="main", help="A git ref to compare with, or 'none' [main]")
    ap.add_argument("--this", help="Measure this git ref (archived like the baseline) instead of the working tree, "
                                   "which may then be edited while the run goes on")
    ap.add_argument("--ontologies", type=lambda s: s.split(","), default=["go"])
    ap.add_argument("--modes", type=lambda s: s.split(","), default=["bm25", "hybrid"])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--block", type=int, default=25, help="Queries per turn of each process")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--repeat", action="store_true", help="Then hybrid once more on the same queries (cached "
                                                          "query vectors; never the published cold figure)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child)
    sys.path.insert(0, str(ROOT))
    from bench.common import archive_ref

    with tempfile.TemporaryDirectory() as tmp:
        trees = dict([archive_ref(args.this, Path(tmp) / "this")]) if args.this else {"this tree": ROOT}
        if args.baseline != "none":
            label, base = archive_ref(args.baseline, Path(tmp) / "baseline")
            trees = {f"baseline {label}": base, **trees}
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        procs = {}
        for label, tree in trees.items():
            procs[label] = subprocess.Popen(
                [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tree)!r}); "
                 f"sys.argv = ['x', '--data-dir', '_', '--child', {str(args.data_dir)!r}]; "
                 f"import runpy; runpy.run_path({str(ROOT / 'bench' / 'bench_term_latency.py')!r}, "
                 "run_name='__main__')"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**env, "PYTHONPATH": str(tree)},
                cwd=tree)
        for label, p in procs.items():
            ready = json.loads(p.stdout.readline())   # type: ignore[union-attr]
            assert Path(ready["root"]).resolve() == Path(trees[label]).resolve(), (label, ready)

        load0 = os.getloadavg()
        t0 = time.perf_counter()
        results = measure(procs, args)
        for p in procs.values():
            p.stdin.close()   # type: ignore[union-attr]
            p.wait(timeout=60)
        load1 = os.getloadavg()
    print(f"\n## Term search latency, in-process, limit 10 ({os.cpu_count()} cores; load average "
          f"{load0[0]:.1f} before, {load1[0]:.1f} after; {time.perf_counter() - t0:.0f} s)\n")
    print("| ontology | mode | tree | queries | wall p50 ms | wall p99 ms | CPU p50 ms | CPU p99 ms |\n"
          "|---|---|---|---|---|---|---|---|")
    for r in results.values():
        print(f"| {r['ontology']} | {r['mode']} | {r['tree']} | {r['queries']} | {r['wall_p50']:.1f} | "
              f"{r['wall_p99']:.1f} | {r['cpu_p50']:.1f} | {r['cpu_p99']:.1f} |")
    if len(procs) > 1:   # the trees' answers (hits, scores, matched synonyms): a speed-up must not change them
        for key, r in results.items():
            if key.endswith(next(iter(procs))):
                print(f"{r['ontology']} {r['mode']}: answers " + (
                    f"equal on all {r['queries']} queries" if not r["answers_differ"] else
                    f"differ on {r['answers_differ']} of {r['queries']} (first: {r['first_differing']})"))
    if args.json:
        args.json.write_text(json.dumps({"load": [load0, load1], "rows": list(results.values())}, indent=2))


if __name__ == "__main__":
    main()
