#!/usr/bin/env bash
# Builds arch_logits against a llama.cpp checkout built outside this tree (its include/ and
# build/bin/libllama.so): LLAMA_DIR=/path/to/llama.cpp bash tools/llamacpp_ref/build.sh OUT
set -euo pipefail
LLAMA_DIR=${LLAMA_DIR:-/work/llama.cpp}
OUT=${1:-/tmp/arch_logits}
HERE=$(cd "$(dirname "$0")" && pwd)
g++ -std=c++17 -O2 -Wall -Wextra -I"$LLAMA_DIR/include" -I"$LLAMA_DIR/ggml/include" \
  "$HERE/arch_logits.cc" -L"$LLAMA_DIR/build/bin" -lllama -lggml -lggml-base \
  -Wl,-rpath,"$LLAMA_DIR/build/bin" -o "$OUT"
echo "built $OUT"
