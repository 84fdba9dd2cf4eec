#!/usr/bin/python3
"""Stand-in for `primekv logits` used only to test check_logits.py's plumbing.

Computes the reference logits, rounds them to float32 and writes them in the engine's raw
format. MOCK_ENGINE_FAULT selects a deliberate fault: "perturb:POS" adds 1% of max |logit| at
position POS, "short" drops the last value, "nan" writes a NaN, "fail" exits non-zero.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_forward import Model, parse_tokens  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["logits"])
    ap.add_argument("-m", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("-o", required=True)
    args = ap.parse_args()
    fault = os.environ.get("MOCK_ENGINE_FAULT", "")
    if fault == "fail":
        print("mock engine: failing on purpose", file=sys.stderr)
        return 3
    logits = Model(args.m).forward(parse_tokens(args.tokens)).astype("<f4")
    if fault.startswith("perturb:"):
        pos = int(fault.split(":")[1])
        logits[pos, 0] += 0.01 * np.abs(logits).max()
    flat = logits.reshape(-1)
    if fault == "short":
        flat = flat[:-1]
    if fault == "nan":
        flat[5] = np.nan
    flat.tofile(args.o)
    return 0


if __name__ == "__main__":
    sys.exit(main())
