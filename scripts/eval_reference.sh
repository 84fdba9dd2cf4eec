#!/usr/bin/env bash
# The full evaluation of the project's reference model (docs/results.md §4): every press, the
# RULER families and multi-turn drift, four compression ratios, context-only compression.
# Resumable: re-running with the same output folder skips finished samples.
# Usage: scripts/eval_reference.sh [OUT_DIR]   (environment: SAMPLES, LENGTH, MAX_NEW, THREADS)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/results/reference-eval}"
bin=build/release/src/cli/primekv
model=models/primekv-retrieval.gguf
[ -x "$bin" ] || bash scripts/build.sh release primekv_cli
tasks=niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,niah_multikey_2,niah_multikey_3
tasks+=,niah_multivalue,niah_multiquery,vt,cwe,fwe,multiturn
presses=none,primekv,keydiff,knorm,streamingllm,random,lagkv,snapkv,pyramidkv,tova
presses+=,expected_attention,adakv:primekv
time "$bin" eval -m "$model" --tasks "$tasks" --presses "$presses" --ratios 0.25,0.5,0.75,0.9 \
  --samples "${SAMPLES:-10}" --length "${LENGTH:-2048}" --max-new-tokens "${MAX_NEW:-48}" \
  --threads "${THREADS:-0}" --seed 42 --out "$out"
cat "$out/report.md"
