#!/usr/bin/env bash
# Builds the GGUF reader fuzzer with clang (libFuzzer + ASan + UBSan) and runs it.
# Usage: fuzz/run_fuzz.sh [SECONDS]   (default 60)
# Env: PRIMEKV_FUZZ_BUILD_DIR (default <repo>/build/fuzz, the `fuzz` preset's directory),
#      PRIMEKV_FUZZ_JOBS (build parallelism, default 2),
#      PRIMEKV_FUZZ_CMAKE_ARGS (extra configure arguments, split on spaces).
# Exits non-zero if the fuzzer finds a crash, leak, UB or timeout; the reproducer is copied to
# <build dir>/fuzz-artifacts/.
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${PRIMEKV_FUZZ_BUILD_DIR:-$root/build/fuzz}"
jobs="${PRIMEKV_FUZZ_JOBS:-2}"

# Same cache variables as the `fuzz` preset in CMakePresets.json.
configure=(-S "$root" -B "$build"
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
  -DPRIMEKV_BUILD_FUZZ=ON -DPRIMEKV_BUILD_TESTS=OFF -DPRIMEKV_BUILD_BENCH=OFF)
if [[ -n "${PRIMEKV_FUZZ_CMAKE_ARGS:-}" ]]; then
  read -r -a extra <<< "$PRIMEKV_FUZZ_CMAKE_ARGS"
  configure+=("${extra[@]}")
fi
if [[ ! -f "$build/CMakeCache.txt" ]] && command -v ninja > /dev/null; then
  configure+=(-G Ninja)
fi
cmake "${configure[@]}" > /dev/null
cmake --build "$build" --target gguf_reader_fuzz gguf_fuzz_seeds -j "$jobs"

work="$(mktemp -d "${TMPDIR:-/tmp}/primekv_fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"
cp "$root"/fuzz/corpus/gguf/* "$work/corpus/" 2> /dev/null || true
"$build/fuzz/gguf_fuzz_seeds" "$work/corpus"

echo "fuzzing gguf reader for ${seconds}s"
status=0
"$build/fuzz/gguf_reader_fuzz" "$work/corpus" \
  -max_total_time="$seconds" \
  -dict="$root/fuzz/gguf.dict" \
  -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1 || status=$?

if [[ $status -ne 0 ]]; then
  mkdir -p "$build/fuzz-artifacts"
  cp "$work"/artifacts/* "$build/fuzz-artifacts/" 2> /dev/null || true
  echo "FUZZER FAILED (exit $status); reproducers in $build/fuzz-artifacts/:" >&2
  ls -l "$build/fuzz-artifacts" >&2 || true
  exit "$status"
fi
echo "fuzzing passed: no crash in ${seconds}s"
