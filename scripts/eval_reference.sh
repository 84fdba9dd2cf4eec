#!/usr/bin/env bash
# The full evaluation of the project's reference model (docs/results.md §5): every press at four
# compression ratios, context-only compression, 2048-token samples, on
#   1. the RULER families and multi-turn drift in the evaluation generators' wording (src/eval),
#      which the model never saw in training, and
#   2. held-out sets of the model's own task families (docs/results/heldout, written by
#      tools/train/make_heldout.py from seeds training never drew).
# Resumable: re-running with the same output folders skips finished samples.
# Usage: scripts/eval_reference.sh [OUT_PREFIX]   (environment: SAMPLES, LENGTH, MAX_NEW, THREADS)
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="${1:-docs/results/reference}"
bin=build/release/src/cli/primekv
model=models/primekv-retrieval.gguf
[ -x "$bin" ] || bash scripts/build.sh release primekv_cli
presses=none,primekv,keydiff,knorm,streamingllm,random,lagkv,snapkv,pyramidkv,tova
presses+=,expected_attention,adakv:primekv
common=(-m "$model" --presses "$presses" --ratios 0.25,0.5,0.75,0.9 --samples "${SAMPLES:-10}"
        --threads "${THREADS:-0}" --seed 42)

ruler=niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,niah_multikey_2,niah_multikey_3
ruler+=,niah_multivalue,niah_multiquery,vt,cwe,fwe,multiturn
start=$(date +%s)
"$bin" eval "${common[@]}" --tasks "$ruler" --length "${LENGTH:-2048}" \
  --max-new-tokens "${MAX_NEW:-48}" --out "$prefix-ruler"
mid=$(date +%s)

heldout=""
for f in single single_uuid multikey dense multivalue multiquery vt freq multiturn; do
  heldout+="${heldout:+,}jsonl:docs/results/heldout/$f.jsonl"
done
"$bin" eval "${common[@]}" --tasks "$heldout" --out "$prefix-heldout"
end=$(date +%s)
echo "RULER + multiturn: $((mid - start)) s; held-out families: $((end - mid)) s; total $((end - start)) s"
