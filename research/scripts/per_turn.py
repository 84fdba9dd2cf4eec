#!/usr/bin/env python3
"""Per-turn accuracy of `primekv eval` rows (issue 11, item 6), with n and 95% bootstrap
intervals, and the later-turn comparison of two presses.

    python3 research/scripts/per_turn.py --ratio 0.75 --a DIR_A:PRESS_A --b DIR_B:PRESS_B \
        [--tasks multiturn,drift] [--table DIR ...]

--table DIR prints, for every press in DIR at --ratio (and the full cache), the accuracy of
each turn (1-based; n = samples with that turn) with its interval. --a/--b compare later turns
(turn >= 2) of two presses on the samples both have: mean of each, B - A and B / A - 1
(relative), each with a paired bootstrap interval (2000 replicates redrawing samples). Rows
with "status": "over_context" are left out. Standard library only.
"""

import argparse
import json
import os
import random
from collections import defaultdict

from eval_rows import open_rows


def short(task):
    return os.path.basename(task)[: -len(".jsonl")] if task.startswith("jsonl:") else task


def load(d, tasks):
    rows = []
    with open_rows(d) as f:
        for line in f:
            r = json.loads(line)
            if r.get("status", "ok") != "ok" or (tasks and short(r["task"]) not in tasks):
                continue
            rows.append(r)
    return rows


def ci(values, stat, reps=2000, seed=1):
    rng = random.Random(seed)
    n = len(values)
    draws = sorted(stat([values[rng.randrange(n)] for _ in range(n)]) for _ in range(reps))
    return draws[int(0.025 * reps)], draws[int(0.975 * reps) - 1]


def mean(v):
    return sum(v) / len(v) if v else float("nan")


def table(d, ratio, tasks):
    rows = load(d, tasks)
    cells = defaultdict(list)  # (press, turn) -> scores
    for r in rows:
        if r["press"] == "none" or abs(r["ratio"] - ratio) < 1e-9:
            cells[(r["press"], r["turn"] + 1)].append(r["score"])
    presses = sorted({p for p, _ in cells}, key=lambda p: (p != "none", p))
    turns = sorted({t for _, t in cells})
    print(f"\n{d}, ratio {ratio} (none = full cache), tasks {','.join(sorted(tasks)) or 'all'}")
    print("| press | " + " | ".join(f"turn {t}" for t in turns) + " |")
    print("|---|" + "---|" * len(turns))
    for p in presses:
        out = []
        for t in turns:
            v = cells.get((p, t), [])
            if not v:
                out.append("")
                continue
            lo, hi = ci(v, mean)
            out.append(f"{100 * mean(v):.1f} [{100 * lo:.1f}, {100 * hi:.1f}] n={len(v)}")
        print(f"| {p} | " + " | ".join(out) + " |")


def later_turns(spec, ratio, tasks):
    d, press = spec.split(":", 1)
    per = defaultdict(list)  # (task, id) -> later-turn scores
    for r in load(d, tasks):
        if r["press"] == press and abs(r["ratio"] - ratio) < 1e-9 and r["turn"] >= 1:
            per[(r["task"], r["id"])].append(r["score"])
    return {k: mean(v) for k, v in per.items()}


def compare(a, b, ratio, tasks):
    sa, sb = later_turns(a, ratio, tasks), later_turns(b, ratio, tasks)
    keys = sorted(set(sa) & set(sb))
    pairs = [(sa[k], sb[k]) for k in keys]
    ma, mb = mean([p[0] for p in pairs]), mean([p[1] for p in pairs])
    dlo, dhi = ci(pairs, lambda ps: mean([y - x for x, y in ps]))

    def rel(ps):
        den = mean([x for x, _ in ps])
        return mean([y for _, y in ps]) / den - 1 if den > 0 else float("inf")

    rlo, rhi = ci(pairs, rel)
    rv = mb / ma - 1 if ma > 0 else float("inf")
    print(f"\nLater turns (turn >= 2), ratio {ratio}, n = {len(pairs)} samples "
          f"(each sample's later turns averaged)")
    print(f"A = {a}: {100 * ma:.1f}   B = {b}: {100 * mb:.1f}")
    print(f"B - A = {100 * (mb - ma):+.1f} [{100 * dlo:+.1f}, {100 * dhi:+.1f}] (x100)")
    print(f"B / A - 1 = {100 * rv:+.1f}% [{100 * rlo:+.1f}%, {100 * rhi:+.1f}%] "
          f"(paper: +28.62%)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ratio", type=float, default=0.75)
    ap.add_argument("--tasks", default="multiturn,drift")
    ap.add_argument("--table", action="append", default=[])
    ap.add_argument("--a")
    ap.add_argument("--b")
    args = ap.parse_args()
    tasks = set(args.tasks.split(",")) if args.tasks else set()
    for d in args.table:
        table(d, args.ratio, tasks)
    if args.a and args.b:
        compare(args.a, args.b, args.ratio, tasks)


if __name__ == "__main__":
    main()
