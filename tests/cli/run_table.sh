#!/bin/sh
# Table-driven CLI test: runs one `primekv` invocation per row of a table and checks how it ends.
# Usage: run_table.sh BIN TABLE MODEL [SETUP]
#   BIN: the primekv binary; MODEL: a small GGUF model (stories260K) rows may use as $S;
#   SETUP: optional script run first as `sh SETUP DIR BIN MODEL` to make fixtures in DIR ($T).
# Table rows: STATUS<TAB>SUBSTRING<TAB>ARGS. STATUS is the exit status wanted (0 = success,
# 1 = error, 2 = usage); for 1 and 2 SUBSTRING must appear within one line of stderr, for 0
# within stdout or stderr. STATUS `sh` runs ARGS as a shell command that must exit 0 (checks of
# files left behind); its SUBSTRING is ignored. ARGS are shell words after the binary name,
# where $S, $T and $BIN expand. Blank lines and lines starting with # are skipped.
# A row fails if the process is killed by a signal, prints a sanitizer or terminate report, runs
# past ROW_TIMEOUT seconds (default 120), uses more than ROW_MAX_RSS_KIB of memory (when set
# and /usr/bin/time exists; not under ASan, whose shadow memory would count), exits otherwise,
# or its message lacks the substring. Prints every failure and a count; exits 1 if any failed.
set -u
abs() { case "$1" in /*) printf '%s' "$1" ;; *) printf '%s/%s' "$(pwd)" "$1" ;; esac; }
BIN=$(abs "$1"); TABLE="$2"; S=$(abs "$3"); SETUP="${4:-}"
T=$(mktemp -d "${TMPDIR:-/tmp}/primekv_table.XXXXXX")
R=$(mktemp -d "${TMPDIR:-/tmp}/primekv_table_run.XXXXXX")  # the runner's own files, apart from $T
trap 'chmod -R u+w "$T" 2> /dev/null; rm -rf "$T" "$R"' EXIT
export BIN S T
limit="${ROW_TIMEOUT:-120}"
max_rss="${ROW_MAX_RSS_KIB:-}"
if [ -n "$max_rss" ] && { [ ! -x /usr/bin/time ] || nm -C "$BIN" 2> /dev/null | grep -q __asan_init; }; then
  max_rss=""
fi
if [ -n "$SETUP" ]; then
  if ! sh "$SETUP" "$T" "$BIN" "$S" > "$R/setup.log" 2>&1; then
    cat "$R/setup.log"; echo "FAIL: setup $SETUP"; exit 1
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
  why=""
  if [ "$want" = sh ]; then
    if ! timeout "$limit" sh -c "$args" > "$R/out" 2> "$R/err" < /dev/null; then
      why="shell check failed"
    fi
  else
    eval "set -- $args"
    if [ -n "$max_rss" ]; then
      timeout "$limit" /usr/bin/time -f '%M' -o "$R/rss" "$BIN" "$@" > "$R/out" 2> "$R/err" < /dev/null
    else
      timeout "$limit" "$BIN" "$@" > "$R/out" 2> "$R/err" < /dev/null
    fi
    rc=$?
    if [ -n "$max_rss" ] && [ -s "$R/rss" ]; then
      # GNU time writes "Command exited with non-zero status N" before the number.
      rss=$(tail -n 1 "$R/rss"); rm -f "$R/rss"
    else
      rss=0
    fi
    if [ "$rc" -eq 124 ]; then why="hung (killed after $limit s)"
    elif [ "$rc" -gt 128 ]; then why="killed by signal $((rc - 128))"
    elif grep -Eq 'terminate called|Sanitizer|runtime error:|core dumped' "$R/err"; then
      why="crash report on stderr"
    elif [ "$rc" -ne "$want" ]; then why="exit status $rc, want $want"
    elif [ -n "$max_rss" ] && [ "$rss" -gt "$max_rss" ]; then why="peak RSS $rss KiB > $max_rss KiB"
    elif [ "$want" -eq 0 ] && ! cat "$R/out" "$R/err" | grep -qF -- "$substring"; then
      why="output lacks '$substring'"
    elif [ "$want" -ne 0 ] && ! grep -qF -- "$substring" "$R/err"; then
      why="stderr lacks '$substring'"
    fi
  fi
  if [ -n "$why" ]; then
    failed=$((failed + 1))
    echo "FAIL $TABLE:$line_no: $args"
    echo "     $why; stderr:"; tail -n 3 "$R/err" | sed 's/^/       /'
  fi
done < "$TABLE"
echo "$rows rows, $failed failed"
[ "$rows" -gt 0 ] && [ "$failed" -eq 0 ]
