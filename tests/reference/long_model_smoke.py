#!/usr/bin/env python3
"""The long reference model answers a 4K-token retrieval sample with the full cache: a
seconds-long check that its extended positions work in the engine (issue 49). The sample is the
first of make_long_splits.py's dev split for the `single` family at 4,096 tokens
(tests/reference/data/long-4k-single.jsonl); the 8K-32K tables are benchmarks, not tests.

    long_model_smoke.py --primekv build/release/src/cli/primekv --model models/primekv-long.gguf
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--primekv", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tasks", default=os.path.join(HERE, "data", "long-4k-single.jsonl"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as out:
        cmd = [args.primekv, "eval", "-m", args.model, "--tasks", "jsonl:" + args.tasks,
               "--presses", "none", "--samples", "1", "-c", "4608", "--threads", "2", "-q",
               "--out", out]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            print("FAIL eval exited %d:\n%s" % (run.returncode, run.stderr), file=sys.stderr)
            return 1
        with open(os.path.join(out, "results.jsonl")) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    if len(rows) != 1 or rows[0].get("status") != "ok":
        print("FAIL expected one ok row, got %r" % rows, file=sys.stderr)
        return 1
    row = rows[0]
    print("prediction %r, score %s" % (row.get("prediction"), row.get("score")))
    if row.get("score") != 1.0:
        print("FAIL the full cache should answer this sample", file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
