#!/bin/sh
# Table-driven CLI test: runs one `primekv` invocation per row of a table and checks how it ends.
# Usage: run_table.sh BIN TABLE MODEL [SETUP]
#   BIN: the primekv binary; MODEL: a small GGUF model (stories260K) rows may use as $S;
#   SETUP: optional script run first as `sh SETUP DIR BIN MODEL` to make fixtures in DIR ($T).
# Table rows: STATUS<TAB>SUBSTRING<TAB>ARGS. STATUS is the exit status wanted (1 = error, 2 =
# usage); SUBSTRING must appear within one line of stderr; ARGS are shell words after the binary
# name, where $S, $T and $BIN expand. Blank lines and lines starting with # are skipped.
# A row fails if the process is killed by a signal, runs past 120 s, exits otherwise, or its
# message lacks the substring. Prints every failure and a count; exits 1 if any row failed.
set -u
abs() { case "$1" in /*) printf '%s' "$1" ;; *) printf '%s/%s' "$(pwd)" "$1" ;; esac; }
BIN=$(abs "$1"); TABLE="$2"; S=$(abs "$3"); SETUP="${4:-}"
T=$(mktemp -d "${TMPDIR:-/tmp}/primekv_table.XXXXXX")
trap 'rm -rf "$T"' EXIT
export BIN S T
if [ -n "$SETUP" ]; then
  if ! sh "$SETUP" "$T" "$BIN" "$S" > "$T/setup.log" 2>&1; then
    cat "$T/setup.log"; echo "FAIL: setup $SETUP"; exit 1
  fi
fi
tab=$(printf '\t')
rows=0; failed=0; line_no=0
while IFS= read -r line || [ -n "$line" ]; do
  line_no=$((line_no + 1))
  case "$line" in ''|'#'*) continue ;; esac
  want=${line%%"$tab"*}; rest=${line#*"$tab"}
  substring=${rest%%"$tab"*}; args=${rest#*"$tab"}
  rows=$((rows + 1))
  eval "set -- $args"
  timeout 120 "$BIN" "$@" > "$T/out" 2> "$T/err" < /dev/null
  rc=$?
  why=""
  if [ "$rc" -eq 124 ]; then why="hung (killed after 120 s)"
  elif [ "$rc" -gt 128 ]; then why="killed by signal $((rc - 128))"
  elif [ "$rc" -ne "$want" ]; then why="exit status $rc, want $want"
  elif ! grep -qF -- "$substring" "$T/err"; then why="stderr lacks '$substring'"
  fi
  if [ -n "$why" ]; then
    failed=$((failed + 1))
    echo "FAIL $TABLE:$line_no: $args"
    echo "     $why; stderr:"; tail -n 3 "$T/err" | sed 's/^/       /'
  fi
done < "$TABLE"
echo "$rows rows, $failed failed"
[ "$rows" -gt 0 ] && [ "$failed" -eq 0 ]
