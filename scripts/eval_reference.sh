#!/usr/bin/env bash
# The full evaluation of the project's reference model (docs/results.md §5, §6; "results §6.N"
# below is section 6.N of research/notes/results-history.md): every press at
# four compression ratios, context-only compression, on
#   1. the RULER families and multi-turn drift in the evaluation generators' wording (src/eval),
#      which the model never saw in training, and
#   2. held-out sets of the model's own task families (research/results/heldout, written by
#      tools/train/make_heldout.py from seeds training never drew), and
#   3. the PrimeKV ablation on the dev split and the final table on the test split, both
#      reference models (issue 11, results §6.9-6.10), and
#   4. multi-turn per turn on the test split's multiturn and drift families (results §6.6, §6.10).
#   5. fidelity (mean KL to the full cache) on stories260K and both reference models, dev and
#      unseen contexts (results §6.9-6.10): research/results/reference-fidelity/table.md.
#   6. KVzip (issue 11 item 4, results §6.12) against KeyDiff and the default on 960-token
#      contexts, so that its second pass fits the models' 2048-token window.
# Resumable: re-running with the same output folders skips finished samples. `primekv eval`
# records DIR/config.json (settings, task and model fingerprints, and each press's resolved
# parameters) and refuses to resume a folder whose rows were made under other settings or
# another meaning of a press name. The folders of earlier rounds, made with the previous
# `primekv` default (research/results/reference-{ruler,ruler-v2,heldout,heldout-dev,heldout-test},
# reference2-heldout-dev), are kept as made; steps 1-2 write to -v3 folders.
# The stored folders under research/results/ keep their rows xz-compressed and name their task
# files by the paths of their runs (jsonl:docs/results/...), so regenerate into a fresh prefix,
# e.g. /tmp/regen/reference, and compare with research/scripts/compare_eval_rows.py; resuming a
# stored folder in place is described in research/README.md.
# Usage: scripts/eval_reference.sh [OUT_PREFIX]   (model 2's folders are OUT_PREFIX2-*;
#   default research/results/reference)
#   environment: STEPS (default 1234567: which steps to run), SAMPLES, LENGTH, MAX_NEW, THREADS,
#   PRIMEKV_BIN, TASK_SETS (default research/results: the folder of the held-out task sets),
#   SMOKE=N: N samples per task (N=1 or more), ratio 0.75 only, every step (use a scratch
#   OUT_PREFIX); SMOKE=3 is the before/after check of a behaviour-preserving refactor
#   Times from empty folders on the 2-core development machine (Zen 5, load average 3-4 from
#   other jobs, 2026-12-01): steps 1-2 11 min, step 3 18 min, step 4 2.5 min, step 5 1.6 min;
#   33 min in all (results §5). Step 6 (2026-12-01, quiet machine): 96 s; step 7 reads the
#   folders of step 3 and takes seconds. Step 5 with key=typical added (results §6.14, one
#   other job running): 169 s.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="${1:-research/results/reference}"
sets="${TASK_SETS:-research/results}"  # heldout/, heldout-dev/, heldout-test/
prefix2="${prefix}2"  # the second reference model's folders
bin="${PRIMEKV_BIN:-build/release/src/cli/primekv}"
model=models/primekv-retrieval.gguf
if [ ! -x "$bin" ]; then
  bash scripts/build.sh release primekv_cli
  bin=build/release/src/cli/primekv
fi
export PRIMEKV_BIN="$bin"  # for scripts/verify_eval_rows.py
smoke="${SMOKE:-0}"
ratios=0.25,0.5,0.75,0.9
n_main="${SAMPLES:-10}" n_turns_fq=25
if [ "$smoke" != 0 ]; then
  [[ "$smoke" =~ ^[1-9][0-9]*$ ]] || { echo "SMOKE must be a positive integer" >&2; exit 2; }
  ratios=0.75 n_main=$smoke n_turns_fq=$smoke
fi
steps="${STEPS:-1234567}"
presses=none,primekv,keydiff,knorm,streamingllm,random,lagkv,snapkv,pyramidkv,tova
presses+=,expected_attention,adakv:primekv
common=(-m "$model" --presses "$presses" --ratios "$ratios" --samples "$n_main"
        --threads "${THREADS:-0}" --seed 42)

