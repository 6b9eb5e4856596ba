#!/usr/bin/env bash
# Stop every node start.sh started under FLYSIFT_NODE_HOME (one node: HOME/node.pid; several: HOME/node-*/node.pid):
# SIGTERM to all, then SIGKILL to any still alive after 30 s. `stop.sh --clean` also deletes the cluster's data
# (indices and snapshots).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
home=${FLYSIFT_NODE_HOME:-$here/.node}

shopt -s nullglob
pidfiles=("$home"/node-*/node.pid)
[[ -f $home/node.pid ]] && pidfiles=("$home/node.pid" "${pidfiles[@]}")
pids=()
for f in "${pidfiles[@]}"; do
  pid=$(cat "$f")
  if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; pids+=("$pid"); fi
  rm -f "$f"
done
if ((${#pidfiles[@]} == 0)); then
  echo "cluster-local: no pid file under $home; nothing to stop" >&2
else
  for _ in $(seq 1 30); do
    left=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left+=("$pid"); done
    pids=("${left[@]}")
    ((${#pids[@]} == 0)) && break
    sleep 1
  done
  for pid in "${pids[@]}"; do
    echo "cluster-local: pid $pid ignored SIGTERM; killing" >&2; kill -KILL "$pid" 2>/dev/null || true
  done
  rm -f "$home/nodes"
  echo "cluster-local: stopped ${#pidfiles[@]} node(s)" >&2
fi
if [[ ${1:-} == --clean ]]; then rm -rf "$home"; fi
