#!/usr/bin/env python3
"""The long reference model's press tables (issue 49) from one `primekv eval` folder: scores per
press and ratio (the mean over task families, each family weighted equally), PrimeKV minus
KeyDiff and PrimeKV minus the full cache with paired bootstrap intervals, the cost of each press
(prefill, KVzip's second pass, scoring and selection) and the accuracy-cost frontier as a PNG
(gnuplot). Used for research/results/long-tables/ and docs/results.md:

    research/scripts/long_tables.py research/results/long-tables/test-16384 \\
        --out research/results/long-tables/16384 --title "16K"

Intervals: 2,000 bootstrap replicates that redraw each family's samples (the same samples for
both presses of a pair), the 2.5th and 97.5th percentiles. Standard library and gnuplot only.
"""
import argparse
import collections
import json
import os
import random
import subprocess
import sys

from eval_rows import open_text

PRESS_ORDER = ["primekv", "keydiff", "streamingllm", "knorm", "expected_attention", "lagkv",
               "curdkv", "kvzip", "snapkv"]


def family(task):
    return task.rsplit("/", 1)[-1].replace(".jsonl", "")


def load(folder):
    """rows[(press, ratio)][(family, id)] = (score, row); a sample's turns are averaged."""
    per = collections.defaultdict(lambda: collections.defaultdict(list))
    with open_text(os.path.join(folder, "results.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("status") != "ok":
                continue
            per[(r["press"], r["ratio"])][(family(r["task"]), r["id"])].append(r)
    return {cfg: {k: (sum(x["score"] for x in v) / len(v), v[0]) for k, v in d.items()}
            for cfg, d in per.items()}


def macro(scores, keys):
    by = collections.defaultdict(list)
    for k in keys:
        by[k[0]].append(scores[k])
    return 100 * sum(sum(v) / len(v) for v in by.values()) / len(by)


def paired(a, b, keys, reps=2000):
    """B - A: the mean over families, and its bootstrap interval."""
    fams = sorted({k[0] for k in keys})
    by = {f: [k for k in keys if k[0] == f] for f in fams}
    rng = random.Random(1)
    diff = lambda ks: {f: sum(b[k] - a[k] for k in ks[f]) / len(ks[f]) for f in fams}
    point = 100 * sum(diff(by).values()) / len(fams)
    boot = sorted(100 * sum(diff({f: [rng.choice(by[f]) for _ in by[f]] for f in fams}).values())
                  / len(fams) for _ in range(reps))
    return point, boot[int(0.025 * reps)], boot[int(0.975 * reps) - 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    rows = load(args.folder)
    full = {k: s for k, (s, _) in rows[("none", 0.0)].items()}
    # Only samples every configuration answered: the pairs are then always the same samples.
    keys = sorted(set.intersection(*[set(d) for d in rows.values()]))
    fams = sorted({k[0] for k in keys})
    n_by = collections.Counter(k[0] for k in keys)
    os.makedirs(args.out, exist_ok=True)
    ratios = sorted({r for (p, r) in rows if p != "none"})
    presses = [p for p in PRESS_ORDER if any((p, r) in rows for r in ratios)]
    md, summary = [], {"samples": len(keys), "families": dict(n_by), "configs": []}
    md.append("Samples: %d (%s); scores are means over the families, each weighted equally.\n" %
              (len(keys), ", ".join("%s %d" % (f, n_by[f]) for f in fams)))
    md.append("| press | " + " | ".join("%.2f" % r for r in ratios) + " |")
    md.append("|---|" + "---|" * len(ratios))
    md.append("| none (full cache) | " + " | ".join("%.1f" % macro(full, keys) for _ in ratios)
              + " |")
    for p in presses:
        cells = []
        for r in ratios:
            cells.append("%.1f" % macro({k: s for k, (s, _) in rows[(p, r)].items()}, keys)
                         if (p, r) in rows else "")
        md.append("| %s | %s |" % (p, " | ".join(cells)))
    md.append("\nPer family (full cache; primekv and keydiff per ratio):\n")
    md.append("| family | n | full | " + " | ".join("primekv %.2f | keydiff %.2f" % (r, r)
                                                   for r in ratios) + " |")
    md.append("|---|---|---|" + "---|---|" * len(ratios))
    for f in fams:
        ks = [k for k in keys if k[0] == f]
        cell = lambda p, r: "%.1f" % (100 * sum(rows[(p, r)][k][0] for k in ks) / len(ks))
        md.append("| %s | %d | %s | %s |" % (f, len(ks), cell("none", 0.0), " | ".join(
            "%s | %s" % (cell("primekv", r), cell("keydiff", r)) for r in ratios)))
    md.append("\nPaired differences (points, 95% bootstrap interval):\n")
    md.append("| ratio | primekv - keydiff | primekv - full cache |")
    md.append("|---|---|---|")
    for r in ratios:
        pk = {k: s for k, (s, _) in rows[("primekv", r)].items()}
        kd = {k: s for k, (s, _) in rows[("keydiff", r)].items()}
        d1, d2 = paired(kd, pk, keys), paired(full, pk, keys)
        md.append("| %.2f | %+.1f [%+.1f, %+.1f] | %+.1f [%+.1f, %+.1f] |" % ((r,) + d1 + d2))
        summary.setdefault("paired", []).append(
            {"ratio": r, "primekv_minus_keydiff": d1, "primekv_minus_full": d2})
    md.append("\nCost per sample (means): prefill, KVzip's second pass, the press's scoring and "
              "selection, and the KV bytes kept:\n")
    md.append("| press | ratio | score | prefill s | second pass s | press ms | total s | KV MiB |")
    md.append("|---|---|---|---|---|---|---|---|")
    dat = []
    for (p, r) in [("none", 0.0)] + [(p, r) for p in presses for r in ratios if (p, r) in rows]:
        sel = [rows[(p, r)][k][1] for k in keys]
        mean = lambda f: sum(x[f] for x in sel) / len(sel)
        acc = macro({k: s for k, (s, _) in rows[(p, r)].items()}, keys)
        total = (mean("prefill_ms") + mean("second_pass_ms") + mean("score_ms")) / 1000
        mib = mean("kv_bytes_compressed") / 2**20
        md.append("| %s | %.2f | %.1f | %.2f | %.2f | %.1f | %.2f | %.1f |" % (
            p, r, acc, mean("prefill_ms") / 1000, mean("second_pass_ms") / 1000,
            mean("score_ms"), total, mib))
        summary["configs"].append({"press": p, "ratio": r, "score": acc, "total_s": total,
                                   "prefill_s": mean("prefill_ms") / 1000,
                                   "second_pass_s": mean("second_pass_ms") / 1000,
                                   "press_ms": mean("score_ms"), "kv_mib": mib})
        dat.append((p, r, acc, total, mib))
    with open(os.path.join(args.out, "tables.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    plot(dat, args.out, args.title)
    print("\n".join(md))
    return 0


def plot(dat, out, title):
    """frontier.png: accuracy against seconds and against KV MiB, one series per press."""
    names = []
    with open(os.path.join(out, "frontier.dat"), "w") as f:
        for p in dict.fromkeys(d[0] for d in dat):
            f.write("# %s\n" % p)
            for d in [d for d in dat if d[0] == p]:
                f.write("%.4f %.4f %.4f %.2f\n" % (d[3], d[4], d[2], d[1]))
            f.write("\n\n")
            names.append(p)
    colours = ["#000000", "#009e73", "#56b4e9", "#e69f00", "#f0e442", "#0072b2", "#d55e00",
               "#cc79a7", "#8c564b", "#7f7f7f"]
    series = lambda col: ", ".join(
        "'frontier.dat' index %d using %s:3 with linespoints pt %d ps %s lc rgb '%s' title '%s'" %
        (i, col, 3 if n == "none" else 7, "2" if n == "none" else "1",
         colours[i % len(colours)], "full cache" if n == "none" else n)
        for i, n in enumerate(names))
    gp = """set terminal pngcairo size 1200,500 noenhanced
set output 'frontier.png'
set multiplot layout 1,2 title 'Accuracy and cost, long model %s (mean over families)'
set key bottom right
set ylabel 'score'
set yrange [0:100]
set xlabel 'prefill + second pass + press (s per sample)'
plot %s
set xlabel 'KV cache kept (MiB)'
plot %s
unset multiplot
""" % (title, series(1), series(2))
    with open(os.path.join(out, "frontier.gp"), "w") as f:
        f.write(gp)
    subprocess.run(["gnuplot", "frontier.gp"], cwd=out, check=True)


if __name__ == "__main__":
    sys.exit(main())
