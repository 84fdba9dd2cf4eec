#!/usr/bin/env bash
# Side-by-side throughput of llama.cpp and primekv on the same GGUF file, same threads.
#
#   bench/compare_llamacpp.sh LLAMA_CPP_BUILD_DIR MODEL [PRIMEKV_BINARY]
#
# Runs llama.cpp's llama-bench (prefill 512, decode 128, at each thread count) and
# llama-batched-bench (prefill 4096 then decode 128 at depth 4096, at the largest thread count)
# and the matching `primekv bench` runs, interleaved test by test (the order alternates) so
# that a change of load on a shared machine hits both engines alike. Prints a markdown table
# of medians with primekv / llama.cpp ratios, the machine, both commits and the load.
# llama.cpp is a measuring stick only: build it outside this tree, e.g. at commit c392e509:
#   cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF
#   cmake --build build -j --target llama-bench llama-batched-bench
#
# Long contexts (LONG=16384,32768, at the largest thread count, one run each): llama.cpp with
# flash attention over an f16 cache and over a q8_0 cache (-fa -ctk q8_0 -ctv q8_0) against
# primekv with the same cache type (prefill of L tokens, then 128 tokens decoded at depth L),
# and primekv with --press primekv --ratio LONG_RATIO (default 0.9) over a q8_0 cache read by a
# real prefill (prefill, compression and 128 decoded tokens, end to end). Each run is its own
# process under GNU time, so the table gives every row's peak RSS beside its KV bytes.
#
# Environment: REPS (timed runs per short test, default 3), LONG_REPS (runs of the 4096-token
# tests, default 1), SHORT=0 skips the 512- and 4096-token tests, LONG, LONG_RATIO,
# LONG_KV (the cache types of the full-cache long pairs, default "f16 q8_0"; f16 is always run
# while the PrimeKV row, which is set against it, is), LONG_PRESS=0 skips the PrimeKV row, THREADS (default "1 2"), LLAMA_ARGS (extra flags for both llama.cpp tools, e.g.
# "--poll 0"), PRIMEKV_ARGS (extra flags for every primekv run, e.g. "--no-mmap"),
# NO_MMAP=1 makes both engines read a private copy of the weights instead of the file's mapping
# (llama-bench -mmp 0, llama-batched-bench --no-mmap, primekv --no-mmap): on some VMs mapped
# page-cache pages read at a fraction of the speed of fresh memory, and then the mapping, not the
# kernels, sets the decode figures (docs/performance.md).
# LLAMA_COMMIT / PRIMEKV_COMMIT (labels, e.g. for a binary copied elsewhere), KEEP=1 keeps the
# raw JSON (its folder is printed).
# MAX_STEAL (percent, default 5): a short pair run while the hypervisor took more CPU time than
# that from this VM (/proc/stat's steal) is run again, up to STEAL_TRIES times in all (default 3;
# LONG_STEAL_TRIES, default 1, for the long pairs), and the least disturbed pair is kept. Every
# row prints the steal of both runs, so a ratio made under a busy host shows it; with KEEP=1 the
# tries not kept stay in the folder as NAME.TRY.json (.log, .rss, .steal).
set -euo pipefail

