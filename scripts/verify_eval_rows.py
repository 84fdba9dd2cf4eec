#!/usr/bin/env python3
"""Checks that the current engine reproduces an evaluation folder made before eval folders had a
config.json, and only then records one (issue 11; docs/reliability-eval.md).

Reruns the first N samples of every task in DIR/results.jsonl, for every press found there, at
the given ratios, into a fresh temporary folder, and compares each rerun row with the committed
row of the same (task, id, press, ratio, turn): the score and the prediction must be identical.
With --record and no difference, the rerun's config.json (model hash, settings, task-file hashes,
written by `primekv eval` itself) is copied into DIR, so later runs may resume there. Anything
that differs is listed and nothing is recorded (exit status 1).

Usage: scripts/verify_eval_rows.py DIR [--samples N] [--ratios 0.75] [--record]
                                      [-- extra eval options, e.g. --length 2048]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


def key(r):
    return (r["task"], r["id"], r["press"], float(r["ratio"]), int(r.get("turn", 0)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--bin", default=os.environ.get("PRIMEKV_BIN", "build/release/src/cli/primekv"))
    ap.add_argument("--model", default="models/primekv-retrieval.gguf")
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--ratios", default="0.75")
    ap.add_argument("--threads", default=os.environ.get("THREADS", "0"))
    ap.add_argument("--record", action="store_true")
    a, extra = ap.parse_known_args()
    a.extra = [x for x in extra if x != "--"]

    results = os.path.join(a.dir, "results.jsonl")
    if os.path.exists(os.path.join(a.dir, "config.json")):
        print(f"{a.dir}: already has config.json")
        return 0
    rows = [json.loads(l) for l in open(results) if l.strip()]
    committed = {key(r): r for r in rows}
    tasks = sorted({r["task"] for r in rows})
    presses = sorted({r["press"] for r in rows} - {"none"})
    seeds = {r["seed"] for r in rows}
    if len(seeds) != 1:
        print(f"{a.dir}: rows with several seeds {seeds}; not checked")
        return 1
    with tempfile.TemporaryDirectory(prefix="verify-eval-") as tmp:
        out = os.path.join(tmp, "run")
        cmd = [a.bin, "eval", "-m", a.model, "--tasks", ",".join(tasks), "--presses",
               ",".join(["none"] + presses), "--ratios", a.ratios, "--samples", str(a.samples),
               "--threads", a.threads, "--seed", str(seeds.pop()), "-q", "--out", out] + a.extra
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        rerun = [json.loads(l) for l in open(os.path.join(out, "results.jsonl")) if l.strip()]
        same, differ, missing = 0, [], 0
        for r in rerun:
            c = committed.get(key(r))
            if c is None:
                missing += 1
                continue
            if c["score"] == r["score"] and c["prediction"] == r["prediction"]:
                same += 1
            else:
                differ.append((key(r), c["score"], r["score"], c["prediction"], r["prediction"]))
        print(f"{a.dir}: {len(rerun)} rerun rows, {same} identical, {len(differ)} differ, "
              f"{missing} not in the folder")
        for d in differ[:20]:
            print("  differs:", d)
        if differ or same == 0:
            print(f"{a.dir}: NOT reproduced by this engine; no config.json recorded")
            return 1
        if a.record:
            shutil.copyfile(os.path.join(out, "config.json"), os.path.join(a.dir, "config.json"))
            print(f"{a.dir}: reproduced; config.json recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
