#!/usr/bin/env python3
"""Share of the gap between two presses that a third closes, with a paired bootstrap interval,
and what each press costs over the prefill (issue 53).

    gap_closed.py DIR --low keydiff --high kvzip --new PRESS [--ratio 0.9] [--reps 2000]

gap = (new - low) / (high - low), each term the mean over tasks of the task's mean sample score
(a multi-turn sample's score is the mean of its turns, as the eval report averages them). The
interval redraws each task's samples with replacement, the same draw for all three presses
(paired), 2000 times. Cost per press: the median over samples of
(prefill_ms + score_ms + second_pass_ms) / prefill_ms, from the same rows. Standard library only.
"""
import argparse
import json
import os
import random
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eval_rows import open_rows, task_key  # noqa: E402


def load(folder, ratio, presses):
    turns = defaultdict(list)  # (press, task, id) -> scores
    cost = defaultdict(dict)   # press -> (task, id) -> ratio of times
    for line in open_rows(folder):
        r = json.loads(line)
        if r.get("status") != "ok":
            continue
        press = r["press"]
        if press not in presses or abs(r["ratio"] - (0.0 if press == "none" else ratio)) > 1e-9:
            continue
        key = (task_key(r["task"]), r["id"])
        turns[(press,) + key].append(r["score"])
        if r["prefill_ms"] > 0 and r.get("turn", 0) == 0:
            cost[press][key] = (r["prefill_ms"] + r["score_ms"] + r["second_pass_ms"]) / r["prefill_ms"]
    scores = {k: sum(v) / len(v) for k, v in turns.items()}
    return scores, cost


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--low", default="keydiff")
    ap.add_argument("--high", default="kvzip")
    ap.add_argument("--new", required=True)
    ap.add_argument("--ratio", type=float, default=0.9)
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=53)
    a = ap.parse_args()
    presses = (a.low, a.high, a.new)
    scores, cost = load(a.folder, a.ratio, set(presses) | {"none"})
    tasks = defaultdict(list)  # task -> ids every press has
    ids = {(t, i) for (p, t, i) in scores if p == a.new}
    for t, i in sorted(ids):
        if all((p, t, i) in scores for p in presses):
            tasks[t].append(i)
    if not tasks:
        sys.exit(f"{a.folder}: no sample has rows for {', '.join(presses)} at ratio {a.ratio}")

    def means(draw):
        out = []
        for p in presses:
            out.append(statistics.fmean(
                statistics.fmean(scores[(p, t, i)] for i in draw[t]) for t in tasks))
        return out

    low, high, new = means(tasks)
    rng = random.Random(a.seed)
    gaps, diffs = [], []
    for _ in range(a.reps):
        draw = {t: [rng.choice(v) for _ in v] for t, v in tasks.items()}
        l, h, n = means(draw)
        diffs.append(h - l)
        gaps.append((n - l) / (h - l) if h != l else float("nan"))
    gaps = sorted(g for g in gaps if g == g)
    lo, hi = gaps[int(0.025 * len(gaps))], gaps[int(0.975 * len(gaps)) - 1]
    n = sum(len(v) for v in tasks.values())
    print(f"{a.folder}: ratio {a.ratio}, {len(tasks)} tasks, n = {n} paired samples")
    print(f"| press | score x100 | cost: (prefill + compression) / prefill, median |")
    print("|---|---|---|")
    for p, s in zip(presses, (low, high, new)):
        c = statistics.median(cost[p].values()) if cost[p] else float("nan")
        print(f"| {p} | {100 * s:.1f} | {c:.3f} |")
    print(f"gap closed (new - {a.low}) / ({a.high} - {a.low}): {(new - low) / (high - low):.2f} "
          f"[{lo:.2f}, {hi:.2f}] (95% paired bootstrap, {len(gaps)} of {a.reps} draws with a gap)")


if __name__ == "__main__":
    main()