if [[ $# -lt 2 ]]; then
  sed -n '2,20p' "$0"
  exit 2
fi
LLAMA_DIR=$1
MODEL=$2
HERE=$(cd "$(dirname "$0")/.." && pwd)
PRIMEKV=${3:-$HERE/build/ci/src/cli/primekv}
REPS=${REPS:-3}
LONG_REPS=${LONG_REPS:-1}
THREADS=${THREADS:-"1 2"}
LLAMA_ARGS=${LLAMA_ARGS:-}
PRIMEKV_ARGS=${PRIMEKV_ARGS:-}
NO_MMAP=${NO_MMAP:-0}
BENCH_MMAP=()
BATCHED_MMAP=()
if [[ $NO_MMAP == 1 ]]; then
  BENCH_MMAP=(-mmp 0)
  BATCHED_MMAP=(--no-mmap)
  PRIMEKV_ARGS="${PRIMEKV_ARGS:+$PRIMEKV_ARGS }--no-mmap"
elif [[ $NO_MMAP != 0 ]]; then
  echo "NO_MMAP: '$NO_MMAP' is not 0 or 1" >&2
  exit 2
fi
SHORT=${SHORT:-1}
LONG=${LONG:-}
LONG_RATIO=${LONG_RATIO:-0.9}
LONG_KV=${LONG_KV:-"f16 q8_0"}
LONG_PRESS=${LONG_PRESS:-1}
[[ $LONG_PRESS == 0 || $LONG_PRESS == 1 ]] || { echo "LONG_PRESS: '$LONG_PRESS' is not 0 or 1" >&2; exit 2; }
MAX_STEAL=${MAX_STEAL:-5}
STEAL_TRIES=${STEAL_TRIES:-3}
LONG_STEAL_TRIES=${LONG_STEAL_TRIES:-1}
pair_tries=$STEAL_TRIES
((LONG_PRESS == 0)) || [[ " $LONG_KV " == *" f16 "* ]] || LONG_KV="f16 $LONG_KV"
for kv in $LONG_KV; do
  [[ $kv == f16 || $kv == q8_0 ]] || { echo "LONG_KV: '$kv' is not f16 or q8_0" >&2; exit 2; }
done
[[ -x /usr/bin/time ]] || { echo "GNU time is needed for peak RSS: apt-get install time" >&2; exit 1; }
find_bin() {
  for c in "$LLAMA_DIR/bin/$1" "$LLAMA_DIR/$1"; do
    [[ -x $c ]] && { echo "$c"; return; }
  done
  echo "no $1 under $LLAMA_DIR" >&2
  exit 1
}
LLAMA_BENCH=$(find_bin llama-bench)
LLAMA_BATCHED=$(find_bin llama-batched-bench)
[[ -x $PRIMEKV ]] || { echo "no primekv binary at $PRIMEKV" >&2; exit 1; }
[[ -f $MODEL ]] || { echo "no model at $MODEL" >&2; exit 1; }

OUT=$(mktemp -d)
[[ ${KEEP:-0} == 1 ]] || trap 'rm -rf "$OUT"' EXIT
MAX_T=0
for t in $THREADS; do ((t > MAX_T)) && MAX_T=$t; done
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date +%s)

order=0
# CPU steal (time the hypervisor gave this VM's vCPUs to others) over a command, in percent of
# all CPU time: on a shared VM it reached 30-40% for minutes and halved a 2-thread decode.
cpu_ticks() { awk '/^cpu /{print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
run_pair() {  # name, llama command..., --, primekv command...
  local name=$1
  shift
  local llama=() prime=()
  while [[ $1 != -- ]]; do llama+=("$1"); shift; done
  shift
  prime=("$@")
  # A pair whose runs saw more than MAX_STEAL % steal is run again (pair_tries in all: STEAL_TRIES
  # for the short tests, LONG_STEAL_TRIES for the long ones); the pair with the least steal is
  # kept, and the table prints its steal.
  local try best=101 best_try=1 worst
  for ((try = 1; try <= pair_tries; try++)); do
    echo "[$(date +%T)] $name (load $(cut -d' ' -f1 /proc/loadavg)$( ((try > 1)) && echo ", try $try"))" >&2
    if ((order % 2 == 0)); then
      run_one "llama_$name.$try" "${llama[@]}"
      run_one "primekv_$name.$try" "${prime[@]}"
    else
      run_one "primekv_$name.$try" "${prime[@]}"
      run_one "llama_$name.$try" "${llama[@]}"
    fi
    order=$((order + 1))
    worst=$(cat "$OUT/llama_$name.$try.steal" "$OUT/primekv_$name.$try.steal" | sort -n | tail -1)
    if ((worst < best)); then
      best=$worst
      best_try=$try
    fi
    ((worst > MAX_STEAL)) || break
    echo "  steal $worst% > MAX_STEAL=$MAX_STEAL%" >&2
  done
  # The kept try's files lose their try number; the others stay beside them (KEEP=1).
  for side in llama primekv; do
    for ext in json log rss steal; do mv "$OUT/${side}_$name.$best_try.$ext" "$OUT/${side}_$name.$ext"; done
  done
}
run_one() {  # label, command...: JSON to $OUT/label.json, log, peak RSS in KiB, steal in %
  local label=$1 s0 t0 s1 t1
  shift
  read -r s0 t0 < <(cpu_ticks)
  if ! /usr/bin/time -f %M -o "$OUT/$label.rss" "$@" >"$OUT/$label.json" 2>"$OUT/$label.log"; then
    echo "failed: $*" >&2
    tail -n 5 "$OUT/$label.log" >&2
    exit 1
  fi
  read -r s1 t1 < <(cpu_ticks)
  echo $(((100 * (s1 - s0) + (t1 - t0) / 2) / (t1 - t0 > 0 ? t1 - t0 : 1))) >"$OUT/$label.steal"
}

for t in $THREADS; do
  ((SHORT)) || break
  # shellcheck disable=SC2086
  run_pair "pp512_t$t" "$LLAMA_BENCH" -m "$MODEL" -p 512 -n 0 -t "$t" -r "$REPS" -o json "${BENCH_MMAP[@]}" $LLAMA_ARGS \
    -- "$PRIMEKV" bench -m "$MODEL" -p 512 -n 0 -t "$t" -r "$REPS" --json $PRIMEKV_ARGS
  # shellcheck disable=SC2086
  run_pair "tg128_t$t" "$LLAMA_BENCH" -m "$MODEL" -p 0 -n 128 -t "$t" -r "$REPS" -o json "${BENCH_MMAP[@]}" $LLAMA_ARGS \
    -- "$PRIMEKV" bench -m "$MODEL" -p 0 -n 128 -t "$t" -r "$REPS" --json $PRIMEKV_ARGS
done
# Prefill 4096 and decode at depth 4096: batched-bench times one prefill of 4096 tokens (in
# micro-batches of 512) and the 128 decode steps after it; primekv bench times the same
# prefill and then decodes from a cache of 4096 entries per head (synthetic rows: the decode
# step reads the same bytes).
long_llama=(bash -c "for i in \$(seq $LONG_REPS); do '$LLAMA_BATCHED' -m '$MODEL' -c 4352 -b 2048 \
  -ub 512 -npp 4096 -ntg 128 -npl 1 -t $MAX_T ${BATCHED_MMAP[*]} $LLAMA_ARGS --output-format jsonl 2>/dev/null | grep '^{'; done")
if ((SHORT)); then
  # shellcheck disable=SC2086
  run_pair "long_t$MAX_T" "${long_llama[@]}" \
    -- "$PRIMEKV" bench -m "$MODEL" -p 4096 -n 128 -d 4096 -t "$MAX_T" -r "$LONG_REPS" --json $PRIMEKV_ARGS
fi
# Long contexts: one process per engine, cache type and length. primekv's full-cache decode
# reads a depth of synthetic rows (the same bytes a prefill leaves); the compressed run fills
# its depth with a real prefill, so its scores see real keys. Decoding 128 tokens at depth L
# runs past the trained context of a file made for L tokens: llama.cpp goes on with a warning,
# primekv only with --allow-ctx-overflow, which it is given so that both run the same context.
pair_tries=$LONG_STEAL_TRIES
for L in ${LONG//,/ }; do
  for kv in $LONG_KV; do
    kv_flags=()
    [[ $kv == q8_0 ]] && kv_flags=(-ctk q8_0 -ctv q8_0)
    # shellcheck disable=SC2086
    run_pair "L${L}_$kv" "$LLAMA_BATCHED" -m "$MODEL" -c $((L + 128)) -b 2048 -ub 512 -npp "$L" \
      -ntg 128 -npl 1 -t "$MAX_T" -fa "${kv_flags[@]}" "${BATCHED_MMAP[@]}" $LLAMA_ARGS --output-format jsonl \
      -- "$PRIMEKV" bench -m "$MODEL" -p "$L" -n 128 -d "$L" -t "$MAX_T" -r 1 --kv-type "$kv" \
      -c $((L + 128)) --allow-ctx-overflow --json $PRIMEKV_ARGS
  done
  ((LONG_PRESS)) || continue
  echo "[$(date +%T)] L${L}_press (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  # shellcheck disable=SC2086
  run_one "primekv_L${L}_press" "$PRIMEKV" bench -m "$MODEL" -p 0 -n 128 -d "$L" -t "$MAX_T" -r 1 \
    --kv-type q8_0 --fill prefill --press primekv --ratio "$LONG_RATIO" -c $((L + 128)) --allow-ctx-overflow --json $PRIMEKV_ARGS
done

ELAPSED=$(($(date +%s) - START))
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
COMMIT=$(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git -C "$HERE" status --porcelain --untracked-files=no 2>/dev/null) ]] && COMMIT="$COMMIT+dirty"
COMMIT=${PRIMEKV_COMMIT:-$COMMIT}
CPU=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
FAMILY=$(lscpu | sed -n 's/^CPU family:[[:space:]]*//p' | head -1)
MODELNO=$(lscpu | sed -n 's/^Model:[[:space:]]*//p' | head -1)
FLAGS=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
  grep -xE 'avx2|fma|f16c|avx512f|avx512bw|avx512vl|avx512_vnni|avx_vnni|avx512_bf16|amx_tile|amx_int8|amx_bf16' |
  tr '\n' ' ')

