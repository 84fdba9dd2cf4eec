#!/bin/sh
# profile=auto from the command line (issue 68): calibrate with no task file writes the cache
# entry keyed by the model file's SHA-256 and a second run reads it; generate and eval resolve
# profile=auto to it (nested below 0.9) and keep what naming the file keeps; a model with no
# profile is refused with the command that makes one, and so is another model's profile.
# Usage: auto_profile.sh PRIMEKV MODELS_DIR
set -eu
bin=$1 models=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export XDG_CACHE_HOME="$T/cache"
fail() { echo "FAIL: $*"; exit 1; }
cp "$models/primekv-retrieval-2.gguf" "$T/m.gguf"
prompt="The key for the north gate is 8812. The key for the east gate is 3307. The key for the river gate is 5590."

# No profile yet: refused, naming the command.
if "$bin" generate -m "$T/m.gguf" -p "$prompt" -n 2 --press primekv:profile=auto --ratio 0.5 \
    2> "$T/err"; then fail "generate ran without a profile"; fi
grep -q "primekv calibrate -m $T/m.gguf" "$T/err" || fail "no command named: $(cat "$T/err")"

# Built-in corpus, then the cache.
"$bin" calibrate -m "$T/m.gguf" --samples 2 --length 256 -t 1 > "$T/out" 2> "$T/err" ||
  fail "calibrate: $(cat "$T/err")"
sha=$(sha256sum "$T/m.gguf" | cut -c1-64)
cached="$T/cache/primekv/profiles/$sha.budget.json"
[ -f "$cached" ] || fail "no cache entry $cached: $(cat "$T/out")"
grep -q '"format_version": 2' "$cached" || fail "no format_version 2"
grep -q "\"model_sha256\": \"$sha\"" "$cached" || fail "model_sha256 is not the file's"
"$bin" calibrate -m "$T/m.gguf" -o "$T/copy.json" 2> "$T/err" > /dev/null || fail "second run"
grep -q "used the cached profile $cached" "$T/err" || fail "cache not used: $(cat "$T/err")"
cmp -s "$cached" "$T/copy.json" || fail "-o is not the cached profile"

# generate: profile=auto is the cached file nested below 0.9, the same tokens as naming it.
a=$("$bin" generate -m "$T/m.gguf" -p "$prompt" -n 4 --temp 0 --press primekv:profile=auto \
    --ratio 0.75 --json -t 1 2> "$T/err") || fail "generate auto: $(cat "$T/err")"
grep -q "press primekv:nest=0.9,profile=$cached" "$T/err" || fail "resolved press: $(cat "$T/err")"
b=$("$bin" generate -m "$T/m.gguf" -p "$prompt" -n 4 --temp 0 \
    --press "primekv:profile=$cached,nest=0.9" --ratio 0.75 --json -t 1 2> /dev/null)
same() { grep -v '"press"\|_ms"\|_per_s"'; }  # timings differ from run to run
[ "$(echo "$a" | same)" = "$(echo "$b" | same)" ] || fail "generate: auto and the named file differ"
c=$("$bin" generate -m "$T/m.gguf" -p "$prompt" -n 4 --temp 0 --press primekv --ratio 0.75 \
    --json -t 1 2> /dev/null)
[ "$(echo "$a" | same)" != "$(echo "$c" | same)" ] || fail "generate: auto kept what primekv keeps"

# eval: its rows name the press as resolved (the file).
printf '{"id": "a", "context": "%s", "turns": [{"question": "What is the key for the east gate?", "answers": ["3307"]}], "metric": "string_match_all"}\n' \
  "$prompt" > "$T/t.jsonl"
"$bin" eval -m "$T/m.gguf" --tasks "jsonl:$T/t.jsonl" --presses "none;primekv:profile=auto" \
  --ratios 0.75 -t 1 -q --out "$T/e" > /dev/null 2> "$T/err" || fail "eval auto: $(cat "$T/err")"
grep -q "\"press\":\"primekv:nest=0.9,profile=$cached\"" "$T/e/results.jsonl" ||
  fail "eval rows name the file: $(cat "$T/e/results.jsonl")"
# --compare takes the press as typed and pairs the rows that name what it resolved to.
"$bin" eval -m "$T/m.gguf" --tasks "jsonl:$T/t.jsonl" --presses "none;primekv:profile=auto" \
  --ratios 0.75 -t 1 -q --out "$T/e" --compare none,primekv:profile=auto > "$T/cmp" 2> "$T/err" ||
  fail "eval --compare with profile=auto: $(cat "$T/err")"
grep -q "| none | primekv:nest=0.9,profile=$cached |" "$T/cmp" || fail "compare table: $(cat "$T/cmp")"

# Another model's profile beside a model of the same shape: refused by its identity.
cp "$models/primekv-long.gguf" "$T/other.gguf"
cp "$cached" "$T/other.budget.json"
if "$bin" generate -m "$T/other.gguf" -p "$prompt" -n 2 --press primekv:profile=auto --ratio 0.5 \
    2> "$T/err"; then fail "another model's profile ran"; fi
grep -q "measured on another model" "$T/err" || fail "refusal: $(cat "$T/err")"
echo "auto_profile: all checks passed"
