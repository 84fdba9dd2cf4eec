#!/usr/bin/env bash
# Runs the hostile invocations of a table (tests/cli/hostile_eval.tsv) against the primekv binary.
# Usage: hostile_eval.sh PRIMEKV_BIN STORIES_GGUF RETRIEVAL_GGUF TABLE
#
# Table rows, tab-separated:  NAME  WANT  REGEX  ARGS
#   WANT 1 or 2: the exit status must be exactly that, and stderr must hold exactly one error line
#     ("primekv: ..." other than "primekv: warning:"/"primekv: note:"), matching REGEX (an
#     extended regex that names the option or the file).
#   WANT 0: the command must succeed and its output must match REGEX (a warning or a note).
#   WANT sh: ARGS is a shell command (fixtures, checks of files left behind); it must succeed.
#     Its REGEX is "-" (tabs are whitespace to `read`, so no field may be empty).
# ARGS are shell words after @BIN@ @S@ @R@ @T@ (binary, stories260K, retrieval model, scratch
# folder) are substituted. A status above 128 (a signal), or a sanitizer/terminate report,
# fails every row. '#' starts a comment line.
set -u
bin="$1" stories="$2" retrieval="$3" table="$4"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/primekv_hostile_eval.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# Fixtures.
row='"context": "The key is under the pot.", "turns": [{"question": "Where is the key?", "answers": ["pot"]}], "metric": "string_match_all"}'
printf '{"id": "a", %s\n{"id": "b", %s\n{"id": "a", %s\n' "$row" "$row" "$row" > "$tmp/dup.jsonl"
printf '{"id": 1.5, %s\n' "$row" > "$tmp/idfloat.jsonl"
printf '{"id": "caf\xc3", %s\n' "$row" > "$tmp/badutf8.jsonl"
printf '{"id": "ok", %s\n{"id": "big", "context": "c", "turns": [{"question": "q", "answers": ["a"], "max_new_tokens": 16777216}], "metric": "qa_f1"}\n' "$row" > "$tmp/huge_turn.jsonl"
printf '{"id": "ok", %s\n{"id": "x", "context": 5}\n' "$row" > "$tmp/one_bad_line.jsonl"
: > "$tmp/empty.txt"
for i in $(seq 1 400); do printf 'Lily and Ben went to the park to play with a ball. '; done > "$tmp/long.txt"
mkdir -p "$tmp/legacy"
echo '{"task":"t"}' > "$tmp/legacy/results.jsonl"
echo 'not a folder' > "$tmp/afile"

pass=0 fail=0
while IFS=$'\t' read -r name want regex args; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  if [[ -z "$args" ]]; then
    echo "FAIL $name: row has no ARGS"; fail=$((fail + 1)); continue
  fi
  args="${args//@BIN@/$bin}"
  args="${args//@S@/$stories}"
  args="${args//@R@/$retrieval}"
  args="${args//@T@/$tmp}"
  if [[ "$want" == sh ]]; then
    if bash -c "$args" > "$tmp/out" 2>&1; then
      pass=$((pass + 1))
    else
      echo "FAIL $name: shell step failed: $args"; sed 's/^/    /' "$tmp/out" | tail -5
      fail=$((fail + 1))
    fi
    continue
  fi
  eval "argv=($args)"
  "$bin" "${argv[@]}" < /dev/null > "$tmp/out" 2> "$tmp/err"
  rc=$?
  why=""
  if [[ $rc -gt 128 ]]; then
    why="killed by signal $((rc - 128))"
  elif grep -Eq 'terminate called|Sanitizer|runtime error|Aborted|core dumped' "$tmp/err"; then
    why="crash report on stderr"
  elif [[ "$rc" != "$want" ]]; then
    why="exit status $rc, want $want"
  elif [[ "$want" == 0 ]]; then
    cat "$tmp/out" "$tmp/err" | grep -Eq -- "$regex" || why="output does not match /$regex/"
  else
    errors="$(grep '^primekv: ' "$tmp/err" | grep -Ev '^primekv: (warning|note): ')"
    n=$(printf '%s' "$errors" | grep -c '^primekv: ')
    if [[ $n -ne 1 ]]; then
      why="$n error lines, want exactly 1"
    elif ! printf '%s\n' "$errors" | grep -Eq -- "$regex"; then
      why="error line does not match /$regex/"
    fi
  fi
  if [[ -z "$why" ]]; then
    pass=$((pass + 1))
  else
    echo "FAIL $name: $why"
    echo "    primekv $args"
    tail -n 5 "$tmp/err" | sed 's/^/    stderr: /'
    fail=$((fail + 1))
  fi
done < "$table"
echo "hostile_eval: $pass passed, $fail failed"
[[ $fail -eq 0 && $pass -gt 0 ]]