NO_MMAP=$NO_MMAP python3 - "$OUT" "$THREADS" "$MAX_T" "$SHORT" "$LONG" "$LONG_RATIO" "$LONG_KV" "$LONG_PRESS" <<'PY'
import json, os, re, statistics, sys, pathlib
out, threads, max_t = pathlib.Path(sys.argv[1]), sys.argv[2].split(), sys.argv[3]
short, lengths, ratio = sys.argv[4] == "1", [int(l) for l in sys.argv[5].split(",") if l], sys.argv[6]
long_kv, long_press = sys.argv[7].split(), sys.argv[8] == "1"

def load_json(path):
    text = path.read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(l) for l in text.splitlines() if l.startswith("{")]

def llama_bench(name):
    rows = load_json(out / f"llama_{name}.json")
    return statistics.median(rows[0]["samples_ts"]), rows[0].get("build_commit", "?")

def batched(name, key):
    rows = load_json(out / f"llama_{name}.json")
    rows = [rows] if isinstance(rows, dict) else rows
    return statistics.median(r[key] for r in rows)

def primekv_test(name, test):
    j = load_json(out / f"primekv_{name}.json")
    return next(t for t in j["tests"] if t["test"] == test)

def primekv(name, test):
    return primekv_test(name, test)["median"]

