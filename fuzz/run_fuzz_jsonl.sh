#!/usr/bin/env bash
# Builds the task-file loader fuzzer (jsonl:, aime:, longbench:) with clang (libFuzzer + ASan +
# UBSan) and runs it, seeded with the test fixtures and the held-out sets.
# Usage: fuzz/run_fuzz_jsonl.sh [SECONDS]   (default 60)
# Env: as fuzz/run_fuzz.sh (PRIMEKV_FUZZ_BUILD_DIR, PRIMEKV_FUZZ_JOBS, PRIMEKV_FUZZ_CMAKE_ARGS).
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
cmake --build "$build" --target jsonl_tasks_fuzz -j "$jobs"

work="$(mktemp -d "${TMPDIR:-/tmp}/primekv_fuzz_jsonl.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"
# Seeds: the first 4 KiB of each fixture and held-out file (options come from the last bytes).
for f in "$root"/tests/eval/fixtures/*.jsonl "$root"/docs/results/heldout/*.jsonl; do
  [[ -f "$f" ]] && head -c 4096 "$f" > "$work/corpus/$(basename "$f")"
done

echo "fuzzing task-file loaders for ${seconds}s"
status=0
"$build/fuzz/jsonl_tasks_fuzz" "$work/corpus" \
  -max_total_time="$seconds" \
  -dict="$root/fuzz/jsonl.dict" \
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
