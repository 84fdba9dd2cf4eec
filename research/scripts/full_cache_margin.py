#!/usr/bin/python3
"""The most any press can win over a baseline on an eval folder: the full cache as a press.

    /usr/bin/python3 research/scripts/full_cache_margin.py \
        research/results/reference-heldout-test-v3 --baseline keydiff --press primekv

For each ratio and for the mean over ratios, the paired difference (x100, same samples) of
  * `full`: the full cache's score on every sample, as if it were a press at that ratio;
  * `full, capped`: the same, except on the task families and ratios given by --capped, where
    the press's own measured score is used (cells where a capacity estimate, e.g.
    research/scripts/capacity_bound.py, says no query-free press can do better);
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

from eval_rows import open_rows


def family(task):
    return os.path.basename(task.split(":", 1)[-1]).removesuffix(".jsonl")


def paired(rows, baseline, press, capped=frozenset()):
    """Per candidate ("full", "full, capped" when `capped`, the press) and per ratio (and "mean"),
    the per-task lists of paired differences candidate - baseline."""
    scores = collections.defaultdict(dict)  # (press, ratio) -> {(task, id, turn): score}
    for row in rows:
        if row.get("status") == "ok":
            scores[(row["press"], row["ratio"])][(row["task"], row["id"], row["turn"])] = row["score"]
    full = scores.get(("none", 0.0))
    if not full:
        raise SystemExit("full_cache_margin.py: no full-cache rows (press none)")
    ratios = sorted(r for p, r in scores if p == baseline and r > 0)
    if not ratios:
        raise SystemExit(f"full_cache_margin.py: no rows of {baseline}")
    candidates = {"full": lambda r, k: full[k]}
    if capped:
        candidates["full, capped"] = lambda r, k: scores[(press, r)][k] if (family(k[0]), r) in capped else full[k]
    candidates[press] = lambda r, k: scores[(press, r)][k]
    out = {}
    for name, value in candidates.items():
        per = {r: collections.defaultdict(list) for r in ratios + ["mean"]}
        for k in full:
            base = [scores[(baseline, r)].get(k) for r in ratios]
            vals = [value(r, k) if k in scores[(press, r)] else None for r in ratios]
            if any(x is None for x in base + vals):
                continue
            diffs = [a - b for a, b in zip(vals, base)]
            for r, d in zip(ratios, diffs):
                per[r][k[0]].append(d)
            per["mean"][k[0]].append(float(np.mean(diffs)))
        out[name] = per
    return ratios, len(full), out


def selftest():
    # Two tasks; task a has 2 samples, task b 1. Ratio 0.5 only. Press p, baseline b.
    rows = []
    def add(press, ratio, task, sid, score):
        rows.append({"status": "ok", "press": press, "ratio": ratio, "task": task, "id": sid, "turn": 0,
                     "score": score})
    for task, sid, full, base, press in [("jsonl:x/a.jsonl", "0", 1, 0, 1), ("jsonl:x/a.jsonl", "1", 1, 1, 0),
                                         ("jsonl:x/b.jsonl", "0", 0, 1, 1)]:
        add("none", 0.0, task, sid, full)
        add("b", 0.5, task, sid, base)
        add("p", 0.5, task, sid, press)
    ratios, n, out = paired(rows, "b", "p", frozenset({("b", 0.5)}))
    assert ratios == [0.5] and n == 3
    task_means = lambda per: np.mean([np.mean(v) for v in per.values()])
    # full - b: task a: (1 + 0) / 2, task b: -1 -> mean of tasks -0.25
    assert abs(task_means(out["full"][0.5]) + 0.25) < 1e-12
    # capped: task b uses the press's own 1 -> b: 0; a: 0.5 -> 0.25
    assert abs(task_means(out["full, capped"][0.5]) - 0.25) < 1e-12
    # the press: a: (1 - 1) / 2 = 0, b: 0 -> 0
    assert abs(task_means(out["p"]["mean"])) < 1e-12
    print("full_cache_margin.py selftest: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", nargs="?", help="an eval output folder (results.jsonl or .jsonl.xz)")
    ap.add_argument("--baseline", default="keydiff")
    ap.add_argument("--press", default="primekv")
    ap.add_argument("--capped", default="", help="family:ratio,... where the press's own score is used "
                    "(family = the task file's base name without .jsonl)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--selftest", action="store_true", help="check the paired statistic on a hand example")
    args = ap.parse_args()
    if args.selftest:
        return selftest()
    if not args.folder:
        ap.error("an eval folder is required (or --selftest)")
    capped = set()
    for item in filter(None, args.capped.split(",")):
        fam, _, r = item.rpartition(":")
        capped.add((fam, float(r)))
    with open_rows(args.folder) as f:
        rows = [json.loads(line) for line in f]
    ratios, n, out = paired(rows, args.baseline, args.press, frozenset(capped))
    rng = np.random.default_rng(args.seed)

    def interval(per_task):
        arrays = [np.asarray(v) for v in per_task.values() if v]
        est = np.mean([a.mean() for a in arrays])
        reps = [np.mean([rng.choice(a, len(a)).mean() for a in arrays]) for _ in range(2000)]
        return f"{100 * est:+.1f} [{100 * np.percentile(reps, 2.5):+.1f}, {100 * np.percentile(reps, 97.5):+.1f}]"

    print(f"{args.folder}: minus {args.baseline}, n = {n} paired samples")
    print("| as a press | " + " | ".join(str(r) for r in ratios) + " | mean over ratios |")
    print("|---|" + "---|" * (len(ratios) + 1))
    for name, per in out.items():
        print(f"| {name} | " + " | ".join(interval(per[r]) for r in ratios) + f" | {interval(per['mean'])} |")


if __name__ == "__main__":
    main()