def rss(label):  # GNU time's %M, KiB
    return int((out / f"{label}.rss").read_text().split()[-1]) * 1024

def llama_kv_bytes(name):  # "KV self size  =  X MiB" in llama.cpp's log
    m = re.search(r"KV self size\s*=\s*([0-9.]+) MiB", (out / f"llama_{name}.log").read_text())
    return float(m.group(1)) * 2**20 if m else float("nan")

def steal(names):  # "llama.cpp / primekv" steal in percent over each side's run
    a, b = (names, names) if isinstance(names, str) else names
    return "%s / %s" % ((out / f"llama_{a}.steal").read_text().strip(),
                        (out / f"primekv_{b}.steal").read_text().strip())

def mib(b):
    return f"{b / 2**20:.1f} MiB"

rows, llama_commit = [], os.environ.get("LLAMA_COMMIT") or "?"
if short:
    for t in threads:
        pp, reported = llama_bench(f"pp512_t{t}")
        # A source tree without .git reports "unknown": the label given outranks it.
        llama_commit = os.environ.get("LLAMA_COMMIT") or reported
        rows.append((f"prefill 512, {t} thread{'s' if t != '1' else ''}", pp, primekv(f"pp512_t{t}", "pp512"), f"pp512_t{t}"))
        tg, _ = llama_bench(f"tg128_t{t}")
        rows.append((f"decode 128, {t} thread{'s' if t != '1' else ''}", tg, primekv(f"tg128_t{t}", "tg128"), f"tg128_t{t}"))
    rows.append((f"prefill 4096, {max_t} threads", batched(f"long_t{max_t}", "speed_pp"),
                 primekv(f"long_t{max_t}", "pp4096"), f"long_t{max_t}"))
    rows.append((f"decode at depth 4096, {max_t} threads", batched(f"long_t{max_t}", "speed_tg"),
                 primekv(f"long_t{max_t}", "tg128 @ d4096"), f"long_t{max_t}"))
