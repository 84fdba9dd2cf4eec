#!/usr/bin/env bash
# README's test command (scripts/test.sh) RUNS times in a row with the machine loaded: a clean
# build of the project (its own build folder, no compiler cache) runs beside the tests the whole
# time, restarting when it ends. Stops at the first failing run. A test that fails only here
# fails under load, which is a defect to find, not a reason to retry (docs/ci.md).
# Usage: scripts/soak.sh [RUNS]   (default 5; logs and soak.tsv in build/soak/)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "usage: scripts/soak.sh [RUNS]" >&2; exit 2; }
out=build/soak
mkdir -p "$out"
bash scripts/setup.sh > "$out/setup.log" 2>&1 || { cat "$out/setup.log"; exit 1; }

# The load: -j(nproc) compiles of the release preset, cold each time (CCACHE_DISABLE).
cmake --preset release -B build/soak-load -G Ninja > "$out/load.log" 2>&1
set -m  # the load gets its own process group, so that one kill ends its compilers too
(
  while true; do
    cmake --build build/soak-load --target clean > /dev/null 2>&1 || true
    CCACHE_DISABLE=1 cmake --build build/soak-load -j "$(nproc)" > /dev/null 2>&1 || true
    echo "load build done $(date +%T)" >> "$out/load.log"
  done
) &
load_pid=$!
set +m
trap 'kill -- -$load_pid 2>/dev/null || true' EXIT

printf 'run\tresult\tseconds\tload_average_1min\ttests\tfailed\n' > "$out/soak.tsv"
status=0
for ((i = 1; i <= runs; i++)); do
  t0=$(date +%s)
  log="$out/run-$i.log"
  if bash scripts/test.sh > "$log" 2>&1; then result=pass; else result=FAIL; fi
  secs=$(($(date +%s) - t0))
  load=$(cut -d' ' -f1 /proc/loadavg)
  # (grep finds nothing in a run that passed: not an error here)
  summary=$(grep -Eo '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -1 ||
    true)
  failed=$(sed -n '/The following tests FAILED/,$p' "$log" | grep -Eo '^[[:space:]]*[0-9]+ - [^ ]+' |
    awk '{print $3}' | paste -sd, - || true)
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$i" "$result" "$secs" "$load" "${summary:-no summary}" \
    "${failed:--}" >> "$out/soak.tsv"
  printf 'run %d/%d: %s in %d s (load average %s): %s\n' "$i" "$runs" "$result" "$secs" "$load" \
    "${summary:-no summary, see $log}"
  if [ "$result" != pass ]; then
    echo "failed: ${failed:-see $log}"
    status=1
    break
  fi
done
echo "load builds finished beside the tests: $(grep -c 'load build done' "$out/load.log" || true)"
column -t -s $'\t' "$out/soak.tsv"
exit "$status"
