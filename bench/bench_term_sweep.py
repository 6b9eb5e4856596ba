"""The cost of the training's fusion-weight sweep (search.ontology.encoder.holdout.weight_sweep: the strict dev
hold-out at every weight of a grid), this tree against a baseline (another git ref), on one published term encoder:
wall and CPU seconds of each tree's sweep, in a fresh process each, one after the other, the machine's load
average before and after, and whether the two trees' dev figures are equal (a speed-up must not change them).

    .venv/bin/python bench/bench_term_sweep.py --data-dir D [--baseline main] [--weights 0,0.25,0.5,...]
        [--json out.json]

``D`` is a data dir with go, fbbt (and fbdv) indexed and a term encoder (``flysift train term-encoder``; an
untrained one, ``--epochs 0``, times the same work). Both trees sweep the same grid (``--weights``, default this
tree's :data:`~search.ontology.encoder.holdout.WEIGHTS`). Reads only the ontologies; never CRAFT or FlyAOC.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ONTOLOGIES = ("go", "fbbt", "fbdv")


def child(data_dir: Path, weights: list[float]) -> None:
    """One sweep in this process (the tree on ``sys.path`` first); prints its seconds and rows as JSON."""
    from search.core.config import Settings
    from search.ontology.encoder import artefact, holdout
    from search.services import Services

    version = artefact.current_version(data_dir)
    if version is None:
        sys.exit(f"--data-dir {data_dir}: no term encoder there (run `flysift train term-encoder --data-dir ...`)")
    folder = artefact.version_dir(data_dir, version)
    _, manifest = artefact.read_manifest(folder)
    terms = Services.open(Settings(data_dir=data_dir, engine="embedded")).terms
    onts = {n: terms.ontology(n) for n in ONTOLOGIES if n in manifest["ontologies"]}
    t0, c0 = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="flysift-sweep-") as work:
        rows = holdout.weight_sweep(folder, manifest, onts, Path(work), weights)
    print(json.dumps({"root": str(Path(holdout.__file__).resolve().parents[3]), "version": version,
                      "wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "rows": rows}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--baseline", default="main", help="A git ref to compare with, or 'none' [main]")
    ap.add_argument("--weights", type=lambda s: [float(w) for w in s.split(",")], default=None)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:   # the parent passes the grid
        return child(args.data_dir, args.weights)
    sys.path.insert(0, str(ROOT))
    from bench.common import archive_ref
    from search.ontology.encoder.holdout import WEIGHTS

    args.weights = args.weights or list(WEIGHTS)

    out: dict[str, dict] = {}
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this tree": ROOT}
        if args.baseline != "none":
            label, base = archive_ref(args.baseline, Path(tmp) / "baseline")
            trees = {f"baseline {label}": base, **trees}
        for label, tree in trees.items():
            run = subprocess.run(
                [sys.executable, str(ROOT / "bench" / "bench_term_sweep.py"), "--child", "--data-dir",
                 str(args.data_dir), "--weights", ",".join(map(str, args.weights))],
                env={**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}, cwd=tree, check=True,
                capture_output=True, text=True)
            got = json.loads(run.stdout.strip().splitlines()[-1])
            if Path(got["root"]) != tree.resolve():
                sys.exit(f"{label}: ran the code in {got['root']}, not {tree}")
            out[label] = got
            print(f"{label}: {got['wall']:.1f} s wall, {got['cpu']:.1f} s CPU", flush=True)
    load1 = os.getloadavg()
    first = next(iter(out.values()))
    queries = sum(r["queries"] for r in first["rows"])
    print(f"\n## The training's fusion-weight sweep ({first['version']}; {queries:,} dev queries × "
          f"{len(args.weights)} weights; {os.cpu_count()} cores, load average {load0[0]:.1f} before, "
          f"{load1[0]:.1f} after)\n\n| tree | wall s | CPU s |\n|---|---|---|")
    for label, got in out.items():
        print(f"| {label} | {got['wall']:.1f} | {got['cpu']:.1f} |")
    if len(out) > 1:
        same = all(got["rows"] == first["rows"] for got in out.values())
        print("\ndev figures of every weight: " + ("equal" if same else "DIFFER between the trees"))
    if args.json:
        args.json.write_text(json.dumps({"load": [load0, load1], "weights": args.weights, "trees": out}, indent=2))


if __name__ == "__main__":
    main()
