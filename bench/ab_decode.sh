#!/usr/bin/env bash
# Decode at depth 0 of two or more primekv binaries, alternated round by round so that the
# machine's drift (memory speed on a VM moves by a quarter within minutes) hits each alike.
#
#   bench/ab_decode.sh MODEL THREADS ROUNDS BINARY...
#
# Each round runs `BINARY bench -m MODEL -p 0 -n 128 -t THREADS -r 2 --json` for every binary in
# turn (PRIMEKV_ARGS adds flags, default --no-mmap; the environment passes through, e.g.
# PRIMEKV_MAX_ISA=avx2). Prints per binary the median tokens/s and the median and every value of
# its bandwidth shares (the share of the read bandwidth measured beside each timed run).
set -euo pipefail
if [[ $# -lt 4 ]]; then
  sed -n '2,10p' "$0" >&2
  exit 2
fi
model=$1 threads=$2 rounds=$3
shift 3
py=/usr/bin/python3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((i = 1; i <= rounds; ++i)); do
  for bin in "$@"; do
    echo "round $i/$rounds: $bin" >&2
    # shellcheck disable=SC2086
    "$bin" bench -m "$model" -p 0 -n 128 -t "$threads" -r 2 --json ${PRIMEKV_ARGS---no-mmap} \
      2>/dev/null | BIN="$bin" "$py" -c '
import json, os, sys
t = json.load(sys.stdin)["tests"][0]
for tps, share in zip(t["tokens_per_s"], t["bandwidth_shares"]):
    print(os.environ["BIN"], tps, share, sep="\t")' >>"$out"
  done
done
"$py" - "$out" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    b, tps, share = line.rstrip("\n").split("\t")
    rows.setdefault(b, []).append((float(tps), float(share)))
print("| binary | runs | tokens/s, median | share, median | shares |")
print("|---|---:|---:|---:|---|")
for b, v in rows.items():
    shares = [s for _, s in v]
    print(f"| {b} | {len(v)} | {statistics.median(t for t, _ in v):.2f} | "
          f"{100 * statistics.median(shares):.1f}% | {' '.join(f'{100 * s:.0f}' for s in shares)} |")
PY
