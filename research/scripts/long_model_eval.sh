#!/usr/bin/env bash
# The long reference model's evaluations (issue 49; models/primekv-long.md). Each step writes an
# eval folder under OUT (default research/results/long-cpu-stage2); re-running resumes.
#   STEP=dev   full cache, make_long_splits.py's dev split, the first N (default 5) samples of
#              single and multikey at 4K, 8K and 16K: chooses between stages.
#   STEP=2k    full cache on the 2K held-out test split (research/results/heldout-test), the 30
#              samples per family that retrieval-2's table used: extension must not cost the
#              short skills.
#   STEP=test  full cache, the long test split at 16K (N samples of single and multikey).
# Environment: MODEL (default models/primekv-long.gguf), PRIMEKV_BIN (default
# build/release/src/cli/primekv), SPLITS (make_long_splits.py --out folder, made when missing),
# N, THREADS (default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
step="${STEP:-dev}"
out="${1:-research/results/long-cpu-stage2}"
model="${MODEL:-models/primekv-long.gguf}"
bin="${PRIMEKV_BIN:-build/release/src/cli/primekv}"
splits="${SPLITS:-/tmp/primekv-long-splits}"
n="${N:-5}"
threads="${THREADS:-2}"
if [[ ! -d "$splits/long-dev" ]]; then
  /usr/bin/python3 scripts/make_long_splits.py --lengths 4096 8192 16384 --splits dev test \
    --n 20 --families single multikey near_key vt --out "$splits"
fi
run() {  # split length folder
  local split="$1" len="$2" dir="$3"
  "$bin" eval -m "$model" -c $((len + 512)) --allow-ctx-overflow --presses none \
    --tasks "jsonl:$splits/long-$split/$len/single.jsonl,jsonl:$splits/long-$split/$len/multikey.jsonl" \
    --samples "$n" --threads "$threads" -q --out "$dir"
}
case "$step" in
  dev) for len in 4096 8192 16384; do run dev "$len" "$out/eval-dev-$len"; done ;;
  test) run test 16384 "$out/eval-test-16384" ;;
  2k)
    tasks=""
    for f in single single_uuid multikey dense multivalue multiquery vt freq multiturn near_key drift; do
      tasks="$tasks${tasks:+,}jsonl:research/results/heldout-test/$f.jsonl"
    done
    "$bin" eval -m "$model" -c 2048 --presses none --tasks "$tasks" --samples 30 --seed 42 \
      --threads "$threads" -q --out "$out/eval-2k-heldout-test"
    ;;
  *) echo "STEP must be dev, 2k or test" >&2; exit 2 ;;
esac
