"""What an index costs on disk (issue #26's title and abstract fields): the index bytes of one generated corpus and of
CRAFT in the embedded engine and, with ``--cluster-url``, on an OpenSearch node, as ``stats()`` reports them.

It uses only what every version of flysift has (``index_corpus``, ``Engine.open_build``, ``stats``), so the same file
run from a checkout of an older commit measures that commit's layout: copy it there and run it with that checkout's
code (``cd OLD && python bench/bench_index_fields.py …``).

usage: python bench/bench_index_fields.py [--papers 2000] [--words 1500] [--craft DIR] [--cluster-url URL]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from indexer.pipeline import index_corpus  # noqa: E402
from indexer.synthetic import SyntheticConfig, generate  # noqa: E402
from search.core.config import Settings  # noqa: E402
from search.services import Services  # noqa: E402
from search.text.passages import split_passages  # noqa: E402


def settings(data: Path, cluster_url: str | None, prefix: str) -> Settings:
    if cluster_url:
        return Settings(data_dir=data, cluster_url=cluster_url, cluster_index_prefix=prefix)
    return Settings(data_dir=data, engine="embedded")


def generated(s: Settings, papers: int, words: int) -> dict[str, float]:
    eng = Services.open(s).engine("generated")
    t0 = time.process_time()
    build = eng.open_build("bench-index-fields", resume=False)
    for p in generate(SyntheticConfig(n_papers=papers, words_per_paper=words, seed=7)):
        build.add(p, split_passages(p))
    build.commit({})
    build.publish()
    st = eng.stats()
    return {"papers": st.papers, "passages": st.passages, "MiB": round(st.index_bytes / 2**20, 2),
            "build CPU s": round(time.process_time() - t0, 1)}


def craft(s: Settings, craft_dir: Path) -> dict[str, float]:
    paths = sorted((craft_dir / "articles" / "nxml").glob("*.nxml"))
    index_corpus(paths, Services.open(s), id_map=craft_dir / "ids" / "craft-idmappings.txt", collection="craft",
                 workers=1, warn=lambda m: None)
    st = Services.open(s).engine("craft").stats()
    return {"papers": st.papers, "passages": st.passages, "MiB": round(st.index_bytes / 2**20, 2)}


def cleanup(s: Settings, prefix: str) -> None:
    eng = Services.open(s).engine()
    t = eng.t  # type: ignore[attr-defined]
    names = list(t.request("GET", f"/{prefix}-*", params={"expand_wildcards": "all"}))
    if names:
        t.request("DELETE", "/" + ",".join(names))
    for tpl in t.request("GET", "/_index_template").get("index_templates", []):
        if tpl["name"].startswith(prefix):
            t.request("DELETE", f"/_index_template/{tpl['name']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--papers", type=int, default=2000)
    ap.add_argument("--words", type=int, default=1500)
    ap.add_argument("--craft", type=Path, default=None)
    ap.add_argument("--cluster-url", default=None)
    args = ap.parse_args()
    here = Path(__file__).resolve().parents[1]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    out: dict[str, dict] = {"commit": {"of": commit}}
    for label, url in (("embedded", None), *([("cluster", args.cluster_url)] if args.cluster_url else [])):
        prefix = f"fsbench-{uuid.uuid4().hex[:8]}"
        with tempfile.TemporaryDirectory() as tmp:
            s = settings(Path(tmp), url, prefix)
            try:
                out[label] = {"generated": generated(s, args.papers, args.words)}
                if args.craft:
                    out[label]["craft"] = craft(s, args.craft)
            finally:
                if url:
                    cleanup(s, prefix)
        print(json.dumps({label: out[label]}), flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
