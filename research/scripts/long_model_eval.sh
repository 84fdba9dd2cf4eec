#!/usr/bin/env bash
# The long reference model's evaluations (issue 49; models/primekv-long.md). Each step writes an
# eval folder under OUT (default research/results/long-cpu-stage2); re-running resumes.
#   STEP=dev   full cache, make_long_splits.py's dev split, the first N (default 5) samples of
#              single and multikey at 4K, 8K and 16K: chooses between stages.
#   STEP=2k    full cache on the 2K held-out test split (research/results/heldout-test), the 30
#              samples per family that retrieval-2's table used: extension must not cost the
#              short skills.
#   STEP=test  full cache, the long test split at 16K (N samples of single and multikey).
#   STEP=tables  every press at ratios 0.5, 0.75 and 0.9 (primekv keydiff streamingllm knorm
#              expected_attention lagkv curdkv kvzip) and the full cache, on the test split's
#              single, multikey, near_key and vt at LENGTH (default 16384), N samples each
#              (default 10): research/results/long-tables/test-LENGTH.
#   STEP=drift multi-turn mode on the test split's drift family at 16K (twelve facts, six
#              questions in turn), none / primekv / keydiff at 0.75 and 0.9, N samples.
#   STEP=chunked chunked mode at 16K (chunks of CHUNK tokens, default 2048), primekv and
#              keydiff at 0.75, N samples (default 5) of single and multikey.
#   STEP=question question mode at LENGTH (default 16384): the question is in the prefill, so a
#              query-aware press sees it. snapkv (the query-aware reference), primekv and
#              keydiff at 0.5, 0.75 and 0.9 and the full cache, N samples (default 10) of each
#              tables family.
#   STEP=real  full cache on the real-prose split SPLIT (default dev; make_long_splits.py --filler
#              real: filler from Debian documentation of packages never trained on) at LENGTHS
#              (default "4096 8192 16384"), N samples (default 10) of single, multikey,
#              near_key and vt: OUT/real-SPLIT-LENGTH.
# Tables and the frontier plot from a tables folder: research/scripts/long_tables.py.
# Environment: MODEL (default models/primekv-long.gguf), PRIMEKV_BIN (default
# build/release/src/cli/primekv), SPLITS (make_long_splits.py --out folder, made when missing),
# N, THREADS (default 2), LENGTH, CHUNK.
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
    --n 20 --families single multikey near_key vt drift --out "$splits"
fi
presses="none;primekv;keydiff;streamingllm;knorm;expected_attention;lagkv;curdkv;kvzip"
run() {  # split length folder
  local split="$1" len="$2" dir="$3"
  "$bin" eval -m "$model" -c $((len + 512)) --allow-ctx-overflow --presses none \
    --tasks "jsonl:$splits/long-$split/$len/single.jsonl,jsonl:$splits/long-$split/$len/multikey.jsonl" \
    --samples "$n" --threads "$threads" -q --out "$dir"
}
case "$step" in
  real)
    split="${SPLIT:-dev}"
    if [[ ! -d "$splits/long-real-$split" ]]; then
      /usr/bin/python3 scripts/make_long_splits.py --filler real --splits "$split" --n 20 \
        --families single multikey near_key vt --lengths 4096 8192 16384 32768 --out "$splits"
    fi
    for len in ${LENGTHS:-4096 8192 16384}; do
      S="$splits/long-real-$split/$len"
      "$bin" eval -m "$model" -c $((len + 512)) --allow-ctx-overflow --presses none \
        --tasks "jsonl:$S/single.jsonl,jsonl:$S/multikey.jsonl,jsonl:$S/near_key.jsonl,jsonl:$S/vt.jsonl" \
        --samples "${N:-10}" --threads "$threads" -q --out "$out/real-$split-$len"
    done
    ;;
  dev) for len in 4096 8192 16384; do run dev "$len" "$out/eval-dev-$len"; done ;;
  test) run test 16384 "$out/eval-test-16384" ;;
  tables)
    len="${LENGTH:-16384}" S="$splits/long-test/${LENGTH:-16384}"
    "$bin" eval -m "$model" -c $((len + 512)) --allow-ctx-overflow --presses "$presses" \
      --ratios 0.5 0.75 0.9 --samples "${N:-10}" --threads "$threads" -q --compare primekv,keydiff \
      --tasks "jsonl:$S/single.jsonl,jsonl:$S/multikey.jsonl,jsonl:$S/near_key.jsonl,jsonl:$S/vt.jsonl" \
      --out "${1:-research/results/long-tables/test-$len}"
    ;;
  drift)
    "$bin" eval -m "$model" -c 16896 --allow-ctx-overflow --mode multiturn \
      --presses "none;primekv;keydiff" --ratios 0.75 0.9 --samples "${N:-10}" --threads "$threads" \
      -q --compare primekv,keydiff --tasks "jsonl:$splits/long-test/16384/drift.jsonl" \
      --out "${1:-research/results/long-tables/drift-16384}"
    ;;
  chunked)
    S="$splits/long-test/16384" chunk="${CHUNK:-2048}"
    "$bin" eval -m "$model" -c 16896 --allow-ctx-overflow --mode chunked --chunk "$chunk" \
      --presses "primekv;keydiff" --ratios 0.75 --samples "${N:-5}" --threads "$threads" -q \
      --compare primekv,keydiff --tasks "jsonl:$S/single.jsonl,jsonl:$S/multikey.jsonl" \
      --out "${1:-research/results/long-tables/chunked-$chunk-16384}"
    ;;
  question)
    len="${LENGTH:-16384}" S="$splits/long-test/${LENGTH:-16384}"
    "$bin" eval -m "$model" -c $((len + 512)) --allow-ctx-overflow --mode question \
      --presses "none;snapkv;primekv;keydiff" --ratios 0.5 0.75 0.9 --samples "${N:-10}" \
      --threads "$threads" -q --compare primekv,snapkv \
      --tasks "jsonl:$S/single.jsonl,jsonl:$S/multikey.jsonl,jsonl:$S/near_key.jsonl,jsonl:$S/vt.jsonl" \
      --out "${1:-research/results/long-tables/question-$len}"
    ;;
  2k)
    tasks=""
    for f in single single_uuid multikey dense multivalue multiquery vt freq multiturn near_key drift; do
      tasks="$tasks${tasks:+,}jsonl:research/results/heldout-test/$f.jsonl"
    done
    "$bin" eval -m "$model" -c 2048 --presses none --tasks "$tasks" --samples 30 --seed 42 \
      --threads "$threads" -q --out "$out/eval-2k-heldout-test"
    ;;
  *) echo "STEP must be dev, 2k, test, tables, question, drift or chunked" >&2; exit 2 ;;
esac
