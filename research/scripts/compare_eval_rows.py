#!/usr/bin/env python3
"""Compares the rows of two `primekv eval` folders (a regeneration against the committed one):
every (task, sample, press, ratio, turn) unit present in both must have the same status,
prediction and score. Exit status 1 when a row differs or the unit sets differ. Either folder
may hold results.jsonl or the stored results.jsonl.xz; task files recorded under their pre-move
path (jsonl:docs/results/...) match the same files under jsonl:research/results/... (eval_rows.py).

Usage: research/scripts/compare_eval_rows.py COMMITTED_DIR REGENERATED_DIR
"""
import json
import sys

from eval_rows import open_rows, task_key


def load(folder):
    rows = {}
    with open_rows(folder) as f:
        for line in f:
            r = json.loads(line)
            key = (task_key(r["task"]), r["id"], r["press"], r["ratio"], r["turn"])
            rows[key] = (r["status"], r.get("prediction"), r.get("score"))
    return rows


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    a, b = load(argv[0]), load(argv[1])
    common = set(a) & set(b)
    differing = sorted(k for k in common if a[k] != b[k])
    only = len(set(a) ^ set(b))
    print(f"{argv[1]}: {len(b)} rows, {len(a)} in {argv[0]}; {len(common)} in both, "
          f"{len(differing)} differing, {only} in one only")
    for k in differing[:5]:
        print("  ", k, a[k], "->", b[k])
    return 0 if not differing and only == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
