#!/usr/bin/env bash
# Real-client check: the official openai npm package (pinned in client/package-lock.json,
# installed here with `npm ci`) against `primekv serve` on 127.0.0.1. Exit 77 = skipped.
# Usage: openai_client.sh PRIMEKV_BIN MODEL WORKDIR
set -euo pipefail
BIN=$1 MODEL=$2 WORK=$3
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "SKIPPED: npm/node not available; install nodejs and npm to run the openai client test"
  exit 77
fi
mkdir -p "$WORK"
cp "$HERE/client/package.json" "$HERE/client/package-lock.json" "$HERE/client/client.mjs" "$WORK/"
if ! (cd "$WORK" && timeout 300 npm ci --ignore-scripts --no-audit --no-fund >npm.log 2>&1); then
  echo "SKIPPED: npm ci could not install the pinned openai package (no registry access?):"
  tail -5 "$WORK/npm.log"
  exit 77
fi

rm -f "$WORK/port"
"$BIN" serve -m "$MODEL" --port 0 --port-file "$WORK/port" --api-key test-key -t 1 \
  >"$WORK/server.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  [ -s "$WORK/port" ] && break
  kill -0 $PID 2>/dev/null || { cat "$WORK/server.log"; exit 1; }
  sleep 0.05
done
PORT=$(cat "$WORK/port")

CTX=$(cat "$ROOT/examples/demo-context.txt")
N=16
gen() {  # prompt, extra flags...
  local p=$1
  shift
  "$BIN" generate -m "$MODEL" -p "$p" -n $N --temp 0 --json -t 1 "$@" |
    python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["text"]))'
}
CHAT_P="Client.
$CTX
What is the special magic number for silver-lantern?"
STREAM_P="Client stream.
$CTX
What is the special magic number for red-harbor?"
COMP_P="Client completion.
$CTX
What is the special magic number for silver-lantern?
The special magic number for silver-lantern is"
CHAT_T=$(gen "$CHAT_P" --chat --press primekv --ratio 0.75)
STREAM_T=$(gen "$STREAM_P" --chat --press primekv --ratio 0.75)
COMP_T=$(gen "$COMP_P" --press primekv --ratio 0.25)
export PRIMEKV_EXPECT
PRIMEKV_EXPECT=$(python3 -c 'import json,sys; a=sys.argv; print(json.dumps({
  "n": int(a[1]), "chat_prompt": a[2], "chat_text": json.loads(a[3]),
  "stream_prompt": a[4], "stream_text": json.loads(a[5]),
  "completion_prompt": a[6], "completion_text": json.loads(a[7])}))' \
  $N "$CHAT_P" "$CHAT_T" "$STREAM_P" "$STREAM_T" "$COMP_P" "$COMP_T")
export PRIMEKV_BASE_URL="http://127.0.0.1:$PORT/v1" PRIMEKV_API_KEY=test-key
(cd "$WORK" && timeout 120 node client.mjs)
