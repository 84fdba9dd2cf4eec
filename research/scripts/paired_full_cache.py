#!/usr/bin/env python3
"""Full-cache scores of two eval folders on the same samples, per family, and the paired
bootstrap interval (2,000 replicates redrawing each family's samples) of the difference of the
mean over families. Used for the long model against retrieval-2 on the 2K held-out test split
(models/primekv-long.md):

    research/scripts/paired_full_cache.py research/results/reference2-heldout-test \\
        research/results/long-cpu-stage2/eval-2k-heldout-test
"""
import collections
import random
import sys

from eval_rows import open_rows
import json


def table(folder):
    d = collections.defaultdict(list)
    with open_rows(folder) as f:
        for line in f:
            r = json.loads(line)
            if r["press"] == "none":
                d[(r["task"].rsplit("/", 1)[-1].replace(".jsonl", ""), r["id"])].append(r["score"])
    return {k: sum(v) / len(v) for k, v in d.items()}


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    a, b = table(argv[0]), table(argv[1])
    keys = sorted(set(a) & set(b))
    fams = sorted({k[0] for k in keys})
    by = {f: [k for k in keys if k[0] == f] for f in fams}
    print("| family | n | A | B |\n|---|---|---|---|")
    ma = mb = 0.0
    for f in fams:
        x = 100 * sum(a[k] for k in by[f]) / len(by[f])
        y = 100 * sum(b[k] for k in by[f]) / len(by[f])
        ma, mb = ma + x / len(fams), mb + y / len(fams)
        print("| %s | %d | %.1f | %.1f |" % (f, len(by[f]), x, y))
    rng = random.Random(1)
    reps = sorted(
        sum(100 * sum(b[k] - a[k] for k in s) / len(s)
            for s in ([rng.choice(by[f]) for _ in by[f]] for f in fams)) / len(fams)
        for _ in range(2000))
    print("mean over families (%d paired samples): A %.1f, B %.1f, B - A %+.1f [%+.1f, %+.1f]" %
          (len(keys), ma, mb, mb - ma, reps[50], reps[1949]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