ruler=niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,niah_multikey_2,niah_multikey_3
ruler+=,niah_multivalue,niah_multiquery,vt,cwe,fwe,multiturn
start=$(date +%s)
if [[ $steps == *1* ]]; then
  "$bin" eval "${common[@]}" --tasks "$ruler" --length "${LENGTH:-2048}" \
    --max-new-tokens "${MAX_NEW:-48}" --out "$prefix-ruler-v3" --compare keydiff,primekv
fi
mid=$(date +%s)

heldout=""
for f in single single_uuid multikey dense multivalue multiquery vt freq multiturn; do
  heldout+="${heldout:+,}jsonl:$sets/heldout/$f.jsonl"
done
if [[ $steps == *2* ]]; then
  "$bin" eval "${common[@]}" --tasks "$heldout" --out "$prefix-heldout-v3" --compare keydiff,primekv
fi
end=$(date +%s)
echo "RULER + multiturn: $((mid - start)) s; held-out families: $((end - mid)) s; total $((end - start)) s"

# 3. Issue 11: the PrimeKV ablation on the development split, and the final table on the test
#    split, for both reference models (results §6.9-6.10). Dev: the default, its two halves and
#    the previous default against KeyDiff (20 per family); test: the default and KeyDiff (50 per
#    family on retrieval, 30 on retrieval-2) and the other query-free presses (10 / 5 per
#    family) in folders of their own. The folders of §6.1-6.8 (reference-heldout-dev,
#    reference-heldout-test, reference2-heldout-dev) were made with the previous default under
#    the name `primekv` and are kept as made; eval refuses to resume them with this binary.
#    Splits: research/scripts/make_eval_splits.py, docs/eval-tasks.md.
families="single single_uuid multikey dense multivalue multiquery vt freq multiturn near_key drift"
dev="" test=""
for f in $families; do
  dev+="${dev:+,}jsonl:$sets/heldout-dev/$f.jsonl"
  test+="${test:+,}jsonl:$sets/heldout-test/$f.jsonl"
done
n_dev=20 n_test1=50 n_test2=30 n_other1=10 n_other2=5
if [ "$smoke" != 0 ]; then n_dev=$smoke n_test1=$smoke n_test2=$smoke n_other1=$smoke n_other2=$smoke; fi
model2=models/primekv-retrieval-2.gguf
keyside="none;primekv:key=self;keydiff;primekv:key=next;primekv:key=centerednext"
others="none;primekv;knorm;streamingllm;lagkv;random;curdkv"
run() {  # run OUT MODEL TASKS SAMPLES PRESSES [COMPARE...]
  local out=$1 m=$2 tasks=$3 n=$4 p=$5; shift 5
  "$bin" eval -m "$m" --tasks "$tasks" --presses "$p" --ratios "$ratios" --samples "$n" \
    --threads "${THREADS:-0}" --seed 42 -q --out "$out" > /dev/null
  for c in "$@"; do
    "$bin" eval -m "$m" --tasks "$tasks" --presses "$p" --ratios "$ratios" --samples "$n" \
      --threads "${THREADS:-0}" --seed 42 -q --out "$out" --compare "$c" > /dev/null
  done
}
if [[ $steps == *3* ]]; then
  t3=$(date +%s)
  for pair in "$prefix-heldout-dev-keyside $model" "$prefix2-heldout-dev-keyside $model2"; do
    set -- $pair
    run "$1" "$2" "$dev" "$n_dev" "$keyside" keydiff,primekv:key=centerednext \
      keydiff,primekv:key=next keydiff,primekv:key=self primekv:key=self,primekv:key=centerednext
  done
  t4=$(date +%s)
  run "$prefix-heldout-test-v3" "$model" "$test" "$n_test1" "none;primekv;keydiff" keydiff,primekv
  run "$prefix2-heldout-test" "$model2" "$test" "$n_test2" "none;primekv;keydiff" \
    keydiff,primekv
  cmp=(knorm,primekv streamingllm,primekv lagkv,primekv random,primekv curdkv,primekv)
  run "$prefix-heldout-test-v3-others" "$model" "$test" "$n_other1" "$others" "${cmp[@]}"
  run "$prefix2-heldout-test-others" "$model2" "$test" "$n_other2" "$others" \
    "${cmp[@]}"
  t5=$(date +%s)
  echo "dev (both models): $((t4 - t3)) s; test split (both models): $((t5 - t4)) s"
