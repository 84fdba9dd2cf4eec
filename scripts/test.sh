#!/usr/bin/env bash
# Installs dependencies, builds with warnings as errors, and runs every test.
# Usage: scripts/test.sh [preset]   (presets: ci (default), asan)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-ci}"
bash scripts/setup.sh
cmake --preset "$preset" -G Ninja >/dev/null
cmake --build "build/$preset" -j "$(nproc)"
# Under ASan, ref_presses_K (every press's scores against numpy, 600+ s there) is left out: it
# checks numbers, which the release run does, and every press's code runs under ASan in the
# Compression and Pipeline tests. So are the tests that run no code of ours (the Python
# selftests of the references, the training tools and the analysis scripts).
exclude=()
[ "$preset" = asan ] &&
  exclude=(-E '^(ref_presses_[0-9]+|ref_presses_selftest|train_long_selftest|train_tokenizer_selftest|analysis_scripts_selftest)$')
ctest --test-dir "build/$preset" --output-on-failure -j "$(nproc)" "${exclude[@]}"
