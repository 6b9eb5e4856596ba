"""The core install (issue #14): size of a fresh virtualenv's site-packages after ``pip install .`` and the time the
install takes from the local pip cache, beside the same install with the ``all`` extra (everything optional) in the
same run. Wall and CPU time (user + system of pip and its children) are reported; the machine may be shared and noisy.

    .venv/bin/python bench/bench_install.py [--extras all] [--runs 2]

Each run makes a new virtualenv in a temporary directory with the interpreter running this script, upgrades nothing
(pip as the venv module ships it), and installs this checkout non-editable. The first run of a spec also warms the
pip cache; the fastest run is reported as "from the cache". Nothing is downloaded when the cache already has every
wheel.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def install_once(spec: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="flysift-install-") as tmp:
        venv = Path(tmp) / "v"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", spec]
        cpu0, t0 = _children_cpu(), time.perf_counter()
        subprocess.run(pip, check=True, cwd=tmp, env={**os.environ, "PIP_NO_INPUT": "1"})
        wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
        site = next((venv / "lib").glob("python3*/site-packages"))
        return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "site_packages_mb": round(_du(site) / 2**20)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--extras", default="all", help="the extra installed beside the core (default: all)")
    ap.add_argument("--runs", type=int, default=2, help="installs per spec; the fastest is reported")
    args = ap.parse_args()
    out = {}
    for label, spec in (("core", str(ROOT)), (f"[{args.extras}]", f"{ROOT}[{args.extras}]")):
        runs = [install_once(spec) for _ in range(args.runs)]
        best = min(runs, key=lambda r: r["wall_s"])
        out[label] = {**best, "runs": runs}
        print(f"{label:>8}: {best['site_packages_mb']} MB site-packages, {best['wall_s']} s wall, "
              f"{best['cpu_s']} s CPU (fastest of {args.runs})", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
