#!/usr/bin/env bash
# Configures and builds one CMake preset (default: release). Usage: scripts/build.sh [preset]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
cmake --preset "$preset" -G Ninja >/dev/null
cmake --build --preset "$preset" 2>/dev/null || cmake --build "build/$preset" -j "$(nproc)"
