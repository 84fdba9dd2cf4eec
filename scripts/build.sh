#!/usr/bin/env bash
# Configures and builds one CMake preset (default: release), optionally only some targets.
# Usage: scripts/build.sh [preset] [target ...]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
cmake --preset "$preset" -G Ninja >/dev/null
if [ $# -gt 0 ]; then
  cmake --build "build/$preset" -j "$(nproc)" --target "$@"
else
  cmake --build "build/$preset" -j "$(nproc)"
fi
