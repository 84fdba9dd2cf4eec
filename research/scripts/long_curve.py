#!/usr/bin/env python3
"""Full-cache accuracy of the long model's checkpoints against the tokens each was trained on,
per context length (issue 65, item 2: choose the next step from a curve). Each checkpoint is a
set of eval folders named PREFIX-LENGTH (long_model_eval.sh's output), e.g.

    research/scripts/long_curve.py --out research/results/long-real/curve \\
        0:research/results/long-real/old-real-dev \\
        0.88:research/results/long-real/new-real-dev \\
        1.71:research/results/long-real/new2-real-dev

(TOKENS_IN_MILLIONS:PREFIX). Writes OUT.csv (checkpoint, length, family, n, score), OUT.md (the
mean over families per length) and, where gnuplot is installed, OUT.png.
"""
import argparse
import collections
import glob
import os
import shutil
import subprocess
import sys

from paired_full_cache import table


def family_scores(folder):
    """Mean full-cache score per family (x100) and the sample count."""
    per = collections.defaultdict(list)
    for (fam, _), score in table(folder).items():
        per[fam].append(score)
    return {fam: (100 * sum(v) / len(v), len(v)) for fam, v in per.items()}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output path without extension")
    ap.add_argument("points", nargs="+", help="TOKENS_IN_MILLIONS:PREFIX")
    args = ap.parse_args(argv)
    rows = []  # (tokens, length, family, n, score)
    for p in args.points:
        tokens, _, prefix = p.partition(":")
        folders = sorted(glob.glob(prefix + "-*"))
        if not folders:
            print(f"long_curve: no folder {prefix}-LENGTH", file=sys.stderr)
            return 2
        for folder in folders:
            length = folder.rsplit("-", 1)[-1]
            if not length.isdigit():
                continue
            for fam, (score, n) in sorted(family_scores(folder).items()):
                rows.append((float(tokens), int(length), fam, n, score))
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".csv", "w") as f:
        f.write("tokens_millions,length,family,n,score\n")
        for r in rows:
            f.write("%g,%d,%s,%d,%.1f\n" % r)
    means = collections.defaultdict(list)  # (tokens, length) -> family means
    for tokens, length, _, n, score in rows:
        means[(tokens, length)].append((score, n))
    lengths = sorted({k[1] for k in means})
    tokens = sorted({k[0] for k in means})
    lines = ["| training tokens (M) | " + " | ".join(f"{L // 1024}K" for L in lengths) + " |",
             "|---|" + "---|" * len(lengths)]
    for t in tokens:
        cells = []
        for L in lengths:
            v = means.get((t, L))
            cells.append("%.1f (n=%d)" % (sum(s for s, _ in v) / len(v), sum(n for _, n in v))
                         if v else "")
        lines.append(f"| {t:g} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    with open(args.out + ".md", "w") as f:
        f.write("Full cache, mean over families (x100), by training tokens and context length.\n\n")
        f.write(table)
    print(table, end="")
    if shutil.which("gnuplot"):
        dat = args.out + ".dat"
        with open(dat, "w") as f:
            for L in lengths:
                f.write(f"# {L}\n")
                for t in tokens:
                    v = means.get((t, L))
                    if v:
                        f.write("%g %.2f\n" % (t, sum(s for s, _ in v) / len(v)))
                f.write("\n\n")
        plots = ", ".join(f"'{dat}' index {i} with linespoints title '{L // 1024}K'"
                          for i, L in enumerate(lengths))
        script = (f"set terminal pngcairo size 720,440\nset output '{args.out}.png'\n"
                  "set xlabel 'tokens trained since the real-prose rounds began (millions)'\n"
                  "set ylabel 'full-cache accuracy (x100)'\nset yrange [0:100]\n"
                  "set key bottom right\nset grid\n"
                  f"plot {plots}\n")
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
        os.remove(dat)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
