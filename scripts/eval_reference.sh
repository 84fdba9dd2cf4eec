#!/usr/bin/env bash
# The full evaluation of the project's reference model (docs/results.md §5): every press at four
# compression ratios, context-only compression, 2048-token samples, on
#   1. the RULER families and multi-turn drift in the evaluation generators' wording (src/eval),
#      which the model never saw in training, and
#   2. held-out sets of the model's own task families (docs/results/heldout, written by
#      tools/train/make_heldout.py from seeds training never drew), and
#   3. the PrimeKV ablation on the dev split and the final table on the test split (issue 11).
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
  --max-new-tokens "${MAX_NEW:-48}" --out "$prefix-ruler" --compare keydiff,primekv
mid=$(date +%s)

heldout=""
for f in single single_uuid multikey dense multivalue multiquery vt freq multiturn; do
  heldout+="${heldout:+,}jsonl:docs/results/heldout/$f.jsonl"
done
"$bin" eval "${common[@]}" --tasks "$heldout" --out "$prefix-heldout" --compare keydiff,primekv
end=$(date +%s)
echo "RULER + multiturn: $((mid - start)) s; held-out families: $((end - mid)) s; total $((end - start)) s"

# 3. Issue 11: the PrimeKV ablation on the development split (5 samples per family), and the
#    final table on the test split (20 per family for the headline presses, 5 for the other
#    query-free baselines), with bootstrap intervals in report.md and paired comparisons.
#    Splits: scripts/make_eval_splits.py, docs/eval-tasks.md.
families="single single_uuid multikey dense multivalue multiquery vt freq multiturn near_key drift"
dev="" test=""
for f in $families; do
  dev+="${dev:+,}jsonl:docs/results/heldout-dev/$f.jsonl"
  test+="${test:+,}jsonl:docs/results/heldout-test/$f.jsonl"
done
ablation=none,keydiff,primekv:key=leverage,combine=product,primekv:key=cosine,combine=product
ablation+=,primekv:key=leverage,combine=rank,primekv:key=leverage,combine=product,rounds=halving
ablation+=,primekv:key=cosine,combine=product,rounds=halving,primekv:key=cosine,value=none,rounds=halving
ablation+=,primekv:key=self,combine=logit,primekv:key=self,value=none
ablation+=,primekv:key=self,combine=logit,rounds=halving,primekv:key=self,value=none,rounds=halving
ablation+=,primekv:key=selfexact,combine=logit,primekv:key=selfexact,value=none
t3=$(date +%s)
"$bin" eval -m "$model" --tasks "$dev" --presses "$ablation" --ratios 0.25,0.5,0.75,0.9 \
  --samples 5 --threads "${THREADS:-0}" --seed 42 --out "$prefix-heldout-dev"
t4=$(date +%s)
"$bin" eval -m "$model" --tasks "$test" --presses none,primekv,keydiff \
  --ratios 0.25,0.5,0.75,0.9 --samples 20 --threads "${THREADS:-0}" --seed 42 \
  --out "$prefix-heldout-test" --compare keydiff,primekv
"$bin" eval -m "$model" --tasks "$test" \
  --presses none,primekv:key=leverage,combine=product,knorm,streamingllm,random,lagkv,curdkv \
  --ratios 0.25,0.5,0.75,0.9 --samples 5 --threads "${THREADS:-0}" --seed 42 \
  --out "$prefix-heldout-test" > /dev/null
for other in knorm streamingllm random lagkv curdkv primekv:key=leverage,combine=product; do
  "$bin" eval -m "$model" --tasks "$test" --presses none --samples 20 --seed 42 -q \
    --out "$prefix-heldout-test" --compare "$other,primekv" > /dev/null
done
t5=$(date +%s)
echo "dev ablation: $((t4 - t3)) s; test split: $((t5 - t4)) s"
