#!/usr/bin/python3
"""The most any press can win over a baseline on an eval folder: the full cache as a press.

    /usr/bin/python3 scripts/full_cache_margin.py docs/results/reference-heldout-test-v3 \
        --baseline keydiff --press primekv

For each ratio and for the mean over ratios, the paired difference (x100, same samples) of
  * `full`: the full cache's score on every sample, as if it were a press at that ratio;
  * `full, capped`: the same, except on the task families and ratios given by --capped, where
    the press's own measured score is used (cells where a capacity estimate, e.g.
    scripts/capacity_bound.py, says no query-free press can do better);
  * the press itself,
minus the baseline, with the statistic of `primekv eval --compare`: mean over tasks of the
per-task mean difference, 95% percentile bootstrap redrawing each task's samples (2000).
If even `full` is not above the baseline with its interval above zero, the acceptance line
"press >= baseline at every ratio, mean interval above zero" is beyond what the folder can
resolve, whatever the press.
"""

import argparse
import collections
import json
import os

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="an eval output folder (its results.jsonl)")
    ap.add_argument("--baseline", default="keydiff")
    ap.add_argument("--press", default="primekv")
    ap.add_argument("--capped", default="", help="family:ratio,... where the press's own score is used "
                    "(family = the task file's base name without .jsonl)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    scores = collections.defaultdict(dict)  # (press, ratio) -> {(task, id, turn): score}
    with open(os.path.join(args.folder, "results.jsonl"), encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row.get("status") == "ok":
                scores[(row["press"], row["ratio"])][(row["task"], row["id"], row["turn"])] = row["score"]
    full = scores.get(("none", 0.0))
    if not full:
        raise SystemExit(f"full_cache_margin.py: no full-cache rows (press none) in {args.folder}")
    ratios = sorted(r for p, r in scores if p == args.baseline and r > 0)
    if not ratios:
        raise SystemExit(f"full_cache_margin.py: no rows of {args.baseline} in {args.folder}")
    capped = set()
    for item in filter(None, args.capped.split(",")):
        fam, _, r = item.rpartition(":")
        capped.add((fam, float(r)))

    def family(task):
        return os.path.basename(task.split(":", 1)[-1]).removesuffix(".jsonl")

    candidates = {"full": lambda r, k: full[k]}
    if capped:
        candidates["full, capped"] = lambda r, k: scores[(args.press, r)][k] if (family(k[0]), r) in capped else full[k]
    candidates[args.press] = lambda r, k: scores[(args.press, r)][k]
    rng = np.random.default_rng(args.seed)

    def interval(per_task):
        arrays = [np.asarray(v) for v in per_task.values() if v]
        est = np.mean([a.mean() for a in arrays])
        reps = [np.mean([rng.choice(a, len(a)).mean() for a in arrays]) for _ in range(2000)]
        return f"{100 * est:+.1f} [{100 * np.percentile(reps, 2.5):+.1f}, {100 * np.percentile(reps, 97.5):+.1f}]"

    print(f"{args.folder}: minus {args.baseline}, n = {len(full)} paired samples")
    print("| as a press | " + " | ".join(str(r) for r in ratios) + " | mean over ratios |")
    print("|---|" + "---|" * (len(ratios) + 1))
    for name, value in candidates.items():
        per_ratio = {r: collections.defaultdict(list) for r in ratios}
        mean = collections.defaultdict(list)
        for k in full:
            base = [scores[(args.baseline, r)].get(k) for r in ratios]
            vals = [value(r, k) if k in scores[(args.press, r)] else None for r in ratios]
            if any(x is None for x in base + vals):
                continue
            diffs = [a - b for a, b in zip(vals, base)]
            for r, d in zip(ratios, diffs):
                per_ratio[r][k[0]].append(d)
            mean[k[0]].append(np.mean(diffs))
        print(f"| {name} | " + " | ".join(interval(per_ratio[r]) for r in ratios) + f" | {interval(mean)} |")


if __name__ == "__main__":
    main()
