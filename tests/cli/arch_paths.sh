#!/bin/sh
# Issue 52's user path on each added architecture: a random model from make-model, then
# `generate --press primekv` and `eval` with the full cache and with primekv. On gemma2 the
# windowed (even) layers must hold what the window still sees (window - 1 entries after the
# prompt and after the answer), and the press must leave them alone; on phi3, whose every layer
# is windowed, it compresses them all.
# Usage: arch_paths.sh BIN ARCH
set -u
BIN="$1"; ARCH="$2"
T=$(mktemp -d "${TMPDIR:-/tmp}/primekv_arch.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
WINDOW=0
case "$ARCH" in gemma2|phi3) WINDOW=32 ;; esac
"$BIN" make-model --arch "$ARCH" --layers 4 --d-model 128 --heads 2 --kv-heads 1 --head-dim 64 \
  --ffn 256 --vocab 512 --context 1024 --sliding-window "$WINDOW" --seed 7 -o "$T/m.gguf" \
  > /dev/null || fail "make-model --arch $ARCH"
PROMPT=$(seq 1 150 | tr '\n' ' ')
"$BIN" generate -m "$T/m.gguf" -p "$PROMPT" --press primekv --ratio 0.5 -n 8 --temp 0 --json \
  > "$T/gen.json" 2> "$T/err" || { cat "$T/err"; fail "generate --press primekv on $ARCH"; }
python3 - "$T/gen.json" "$ARCH" "$WINDOW" << 'PY' || fail "generate's cache on $ARCH"
import json, sys
j = json.load(open(sys.argv[1])); arch = sys.argv[2]; window = int(sys.argv[3])
n = len(j["prompt_tokens"]); kept = j["kv"]["kept_per_layer"]; final = j["kv"]["final"]["entries_per_layer"]
assert len(j["tokens"]) == 8, j["tokens"]
half = n // 2  # KeepCount(n, 0.5) per KV head (one KV head here)
local = [l % 2 == 0 for l in range(4)] if arch == "gemma2" else [False] * 4
for l in range(4):
    if local[l]:
        # Left alone by the press: it holds what the next query's window sees.
        assert kept[l] == window - 1, (l, kept[l])
        assert final[l] == window - 1, (l, final[l])
    elif arch == "phi3":
        # phi3: the press halves what the window left (ratio 0.5 of the head's entries).
        assert kept[l] == (window - 1) // 2, (l, kept[l])
        assert final[l] <= window - 1, (l, final[l])
    else:
        assert kept[l] == half, (l, kept[l], half)
print("PASS", arch, "prompt", n, "kept", kept, "final", final)
PY
"$BIN" eval -m "$T/m.gguf" --tasks niah_single_1 --samples 1 --length 300 --max-new-tokens 4 \
  --presses "none;primekv" --ratios 0.5 --out "$T/ev" -q 2> "$T/err" ||
  { cat "$T/err"; fail "eval on $ARCH"; }
grep -q "2 units run" "$T/err" || { cat "$T/err"; fail "want 2 units on $ARCH"; }
test "$(grep -c '"status":"ok"' "$T/ev/results.jsonl")" = 2 || fail "eval rows on $ARCH not ok"
echo PASS