memory, e2e = [], []
for L in lengths:
    for kv in long_kv:
        name = f"L{L}_{kv}"
        rows.append((f"prefill {L}, {kv} cache, {max_t} threads", batched(name, "speed_pp"),
                     primekv(name, f"pp{L}"), name))
        rows.append((f"decode at depth {L}, {kv} cache", batched(name, "speed_tg"),
                     primekv(name, f"tg128 @ d{L}"), name))
        memory.append((f"{L}, {kv} cache, full", llama_kv_bytes(name), rss(f"llama_{name}"),
                       primekv_test(name, f"tg128 @ d{L}")["kv_bytes_end"], rss(f"primekv_{name}")))
    if not long_press:
        continue
    # PrimeKV over a q8_0 cache against llama.cpp's f16 cache with flash attention.
    press = primekv_test(f"L{L}_press", f"tg128 @ d{L}")
    base = f"L{L}_f16"
    rows.append((f"decode at depth {L}: primekv {ratio} + q8_0 vs llama.cpp f16", batched(base, "speed_tg"),
                 press["median"], (base, f"L{L}_press")))
    # Prefill (and, for primekv, every compression) then 128 decoded tokens.
    e2e.append((f"{L} + 128 tokens: primekv {ratio} + q8_0 vs llama.cpp f16",
                batched(base, "t_pp") + batched(base, "t_tg"),
                press["fill_s"] + 128 / press["median"], press["score_s"]))
    memory.append((f"{L}, primekv {ratio} + q8_0 vs llama.cpp f16", llama_kv_bytes(base), rss(f"llama_{base}"),
                   press["kv_bytes_end"], rss(f"primekv_L{L}_press")))

kernels = sorted({f'{j.get("kernels", "?")} (int8 {j.get("int8_kernels", "?")})'
                  for j in map(load_json, out.glob("primekv_*.json"))})
print(f"llama.cpp build {llama_commit}; primekv kernels {', '.join(kernels)}")
print()
print("| tokens/s | llama.cpp | primekv | ratio | steal %, llama.cpp / primekv |")
print("|---|---:|---:|---:|---:|")
for name, a, b, runs in rows:
    print(f"| {name} | {a:.2f} | {b:.2f} | {b / a:.2f} | {steal(runs)} |")
if short:
    # The decode rows' share of the read bandwidth the probe measured on this machine (primekv
    # bench's bandwidth_share: median run; every run's in brackets).
    shares = []
    for t in threads:
        test = primekv_test(f"tg128_t{t}", "tg128")
        if "bandwidth_share" in test:
            runs = ", ".join(f"{100 * s:.1f}" for s in test.get("bandwidth_shares", []))
            shares.append(f"{t} thread{'s' if t != '1' else ''} {100 * test['bandwidth_share']:.0f}% ({runs})")
    if shares:
        weights = "a private copy" if os.environ.get("NO_MMAP") == "1" else "the file's mapping"
        print()
        print(f"primekv decode at depth 0, share of the measured read bandwidth ({weights}): {'; '.join(shares)}")
if e2e:
    print()
    print("| end to end, seconds | llama.cpp | primekv (scoring) | llama.cpp / primekv |")
    print("|---|---:|---:|---:|")
    for name, a, b, score in e2e:
        print(f"| {name} | {a:.1f} | {b:.1f} ({score:.2f}) | {a / b:.2f} |")
if memory:
    print()
    print("| context, cache | llama.cpp KV | llama.cpp peak RSS | primekv KV | primekv peak RSS | KV ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, lkv, lrss, pkv, prss in memory:
        print(f"| {name} | {mib(lkv)} | {mib(lrss)} | {mib(pkv)} | {mib(prss)} | {pkv / lkv:.3f} |")
PY
echo
echo "CPU: $CPU (family $FAMILY, model $MODELNO); flags: $FLAGS"
echo "primekv $COMMIT${PRIMEKV_ARGS:+ ($PRIMEKV_ARGS)}; model $(basename "$MODEL"); reps $REPS (4096-token tests $LONG_REPS; long tests ${LONG:-none}, 1 run)"
echo "load average before: $LOAD_BEFORE, after: $LOAD_AFTER; ${ELAPSED}s"
[[ ${KEEP:-0} == 1 ]] && echo "raw results: $OUT"
exit 0
