#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (libFuzzer + ASan + UBSan) and runs one or all of them.
# Usage: fuzz/run_fuzz.sh [TARGET] [SECONDS]
#   TARGET: gguf (the GGUF reader), press_spec (the --press parser), manifest (convert's
#           manifest reader), jsonl (the jsonl:/aime:/longbench: task-file loaders), eval_json
#           (eval's config.json and results.jsonl readers), hf_tokenizer (make-model
#           --hf-tokenizer's tokenizer.json reader), server_request (`primekv serve`'s request
#           bodies), score_input (the C API's pk_score arguments), session_file (session files
#           and Redis values), budget_profile (a press's profile=FILE) or all
#           (default: gguf, the historical behaviour);
#   SECONDS: per target (default 60). `fuzz/run_fuzz.sh 60` still means gguf for 60 s.
# Env: PRIMEKV_FUZZ_BUILD_DIR (default <repo>/build/fuzz, the `fuzz` preset's directory),
#      PRIMEKV_FUZZ_JOBS (build parallelism, default 2),
#      PRIMEKV_FUZZ_CMAKE_ARGS (extra configure arguments, split on spaces).
#      PRIMEKV_FUZZ_PARALLEL (fuzzers run at once, default: the cores).
# Exits non-zero if a fuzzer finds a crash, leak, UB or timeout; the reproducer is copied to
# <build dir>/fuzz-artifacts/.
set -euo pipefail

target="gguf"
if [[ $# -gt 0 && ! "$1" =~ ^[0-9]+$ ]]; then
  target="$1"
  shift
fi
seconds="${1:-60}"
case "$target" in
  gguf | press_spec | manifest | jsonl | eval_json | hf_tokenizer | server_request | score_input | session_file | budget_profile) targets=("$target") ;;
  all) targets=(gguf press_spec manifest jsonl eval_json hf_tokenizer server_request score_input session_file budget_profile) ;;
  *)
    echo "run_fuzz.sh: unknown target '$target' (gguf, press_spec, manifest, jsonl, eval_json, hf_tokenizer, server_request, score_input, session_file, budget_profile, all)" >&2
    exit 2
    ;;
esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${PRIMEKV_FUZZ_BUILD_DIR:-$root/build/fuzz}"
jobs="${PRIMEKV_FUZZ_JOBS:-2}"

# Same cache variables as the `fuzz` preset in CMakePresets.json.
configure=(-S "$root" -B "$build"
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
  -DPRIMEKV_BUILD_FUZZ=ON -DPRIMEKV_BUILD_TESTS=OFF -DPRIMEKV_BUILD_BENCH=OFF -DCMAKE_UNITY_BUILD=ON)
if [[ -n "${PRIMEKV_FUZZ_CMAKE_ARGS:-}" ]]; then
  read -r -a extra <<< "$PRIMEKV_FUZZ_CMAKE_ARGS"
  configure+=("${extra[@]}")
fi
if [[ ! -f "$build/CMakeCache.txt" ]] && command -v ninja > /dev/null; then
  configure+=(-G Ninja)
fi
cmake "${configure[@]}" > /dev/null
build_targets=()
for t in "${targets[@]}"; do
  case "$t" in
    gguf) build_targets+=(gguf_reader_fuzz gguf_fuzz_seeds) ;;
    jsonl) build_targets+=(jsonl_tasks_fuzz) ;;
    *) build_targets+=("${t}_fuzz") ;;
  esac
done
cmake --build "$build" --target "${build_targets[@]}" -j "$jobs"

work="$(mktemp -d "${TMPDIR:-/tmp}/primekv_fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT

run_one() {
  local t="$1" binary dict max_len
  mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
  cp "$root"/fuzz/corpus/"$t"/* "$work/$t/corpus/" 2> /dev/null || true
  case "$t" in
    gguf)
      "$build/fuzz/gguf_fuzz_seeds" "$work/$t/corpus"
      binary="$build/fuzz/gguf_reader_fuzz" dict="$root/fuzz/gguf.dict" max_len=8192
      ;;
    press_spec) binary="$build/fuzz/press_spec_fuzz" dict="$root/fuzz/press_spec.dict" max_len=4096 ;;
    manifest) binary="$build/fuzz/manifest_fuzz" dict="$root/fuzz/json.dict" max_len=4096 ;;
    budget_profile)
      binary="$build/fuzz/budget_profile_fuzz" dict="$root/fuzz/json.dict" max_len=16384 ;;
    eval_json) binary="$build/fuzz/eval_json_fuzz" dict="$root/fuzz/json.dict" max_len=8192 ;;
    server_request)
      binary="$build/fuzz/server_request_fuzz" dict="$root/fuzz/json.dict" max_len=8192
      ;;
    score_input)
      binary="$build/fuzz/score_input_fuzz" dict="$root/fuzz/press_spec.dict" max_len=16384
      ;;
    session_file)
      binary="$build/fuzz/session_file_fuzz" dict="$root/fuzz/session_file.dict" max_len=16384
      ;;
    hf_tokenizer)
      binary="$build/fuzz/hf_tokenizer_fuzz" dict="$root/fuzz/json.dict" max_len=8192
      ;;
    jsonl)
      # Seeds: the first 4 KiB of each fixture and held-out file (options come from the last
      # bytes).
      for f in "$root"/tests/eval/fixtures/*.jsonl "$root"/research/results/heldout/*.jsonl; do
        [[ -f "$f" ]] && head -c 4096 "$f" > "$work/$t/corpus/$(basename "$f")"
      done
      binary="$build/fuzz/jsonl_tasks_fuzz" dict="$root/fuzz/jsonl.dict" max_len=8192
      ;;
  esac
  echo "fuzzing $t for ${seconds}s"
  local status=0
  "$binary" "$work/$t/corpus" \
    -max_total_time="$seconds" \
    -dict="$dict" \
    -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$work/$t/artifacts/" -print_final_stats=1 || status=$?
  if [[ $status -ne 0 ]]; then
    mkdir -p "$build/fuzz-artifacts"
    cp "$work/$t"/artifacts/* "$build/fuzz-artifacts/" 2> /dev/null || true
    echo "FUZZER $t FAILED (exit $status); reproducers in $build/fuzz-artifacts/:" >&2
    ls -l "$build/fuzz-artifacts" >&2 || true
    exit "$status"
  fi
  echo "fuzzing $t passed: no crash in ${seconds}s"
}

# Each fuzzer uses one core: run PRIMEKV_FUZZ_PARALLEL of them at once (default: the cores), each
# into its own log, printed when it ends (in full when it failed).
parallel="${PRIMEKV_FUZZ_PARALLEL:-$(nproc)}"
failed=0
for ((i = 0; i < ${#targets[@]}; i += parallel)); do
  batch=("${targets[@]:i:parallel}")
  pids=()
  for t in "${batch[@]}"; do
    run_one "$t" > "$work/$t.log" 2>&1 &
    pids+=($!)
  done
  for j in "${!batch[@]}"; do
    t="${batch[$j]}"
    if wait "${pids[$j]}"; then
      grep -E '^(fuzzing|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/$t.log" || true
    else
      failed=1
      echo "---- $t (failed) ----" >&2
      tail -n 80 "$work/$t.log" >&2
    fi
  done
done
exit "$failed"
