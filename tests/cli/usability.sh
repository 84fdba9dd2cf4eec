#!/bin/sh
# Issue 15's CLI behaviour. Usage: usability.sh BIN MODEL CASE
#   presses: one eval run lists two multi-parameter presses, with ';' and with the comma syntax;
#   kv:      generate --json reports the cache at the end, its peak and every compression;
#   nocmd:   `primekv` alone lists the subcommands and exits 2.
set -u
BIN="$1"; S="$2"; CASE="$3"
T=$(mktemp -d "${TMPDIR:-/tmp}/primekv_usability.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
case "$CASE" in
  presses)
    for list in "none;primekv:key=cosine,value=norm;snapkv:window=16,kernel=3" \
                "none,primekv:key=cosine,value=norm,snapkv:window=16,kernel=3"; do
      rm -rf "$T/ev"
      "$BIN" eval -m "$S" --tasks niah_single_1 --samples 1 --length 300 --ratios 0.5 \
        --max-new-tokens 4 --presses "$list" --out "$T/ev" -q 2> "$T/err" ||
        { cat "$T/err"; fail "eval --presses '$list' exited $?"; }
      grep -q "3 units run" "$T/err" || { cat "$T/err"; fail "want 3 units for '$list'"; }
      for p in '"press":"none"' '"press":"primekv:key=cosine,value=norm"' \
               '"press":"snapkv:kernel=3,window=16"'; do
        grep -qF "$p" "$T/ev/results.jsonl" || fail "results.jsonl lacks $p for '$list'"
      done
    done
    echo PASS ;;
  kv)
    for mode in context question multiturn chunked decode; do
      "$BIN" generate -m "$S" -p "Once upon a time there was a little girl who liked to play" \
        --question "Then" --mode "$mode" --press knorm --ratio 0.5 --interval 50 --chunk 8 \
        -n 400 --temp 0 --json > "$T/$mode.json" || fail "generate --mode $mode"
      python3 - "$T/$mode.json" "$mode" << 'PY' || fail "kv report of --mode $mode"
import json, sys
j = json.load(open(sys.argv[1])); mode = sys.argv[2]; kv = j["kv"]
final = kv["final"]
per_entry = kv["bytes_after"] / sum(kv["kept_per_layer"])
# Bytes and entries of the final cache agree, and the peak bounds both snapshots.
assert final["bytes"] == round(per_entry * sum(final["entries_per_layer"])), kv
assert kv["bytes_peak"] >= max(final["bytes"], kv["bytes_after"]), kv
answered = len(j["turns"][-1]["tokens"])
if mode == "decode":
    # Compressions: one after the context, then one per 50 tokens except after the last.
    assert kv["compressions"] == 1 + (answered - 1) // 50, (kv, answered)
    assert final["entries_per_layer"] != kv["kept_per_layer"], kv
elif mode == "multiturn":
    assert final["entries_per_layer"] == kv["kept_per_layer"], kv  # re-compressed to budget
else:
    # The answer stays in the cache: the final cache is bigger than the compressed context.
    assert final["bytes"] > kv["bytes_after"], kv
print(mode, "ok", kv)
PY
    done
    echo PASS ;;
  nocmd)
    "$BIN" > "$T/out" 2> "$T/err"; rc=$?
    [ "$rc" -eq 2 ] || fail "exit status $rc, want 2"
    for sub in inspect generate make-model logits convert list-presses press-scores fidelity eval; do
      grep -qE "^ +$sub " "$T/err" || { cat "$T/err"; fail "no line for $sub"; }
    done
    echo PASS ;;
  *) fail "unknown case $CASE" ;;
esac
