#!/usr/bin/env python3
"""Compares the rows of two evaluation folders (or two sets of folders with a common prefix).

Every row is keyed by (task, id, press, ratio, turn); the fields that must be identical are the
score, the prediction, the status and the kept-cache size. Timings are ignored. Used to show that
a behaviour-preserving change (a refactor) leaves every evaluated answer unchanged:

  SMOKE=3 PRIMEKV_BIN=/tmp/primekv-before scripts/eval_reference.sh /tmp/ref/before
  SMOKE=3 scripts/eval_reference.sh /tmp/ref/after
  scripts/compare_eval_dirs.py /tmp/ref/before /tmp/ref/after     # prefix mode: every suffix

Exit status 0 when every row of A has an identical row in B and vice versa, 1 otherwise.
"""
import glob
import json
import os
import sys

FIELDS = ("score", "prediction", "status", "kv_bytes_compressed", "context_tokens")


def rows(path):
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            k = (r["task"], r["id"], r["press"], float(r["ratio"]), int(r.get("turn", 0)))
            out[k] = tuple(r.get(x) for x in FIELDS)
    return out


def pairs(a, b):
    if os.path.isdir(a) and os.path.isdir(b):
        return [(os.path.join(a, "results.jsonl"), os.path.join(b, "results.jsonl"))]
    found = []
    for da in sorted(glob.glob(a + "-*")):
        db = b + da[len(a):]
        found.append((os.path.join(da, "results.jsonl"), os.path.join(db, "results.jsonl")))
    return found


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    bad = 0
    total = 0
    todo = pairs(sys.argv[1], sys.argv[2])
    if not todo:
        print("no evaluation folders found", file=sys.stderr)
        return 2
    for pa, pb in todo:
        if not os.path.exists(pb):
            print(f"{pb}: missing")
            bad += 1
            continue
        ra, rb = rows(pa), rows(pb)
        diff = [k for k in ra.keys() | rb.keys() if ra.get(k) != rb.get(k)]
        total += len(ra)
        for k in sorted(diff, key=str)[:10]:
            print(f"{os.path.dirname(pa)} vs {os.path.dirname(pb)}: {k}: {ra.get(k)} != {rb.get(k)}")
        print(f"{os.path.dirname(pa)}: {len(ra)} rows vs {len(rb)}; {len(diff)} differ")
        bad += len(diff)
    print(f"total {total} rows compared; {bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
