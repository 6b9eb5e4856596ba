# Sourced by the GPU scripts (bench/gpu_dense.sh, bench/gpu_term_encoder.sh): the Python they run and the GPU check.
#
#   gpu_python NAME CHECK   sets PY: $PYTHON, else .venv/bin/python, else python3, the first that runs the Python
#                           snippet CHECK; else a virtualenv under $WORK that sees the system's packages (a
#                           preinstalled CUDA torch is reused) gets this working tree, offline first, then
#                           `pip install -e ".[dense]"` (PyPI must be reachable then). Exits 3 without a CUDA GPU.

gpu_python() {
  local name=$1 check=$2 candidate
  PY=""
  for candidate in "${PYTHON:-}" .venv/bin/python python3; do
    if [ -n "$candidate" ] && command -v "$candidate" >/dev/null && "$candidate" -c "$check" 2>/dev/null; then
      PY=$candidate; break
    fi
  done
  if [ -z "$PY" ]; then
    echo "$name: installing this working tree into $WORK/venv (system packages visible)" >&2
    python3 -m venv --system-site-packages "$WORK/venv"
    # offline first: the dependencies may all be installed already; else the dense extra from the registry
    "$WORK/venv/bin/pip" install -q --no-deps --no-build-isolation -e . >&2 2>/dev/null || true
    "$WORK/venv/bin/python" -c "$check" 2>/dev/null || "$WORK/venv/bin/pip" install -q -e ".[dense]" >&2
    PY=$WORK/venv/bin/python
  fi
  "$PY" -c "import torch, sys; ok = torch.cuda.is_available(); print('$name:', torch.__version__,
torch.cuda.get_device_name(0) if ok else 'NO CUDA GPU', file=sys.stderr); sys.exit(0 if ok else 3)" || exit 3
}
