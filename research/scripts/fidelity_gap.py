#!/usr/bin/env python3
"""Table of `primekv fidelity --json` files: mean KL per press and ratio, and for every press the
share of KeyDiff's KL gap to the oracle that it closes, (KL_keydiff - KL) / (KL_keydiff -
KL_oracle) (issue 11's fidelity line asks for at least a third at ratios 0.5 and 0.75). No share
is printed where the oracle's KL is not below KeyDiff's (no gap to close).

Usage: research/scripts/fidelity_gap.py LABEL=FILE.json [LABEL=FILE.json ...]   (markdown on stdout)
"""
import json
import sys


def load(path):
    with open(path) as f:
        rows = json.load(f)
    kl = {}
    for r in rows:
        kl[(r["press"], float(r["ratio"]))] = (float(r["kl"]), int(r["contexts"]))
    return kl


def share(kl, press, ratio):
    if press in ("keydiff", "oracle") or ("keydiff", ratio) not in kl or ("oracle", ratio) not in kl:
        return None
    kd, orc, x = kl[("keydiff", ratio)][0], kl[("oracle", ratio)][0], kl[(press, ratio)][0]
    if not orc < kd:
        return None
    return (kd - x) / (kd - orc)


def main(argv):
    if not argv or any("=" not in a for a in argv):
        print(__doc__, file=sys.stderr)
        return 2
    print("| model (contexts) | press | " + " | ".join("0.25 0.5 0.75 0.9".split()) + " |")
    print("|---|---|---|---|---|---|")
    for arg in argv:
        label, path = arg.split("=", 1)
        kl = load(path)
        presses = list(dict.fromkeys(p for p, _ in kl))
        n = next(iter(kl.values()))[1]
        for i, p in enumerate(presses):
            cells = []
            for r in (0.25, 0.5, 0.75, 0.9):
                if (p, r) not in kl:
                    cells.append("")
                    continue
                s = share(kl, p, r)
                cells.append(f"{kl[(p, r)][0]:.5f}" + ("" if s is None else f" ({100 * s:.0f}%)"))
            head = f"{label} ({n})" if i == 0 else ""
            print(f"| {head} | {p} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