fi

# 4. Issue 11 item 6: per-turn accuracy on the test split's multi-turn and drift families.
#    PrimeKV (query-free) compresses the context once, before any question (context mode:
#    the test-split folders above). First-question mode (the paper's protocol): the context and
#    the first question are prefilled and compressed once (SnapKV and PyramidKV see the first
#    question), then every question is asked on that cache. `--mode multiturn` keeps answers in
#    the cache, which does not fit these ~2000-token samples in the 2048-token context (§6.6).
turns="jsonl:$sets/heldout-test/multiturn.jsonl,jsonl:$sets/heldout-test/drift.jsonl"
turn_ratios=0.75,0.5
[ "$smoke" != 0 ] && turn_ratios=0.75
if [[ $steps == *4* ]]; then
  t6=$(date +%s)
  "$bin" eval -m "$model" --tasks "$turns" --mode first-question \
    --presses none,snapkv,pyramidkv --ratios "$turn_ratios" --samples "$n_turns_fq" \
    --threads "${THREADS:-0}" --seed 42 -q --out "$prefix-multiturn-test-first-question" > /dev/null
  "$bin" eval -m "$model2" --tasks "$turns" --mode first-question \
    --presses "none;snapkv;pyramidkv" --ratios "$turn_ratios" --samples "$n_turns_fq" \
    --threads "${THREADS:-0}" --seed 42 -q \
    --out "$prefix2-multiturn-test-first-question" > /dev/null
  for r in ${turn_ratios//,/ }; do
    python3 research/scripts/per_turn.py --ratio "$r" --table "$prefix-heldout-test-v3" \
      --table "$prefix-multiturn-test-first-question" \
      --a "$prefix-multiturn-test-first-question:snapkv" --b "$prefix-heldout-test-v3:primekv"
    python3 research/scripts/per_turn.py --ratio "$r" --table "$prefix2-heldout-test" \
      --table "$prefix2-multiturn-test-first-question" \
      --a "$prefix2-multiturn-test-first-question:snapkv" \
      --b "$prefix2-heldout-test:primekv"
  done
  t7=$(date +%s)
  echo "multi-turn per turn: $((t7 - t6)) s"
fi
# 5. Issue 11's fidelity line (results §6.9, §6.10): mean KL to the full cache over 64
#    teacher-forced tokens, on stories260K and both reference models, for the dev contexts the
#    choice was made on and, once, for contexts it never saw (test-split text; stories260K
#    stories from other seeds). The texts are written into the output folder first.
fid="$prefix-fidelity"
fid_presses="primekv;primekv:key=typical;primekv:key=self;primekv:key=next;primekv:key=centered;keydiff"
fid_presses+=";streamingllm;kvzip"
fid_presses+=";oracle"
stories=../shared/models/stories260K.gguf
if [[ $steps == *5* ]]; then
  t8=$(date +%s)
  mkdir -p "$fid"
  fid_ratios=0.25,0.5,0.75,0.9 n_ctx_s=20 n_ctx_r=12
  if [ "$smoke" != 0 ]; then fid_ratios=0.75 n_ctx_s=2 n_ctx_r=2; fi
  for split in dev test; do
    python3 -c "import json, sys
for f in ['single', 'multikey', 'multiquery', 'multiturn', 'drift', 'vt']:
    [print(json.loads(l)['context']) for l in open('$sets/heldout-$split/%s.jsonl' % f)]" \
      > "$fid/text-$split.txt"
  done
  for seeds in "1 dev" "101 unseen"; do
    set -- $seeds
    for s in $(seq "$1" $(($1 + 39))); do
      "$bin" generate -m "$stories" -p "Once upon a time" -n 480 --temp 1.0 --top-k 0 --top-p 1 \
        --seed "$s" 2> /dev/null
      echo
    done > "$fid/stories-$2.txt"
  done
  fidelity() {  # fidelity NAME MODEL TEXT CONTEXTS [ARGS...]
    local name=$1 m=$2 text=$3 n=$4; shift 4
    "$bin" fidelity -m "$m" --text-file "$text" --contexts "$n" --presses "$fid_presses" \
      --ratios "$fid_ratios" --threads "${THREADS:-0}" --json "$@" > "$fid/$name.json"
  }
  fidelity stories260K-dev "$stories" "$fid/stories-dev.txt" "$n_ctx_s"
  fidelity stories260K-unseen "$stories" "$fid/stories-unseen.txt" "$n_ctx_s"
  for split in dev test; do
    fidelity "retrieval-$split" "$model" "$fid/text-$split.txt" "$n_ctx_r" --context 1024
    fidelity "retrieval-2-$split" "$model2" "$fid/text-$split.txt" "$n_ctx_r" --context 1024
  done
  python3 research/scripts/fidelity_gap.py "stories260K, dev=$fid/stories260K-dev.json" \
    "retrieval, dev=$fid/retrieval-dev.json" "retrieval-2, dev=$fid/retrieval-2-dev.json" \
    "stories260K, unseen=$fid/stories260K-unseen.json" \
    "retrieval, test text=$fid/retrieval-test.json" \
    "retrieval-2, test text=$fid/retrieval-2-test.json" | tee "$fid/table.md"
  t9=$(date +%s)
  echo "fidelity: $((t9 - t8)) s"
fi
# 6. KVzip, the query-agnostic reference (results §6.12). Its pass repeats the context after it,
#    so context and repeat must fit the 2048-token window: the eleven families are drawn again at
#    960 tokens from their own seed (not the dev or test streams; nothing is chosen on them).
if [[ $steps == *6* ]]; then
  t10=$(date +%s)
  short="$prefix-kvzip-short-tasks"
  /usr/bin/python3 research/scripts/make_eval_splits.py --length 960 --fresh 97531 \
    --test "$n_main" --out "$short"
  tasks=""
  for f in single single_uuid multikey dense multivalue multiquery vt freq multiturn near_key drift
  do tasks+="${tasks:+,}jsonl:$short/heldout-fresh-97531/$f.jsonl"; done
  for m in "$model:$prefix" "$model2:$prefix2"; do
    for c in keydiff,kvzip keydiff,primekv kvzip,primekv; do  # the 2nd and 3rd only compare
      "$bin" eval -m "${m%%:*}" --tasks "$tasks" --presses "none;kvzip;keydiff;primekv" \
        --ratios "$ratios" --samples "$n_main" --threads "${THREADS:-0}" --seed 42 -q \
        --out "${m#*:}-kvzip-short" --compare "$c"
    done
  done
  t11=$(date +%s)
  echo "kvzip: $((t11 - t10)) s"
fi
# 7. What the test folders can resolve (results §6.13): the capacity estimate of `dense` and the
#    full cache scored as a press against KeyDiff. Reads step 3's folders; runs no model. The
#    capped row (dense at 0.75-0.9 scored with the default's own result) is model 1's best case
#    only: on model 2 the default is below the capacity estimate there.
if [[ $steps == *7* && $smoke == 0 ]]; then
  dense=$sets/heldout-test/dense.jsonl
  /usr/bin/python3 research/scripts/capacity_bound.py --model "$model" --tasks "$dense" \
    --samples "$n_test1" --results "$prefix-heldout-test-v3/results.jsonl"  # .xz if stored so
  /usr/bin/python3 research/scripts/full_cache_margin.py "$prefix-heldout-test-v3" \
    --capped dense:0.75,dense:0.9
  /usr/bin/python3 research/scripts/capacity_bound.py --model "$model2" --tasks "$dense" \
    --samples "$n_test2" --results "$prefix2-heldout-test/results.jsonl"
  /usr/bin/python3 research/scripts/full_cache_margin.py "$prefix2-heldout-test"
fi
