#!/usr/bin/env bash
# The dense build on a GPU, in one short run (~3-8 minutes on one H200): a generated corpus, `flysift index corpus`,
# `flysift index dense --device cuda`, then bench_dense.py's split of the same work (tokenisation alone, the network
# alone, both pipelined). Prints one JSON object on stdout; progress goes to stderr.
#
#   bash bench/gpu_dense.sh [PAPERS]        # PAPERS of ~8,300 words (default 1000: ~53,000 passages)
#
# Python: the first of $PYTHON, .venv/bin/python, python3 that imports torch, sentence_transformers and faiss, else a
# virtualenv under $WORK with this working tree and the dense extra (bench/gpu_env.sh). Writes only under $WORK
# (default a temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."
PAPERS=${1:-1000}
WORK=${WORK:-$(mktemp -d /tmp/flysift-gpu.XXXXXX)}
log() { echo "gpu_dense: $*" >&2; }

# usable: the dense stack imports and flysift is installed (its `index` command is an entry point)
CHECK="import torch, sentence_transformers, faiss, tantivy, importlib.metadata as m
assert any(e.name == 'index' for e in m.entry_points(group='flysift.commands'))"
. bench/gpu_env.sh
gpu_python gpu_dense "$CHECK"

log "generating $PAPERS papers in $WORK"
"$PY" -m indexer.synthetic --papers "$PAPERS" --words 8300 --seed 7 --out "$WORK/corpus" >&2
log "indexing the corpus"
"$PY" -m search.cli.main index corpus "$WORK/corpus/corpus.jsonl" --data-dir "$WORK/data" >&2
log "flysift index dense --device cuda"
"$PY" -m search.cli.main index dense --data-dir "$WORK/data" --device cuda --json >"$WORK/dense.json"
log "tokenisation, network and pipeline apart (bench_dense.py)"
"$PY" bench/bench_dense.py --data-dir "$WORK/data" --device cuda --backends torch --passages 20000 --no-before \
  --out "$WORK/split.json" >/dev/null

"$PY" - "$WORK" <<'PY'
import json, sys
from pathlib import Path
work = Path(sys.argv[1])
meta = json.loads((work / "dense.json").read_text().strip().splitlines()[-1])
split = json.loads((work / "split.json").read_text())["throughput"][0]
print(json.dumps({
    "device": meta.get("device"), "backend": meta.get("backend"), "dtype": meta.get("dtype"),
    "batch_size": meta.get("batch_size"), "passages": meta["count"],
    "end_to_end_passages_per_s": meta["passages_per_s"], "embed_seconds": meta["embed_seconds"],
    "embed_cpu_seconds": meta["embed_cpu_seconds"], "load_seconds": meta.get("load_seconds"),
    "seconds_with_faiss": meta["seconds"],
    "split_passages": split["passages"], "tokenize_passages_per_s": split["tokenize_passages_per_s"],
    "model_passages_per_s": split["model_passages_per_s"],
    "pipelined_passages_per_s": split["passages_per_s"], "threads": split.get("threads"),
}, indent=1))
PY
