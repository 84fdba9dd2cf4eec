#!/bin/sh
# Runs a command and checks its exit status class and output.
# Usage: expect.sh ok|fail|usage REGEX -- COMMAND [ARGS...]
# fail: exit status 1 (a clear error); usage: exit status 2 (a bad flag or value).
want="$1"; regex="$2"; shift 3
out=$("$@" 2>&1); rc=$?
printf '%s\n' "$out" | tail -n 20
if [ "$want" = ok ] && [ "$rc" -ne 0 ]; then echo "FAIL: exit status $rc, want 0"; exit 1; fi
if [ "$want" = fail ] && [ "$rc" -eq 0 ]; then echo "FAIL: exit status 0, want non-zero"; exit 1; fi
if [ "$rc" -gt 1 ] && [ "$want" = fail ]; then echo "FAIL: exit status $rc (a crash?), want 1"; exit 1; fi
if [ "$want" = usage ] && [ "$rc" -ne 2 ]; then echo "FAIL: exit status $rc, want 2"; exit 1; fi
if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then echo "FAIL: output does not match /$regex/"; exit 1; fi
echo PASS
