#!/usr/bin/env bash
# The main job on the project's embedded default model: install, build, then generate with a
# compressed KV cache and print the result as JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release primekv_cli
bin=build/release/src/cli/primekv
model=models/primekv-retrieval.gguf
if [ ! -f "$model" ]; then
  # Until the trained reference model is committed, a random-weight model of a small
  # Llama shape stands in (its text is noise; the pipeline is real).
  model=build/release/models/random-llama.gguf
  mkdir -p "$(dirname "$model")"
  [ -f "$model" ] || "$bin" make-model --arch llama --layers 4 --d-model 256 --heads 4 --kv-heads 2 \
      --head-dim 64 --ffn 704 --vocab 2048 --context 4096 --type F16 --seed 7 -o "$model"
fi
"$bin" generate -m "$model" -p "Once upon a time there was a little robot who wanted to learn to read." \
    -n 48 --temp 0 --press primekv --ratio 0.5 --json
