#!/usr/bin/env bash
# Installs dependencies, builds with warnings as errors, and runs every test.
# Usage: scripts/test.sh [preset]   (presets: ci (default), asan)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-ci}"
bash scripts/setup.sh
cmake --preset "$preset" -G Ninja >/dev/null
cmake --build "build/$preset" -j "$(nproc)"
ctest --test-dir "build/$preset" --output-on-failure -j "$(nproc)"
