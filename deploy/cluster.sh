#!/usr/bin/env bash
# A local PrimeKV cluster on loopback: Redis (the shared session store), three `primekv serve`
# replicas and two HAProxy balancers in front (deploy/haproxy.cfg), which share their stick
# table: a conversation keeps its replica through either balancer. Everything comes from Debian packages
# (`bash scripts/setup.sh --cluster` installs redis-server and haproxy).
#
# Usage: deploy/cluster.sh start|stop|status
# Environment (defaults in brackets):
#   PRIMEKV_BIN   [build/release/src/cli/primekv]   MODEL  [models/primekv-retrieval.gguf]
#   BASE_PORT     [8080]: balancers on BASE_PORT and BASE_PORT+4, replicas on BASE_PORT+1..3,
#                 the balancers' peer ports BASE_PORT+5 and +6, Redis on BASE_PORT+9
#   STATE_DIR     [/tmp/primekv-cluster]: pids, logs, Redis data, the admin socket
#   SERVE_ARGS    extra flags for every replica (e.g. "--api-key-file keys.txt --slots 4")
# `stop` drains each replica in HAProxy (no new requests; its requests in progress finish, for
# up to 30 s), stops it, then HAProxy and Redis.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${PRIMEKV_BIN:-$root/build/release/src/cli/primekv}"
model="${MODEL:-$root/models/primekv-retrieval.gguf}"
base="${BASE_PORT:-8080}"
state="${STATE_DIR:-/tmp/primekv-cluster}"
redis_port=$((base + 9))

admin() {  # one command on a balancer's admin socket (lb1's unless ADMIN_SOCK names lb2's)
  python3 - "${ADMIN_SOCK:-$state/haproxy.sock}" "$1" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
print(s.makefile().read(), end="")
PY
}

alive() { [ -f "$state/$1.pid" ] && kill -0 "$(cat "$state/$1.pid")" 2> /dev/null; }

stop_one() {  # SIGTERM, then up to 10 s for it to exit, so a next start finds its port free
  alive "$1" || return 0
  local pid run_state
  pid=$(cat "$state/$1.pid")
  kill "$pid" 2> /dev/null || return 0
  for _ in $(seq 100); do
    # Gone, or a zombie that its new parent has yet to reap.
    run_state=$(awk '{print $3}' "/proc/$pid/stat" 2> /dev/null) || run_state=""
    if [ -z "$run_state" ] || [ "$run_state" = Z ]; then return 0; fi
    sleep 0.1
  done
  echo "cluster: $1 (pid $pid) still running 10 s after SIGTERM" >&2
}

start() {
  for tool in redis-server haproxy; do
    command -v "$tool" > /dev/null || { echo "cluster: $tool not found (bash scripts/setup.sh --cluster)" >&2; exit 1; }
  done
  [ -x "$bin" ] || { echo "cluster: $bin not found (build first, or set PRIMEKV_BIN)" >&2; exit 1; }
  for p in redis r1 r2 r3 haproxy haproxy-lb2; do
    if alive "$p"; then echo "cluster: already running in $state (deploy/cluster.sh stop)" >&2; exit 1; fi
  done
  mkdir -p "$state/redis"
  # appendfsync always: a Redis restart loses no completed turn (docs/server.md, Cluster).
  redis-server --bind 127.0.0.1 --port "$redis_port" --dir "$state/redis" --save "" \
    --appendonly yes --appendfsync always --maxmemory 1gb --maxmemory-policy volatile-lru \
    --daemonize no > "$state/redis.log" 2>&1 &
  echo $! > "$state/redis.pid"
  for i in 1 2 3; do
    # shellcheck disable=SC2086
    "$bin" serve -m "$model" --port $((base + i)) -t 1 \
      --session-store "redis://127.0.0.1:$redis_port/0" ${SERVE_ARGS:-} > "$state/r$i.log" 2>&1 &
    echo $! > "$state/r$i.pid"
  done
  # lb1 on BASE_PORT (admin socket haproxy.sock), lb2 on BASE_PORT+4 (haproxy-lb2.sock).
  for lb in 1 2; do
    name=haproxy sock="$state/haproxy.sock" port=$base
    if [ "$lb" = 2 ]; then name=haproxy-lb2 sock="$state/haproxy-lb2.sock" port=$((base + 4)); fi
    PRIMEKV_PROXY="127.0.0.1:$port" PRIMEKV_ADMIN="$sock" \
      PRIMEKV_PEER1="127.0.0.1:$((base + 5))" PRIMEKV_PEER2="127.0.0.1:$((base + 6))" \
      PRIMEKV_R1="127.0.0.1:$((base + 1))" PRIMEKV_R2="127.0.0.1:$((base + 2))" \
      PRIMEKV_R3="127.0.0.1:$((base + 3))" \
      haproxy -db -L "lb$lb" -f "$root/deploy/haproxy.cfg" > "$state/$name.log" 2>&1 &
    echo $! > "$state/$name.pid"
  done
  # Ready when the proxy answers and sees every replica up: a replica still loading its model
  # when the proxy's first checks ran is DOWN until two checks pass.
  for _ in $(seq 100); do
    if python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$base/health', timeout=1)" 2> /dev/null &&
       [ "$(admin "show stat" 2> /dev/null | awk -F, '$1 == "replicas" && $2 ~ /^r[0-9]/ && $18 == "UP"' | wc -l)" = 3 ]; then
      echo "cluster: http://127.0.0.1:$base and http://127.0.0.1:$((base + 4)) (replicas $((base + 1))-$((base + 3)), redis $redis_port, logs in $state)"
      return 0
    fi
    sleep 0.2
  done
  echo "cluster: the proxy does not answer /health with its three replicas up; logs in $state" >&2
  exit 1
}

stop() {
  for i in 1 2 3; do
    if alive "r$i" && [ -S "$state/haproxy.sock" ]; then
      # Both balancers stop sending it new requests.
      admin "set server replicas/r$i state drain" > /dev/null || true
      [ -S "$state/haproxy-lb2.sock" ] &&
        ADMIN_SOCK="$state/haproxy-lb2.sock" admin "set server replicas/r$i state drain" > /dev/null || true
      for _ in $(seq 150); do  # up to 30 s for its requests in progress
        cur=$(admin "show stat" 2> /dev/null | awk -F, -v s="r$i" '$1 == "replicas" && $2 == s {print $5}')
        [ "${cur:-0}" = 0 ] && break
        sleep 0.2
      done
    fi
    stop_one "r$i"
  done
  for p in haproxy haproxy-lb2 redis; do stop_one "$p"; done
  rm -f "$state"/*.pid
  echo "cluster: stopped"
}

status() {
  for p in redis r1 r2 r3 haproxy haproxy-lb2; do
    if alive "$p"; then echo "$p: running (pid $(cat "$state/$p.pid"))"; else echo "$p: stopped"; fi
  done
  if [ -S "$state/haproxy.sock" ] && alive haproxy; then  # HAProxy's view: UP, DOWN, DRAIN
    admin "show stat" | awk -F, '$1 == "replicas" && $2 ~ /^r[0-9]/ {print "haproxy: " $2 " " $18}'
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: deploy/cluster.sh start|stop|status" >&2; exit 2 ;;
esac
