#!/usr/bin/env bash
# Issue 68: the budget profile from calibrate's built-in corpus (no task file), nested below 0.9
# as profile=auto nests it, against the full cache, KeyDiff, KVzip, plain primekv and the
# committed profile (measured on held-out task contexts). Dev only; docs/results.md §8 has the
# figures, research/results/calibrated/ the rows. Re-running resumes.
#   STEP=calib  calibrate retrieval-2 with no task file (-t 2), timed; the cache goes under OUT
#   STEP=dev    the 960-token dev set of budget_profile_eval.sh (make_eval_splits.py --length 960
#               --fresh 24680 --test 10), ratios 0.5, 0.75, 0.9, paired comparisons
#   STEP=test   once: the same press on budget_profile_eval.sh's 960-token test set (seed 86420,
#               20 per family; made where its stored rows name it, /work/r53/test960), beside
#               those rows (research/results/budget-profile/test960-r2, restored)
#   STEP=longcalib  calibrate the long model with no task file (-t 1), timed
#   STEP=long   that profile nested below 0.9 on the long model's 16K test split (§7's 80
#               samples, made by make_long_splits.py --splits test --n 20), beside §7's rows
#               (research/results/long-tables/test-16384, restored: only the new press runs)
# Gap closed and cost: research/scripts/gap_closed.py OUT/dev-b --new "$B" (B below).
set -euo pipefail
cd "$(dirname "$0")/../.."
step="${STEP:?STEP=calib|dev|test|longcalib|long}"
out="${OUT:-/work/r68}"
bin="${PRIMEKV_BIN:-build/release/src/cli/primekv}"
m=models/primekv-retrieval-2.gguf
B="primekv:profile=$out/builtin.budget.json,nest=0.9"
C="primekv:profile=models/primekv-retrieval-2.budget.json,nest=0.9"
L="primekv:profile=$out/long-builtin.budget.json,nest=0.9"
case "$step" in
  calib)
    mkdir -p "$out"
    XDG_CACHE_HOME="$out/cache" /usr/bin/time -v "$bin" calibrate -m "$m" -t 2 \
      -o "$out/builtin.budget.json" ;;
  dev)
    d="$out/dev960/heldout-fresh-24680"
    [[ -d "$d" ]] || /usr/bin/python3 research/scripts/make_eval_splits.py --length 960 \
      --fresh 24680 --test 10 --out "$out/dev960"
    t=""
    for f in single single_uuid multikey dense multivalue multiquery vt freq multiturn near_key drift; do
      t+="${t:+,}jsonl:$d/$f.jsonl"
    done
    for c in keydiff kvzip primekv "$C"; do
      "$bin" eval -m "$m" --threads 2 --seed 42 -q --tasks "$t" --samples 10 \
        --ratios 0.5,0.75,0.9 --out "$out/dev-b" \
        --presses "none;keydiff;primekv;kvzip;$B;$C" --compare "$c,$B" > /dev/null
    done ;;
  test)
    d=/work/r53/test960/heldout-fresh-86420
    [[ -d "$d" ]] || /usr/bin/python3 research/scripts/make_eval_splits.py --length 960 \
      --fresh 86420 --test 20 --out /work/r53/test960
    r="$out/test960"
    if [[ ! -f "$r/results.jsonl" ]]; then
      mkdir -p "$r"
      cp research/results/budget-profile/test960-r2/config.json "$r/"
      xz -dkc research/results/budget-profile/test960-r2/results.jsonl.xz > "$r/results.jsonl"
    fi
    t=""
    for f in single single_uuid multikey dense multivalue multiquery vt freq multiturn near_key drift; do
      t+="${t:+,}jsonl:$d/$f.jsonl"
    done
    for c in keydiff kvzip primekv "$C"; do
      "$bin" eval -m "$m" --threads "${THREADS:-2}" --seed 42 -q --tasks "$t" --samples 20 \
        --ratios 0.5,0.75,0.9 --out "$r" --presses "none;$B" --compare "$c,$B" > /dev/null
    done ;;
  longcalib)
    mkdir -p "$out"
    XDG_CACHE_HOME="$out/cache" /usr/bin/time -v "$bin" calibrate -m models/primekv-long.gguf \
      -t 1 -o "$out/long-builtin.budget.json" ;;
  long)
    S=/work/long-run/splits/long-test/16384
    [[ -d "$S" ]] || /usr/bin/python3 scripts/make_long_splits.py --lengths 16384 --splits test \
      --n 20 --families single multikey near_key vt --out /work/long-run/splits
    d="$out/long16k"
    mkdir -p "$d"
    if [[ ! -f "$d/results.jsonl" ]]; then
      cp research/results/long-tables/test-16384/config.json "$d/"
      xz -dkc research/results/long-tables/test-16384/results.jsonl.xz > "$d/results.jsonl"
    fi
    t="jsonl:$S/single.jsonl,jsonl:$S/multikey.jsonl,jsonl:$S/near_key.jsonl,jsonl:$S/vt.jsonl"
    for c in keydiff kvzip primekv; do
      "$bin" eval -m models/primekv-long.gguf -c 16896 --allow-ctx-overflow --threads "${THREADS:-2}" \
        --seed 42 -q --samples "${N:-20}" --ratios "${RATIOS:-0.9}" --out "$d" --tasks "$t" \
        --presses "none;$L" --compare "$c,$L" > /dev/null
    done ;;
esac
