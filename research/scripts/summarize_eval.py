#!/usr/bin/env python3
"""Markdown tables (press x ratio, score x 100) from `primekv eval` output folders.

    python3 research/scripts/summarize_eval.py DIR [--tasks a,b,...] [--title T]

Averages the samples (and turns) of each task, then the tasks, for every press and ratio; the
full cache (`none`) is the ratio-0 column. Task names may be given by their short form: a
`jsonl:.../family.jsonl` task is called `family`. Standard library only.
"""

import argparse
import json
import os
from collections import defaultdict

from eval_rows import open_rows


def short(task):
    return os.path.basename(task)[: -len(".jsonl")] if task.startswith("jsonl:") else task


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--tasks", default=None, help="comma-separated task names (short form)")
    ap.add_argument("--title", default=None)
    ap.add_argument("--per-task", action="store_true", help="one row per task at --ratio")
    ap.add_argument("--ratio", type=float, default=0.75)
    args = ap.parse_args()
    rows = defaultdict(list)  # (task, press, ratio) -> scores
    with open_rows(args.dir) as f:
        for line in f:
            j = json.loads(line)
            if not isinstance(j, dict) or j.get("status", "ok") != "ok":
                continue  # over_context rows have no score (and bad lines are not rows)
            rows[(short(j["task"]), j["press"], float(j["ratio"]))].append(float(j["score"]))
    tasks = sorted({t for t, _, _ in rows})
    if args.tasks:
        want = args.tasks.split(",")
        tasks = [t for t in want if t in tasks]
    presses = []
    for _, p, _ in sorted(rows, key=lambda k: k[1] != "none"):
        if p not in presses:
            presses.append(p)
    ratios = sorted({r for _, _, r in rows if r > 0})

    def mean(task, press, ratio):
        v = rows.get((task, press, ratio))
        return 100 * sum(v) / len(v) if v else None

    if args.title:
        print("**%s**\n" % args.title)
    if args.per_task:
        print("| task | none | " + " | ".join(p for p in presses if p != "none") + " |")
        print("|---|" + "---|" * len(presses))
        for t in tasks:
            cells = ["%.0f" % mean(t, "none", 0.0)]
            for p in presses:
                if p != "none":
                    m = mean(t, p, args.ratio)
                    cells.append("-" if m is None else "%.0f" % m)
            print("| %s | %s |" % (t, " | ".join(cells)))
        print()
        return
    print("| press | " + " | ".join("%g" % r for r in [0.0] + ratios) + " |")
    print("|---|" + "---|" * (len(ratios) + 1))
    for p in presses:
        cells = []
        for r in [0.0] + ratios:
            ms = [mean(t, p, r) for t in tasks]
            ms = [m for m in ms if m is not None]
            cells.append("%.1f" % (sum(ms) / len(ms)) if ms and len(ms) == len(tasks) else "")
        print("| %s | %s |" % (p, " | ".join(cells)))
    print()


if __name__ == "__main__":
    main()
