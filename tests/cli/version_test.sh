#!/bin/sh
# `primekv --version` names the project's version and the commit the binary was built from: the
# source tree's HEAD when it is a git checkout, "unknown" otherwise.
# Usage: version_test.sh PRIMEKV VERSION SOURCE_DIR
bin="$1"; version="$2"; src="$3"
out=$("$bin" --version 2>&1); rc=$?
echo "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: exit status $rc"; exit 1; }
head=$(git -C "$src" rev-parse --short=12 HEAD 2>/dev/null) || head=unknown
case "$out" in
  "primekv $version (commit $head)" | "primekv $version (commit $head-dirty)") echo PASS ;;
  *) echo "FAIL: want 'primekv $version (commit ${head}[-dirty])'"; exit 1 ;;
esac
