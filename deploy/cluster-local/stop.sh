#!/usr/bin/env bash
# Stop the node started by start.sh (SIGTERM, then SIGKILL after 30 s). `stop.sh --clean` also deletes its data.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
home=${FLYSIFT_NODE_HOME:-$here/.node}
pidfile=$home/node.pid

if [[ -f $pidfile ]]; then
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then echo "cluster-local: pid $pid ignored SIGTERM; killing" >&2; kill -KILL "$pid"; fi
  fi
  rm -f "$pidfile"
  echo "cluster-local: stopped" >&2
else
  echo "cluster-local: no pid file at $pidfile; nothing to stop" >&2
fi
if [[ ${1:-} == --clean ]]; then rm -rf "$home"; fi
