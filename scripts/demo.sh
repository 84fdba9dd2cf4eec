#!/usr/bin/env bash
# The main job on the project's embedded default model (models/primekv-retrieval.gguf): install,
# build, answer a question about a document from a PrimeKV-compressed KV cache (a quarter of the
# cache removed), then compare PrimeKV, plain and calibrated, with the full cache and StreamingLLM
# on held-out retrieval tasks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release primekv_cli
bin=build/release/src/cli/primekv
model=models/primekv-retrieval.gguf

echo "== Question answering over a compressed cache (press primekv, a quarter of the cache removed)"
"$bin" generate -m "$model" --context-file examples/demo-context.txt \
  --question "What is the special magic number for silver-lantern?" \
  --answer-prefix "The special magic number for silver-lantern is" \
  -n 12 --temp 0 --press primekv --ratio 0.25

echo "== Retrieval accuracy: full cache, PrimeKV plain and calibrated, StreamingLLM (held-out sets of the model's own tasks, 2048 tokens)"
out=build/demo-eval
# A demo always runs fresh: eval would otherwise resume rows that an older build of the engine
# wrote under the same settings.
rm -rf "$out"
tasks=""
for f in research/results/heldout/*.jsonl; do tasks+="${tasks:+,}jsonl:$f"; done
# primekv:profile=auto is the calibrated press: the model's budget profile (the file beside it,
# made by `primekv calibrate`), nested below 0.9; rows name the profile it found.
"$bin" eval -m "$model" --tasks "$tasks" --presses "none;primekv;primekv:profile=auto;streamingllm" \
  --ratios 0.5,0.75,0.9 --samples 10 --out "$out" --compare primekv,primekv:profile=auto > "$out.compare"
# The report's first table: the mean score over the tasks per press and ratio.
awk '/^## Average over tasks$/ {p = 1} p {print; if ($0 == "" && ++blank == 2) exit}' "$out/report.md"
echo "== Calibrated minus plain PrimeKV, paired over the same samples"
# The comparison's first table: pooled over the tasks, per ratio.
awk '/^\| ratio / {p = 1} p && !/^\|/ {exit} p' "$out.compare"
echo "Full report: $out/report.md"
