#!/usr/bin/env python3
"""Checks that the current engine reproduces an evaluation folder made before eval folders had a
config.json, or before config.json recorded what each press name resolves to (its "presses":
name -> the press with every default filled in), and only then records it (issue 11;
docs/reliability.md, "Evaluation folders").

Reruns the first N samples of every task in DIR/results.jsonl, for every press found there that
has no record yet ("none" needs none), at the given ratios, into a fresh temporary folder, and
compares each rerun row with the committed row of the same (task, id, press, ratio, turn): the
score and the prediction must be identical, and every press checked must have an identical row.
With --record and no difference: a folder without config.json gets the rerun's (model hash,
settings, task-file hashes and presses, written by `primekv eval` itself); a folder whose
config.json lacks presses gets the rerun's resolved texts of the presses checked, provided the
rerun's model and settings equal the recorded ones (without options after --, the rerun takes
the recorded settings). Later runs may then resume there. Anything
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


def settings_options(st):
    """The eval options that reproduce a recorded config.json's settings."""
    opts = ["--mode", str(st.get("mode", "context")), "--length", str(st.get("length", 1024)),
            "--kv-type", str(st.get("kv-type", "f16"))]
    if st.get("max-new-tokens"):
        opts += ["--max-new-tokens", str(st["max-new-tokens"])]
    if st.get("ctx-size"):
        opts += ["-c", str(st["ctx-size"])]
    if st.get("chat"):
        opts += ["--chat"]
    for k in ("chat-template", "chunk", "interval"):
        if st.get(k) is not None:
            opts += ["--" + k, str(st[k])]
    return opts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--bin", default=os.environ.get("PRIMEKV_BIN", "build/release/src/cli/primekv"))
    ap.add_argument("--model", default=None,
                    help="default: the model config.json records, else models/primekv-retrieval.gguf")
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--ratios", default="0.75")
    ap.add_argument("--threads", default=os.environ.get("THREADS", "0"))
    ap.add_argument("--record", action="store_true")
    a, extra = ap.parse_known_args()
    a.extra = [x for x in extra if x != "--"]

    results = os.path.join(a.dir, "results.jsonl")
    config_path = os.path.join(a.dir, "config.json")
    if not os.path.exists(results) and os.path.exists(results + ".xz"):
        sys.exit(f"{a.dir}: its rows are stored compressed; run `xz -dk {results}.xz` first "
                 "(research/README.md: stored folders, and the task paths their rows record)")
    rows = [json.loads(l) for l in open(results) if l.strip()]
    presses = sorted({r["press"] for r in rows} - {"none"})
    config = None
    if os.path.exists(config_path):
        config = json.load(open(config_path))
        recorded = config.get("presses") or {}
        presses = [p for p in presses if p not in recorded]
        if not presses:
            print(f"{a.dir}: already has config.json recording every press of its rows")
            return 0
        print(f"{a.dir}: config.json has no resolved text for {', '.join(presses)}")
        if not a.extra:
            a.extra = settings_options(config.get("settings", {}))
        if a.model is None and os.path.exists(config.get("model", {}).get("path", "")):
            a.model = config["model"]["path"]
    if a.model is None:
        a.model = "models/primekv-retrieval.gguf"
    committed = {key(r): r for r in rows}
    tasks = sorted({r["task"] for r in rows if config is None or r["press"] in presses})
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
        checked = {r["press"] for r in rerun if key(r) in committed}
        unchecked = [p for p in presses if p not in checked]
        if unchecked:
            print(f"{a.dir}: no rerun row to compare for {', '.join(unchecked)} (other --ratios?)")
        # Identical rows only vouch for a press's parameters when its outputs depend on them:
        # a press whose every rerun prediction equals the full cache's would match any variant.
        full = {(r["task"], r["id"], int(r.get("turn", 0))): r["prediction"]
                for r in rerun if r["press"] == "none" and "prediction" in r}
        moved = {r["press"] for r in rerun if "prediction" in r and
                 full.get((r["task"], r["id"], int(r.get("turn", 0)))) not in (None, r["prediction"])}
        blind = [p for p in presses if p in checked and p not in moved]
        if blind:
            print(f"{a.dir}: every rerun prediction of {', '.join(blind)} equals the full cache's, "
                  "so identical rows cannot tell its variants apart (more --samples or --ratios?)")
        if differ or same == 0 or unchecked or blind:
            print(f"{a.dir}: NOT reproduced by this engine; nothing recorded")
            return 1
        if not a.record:
            return 0
        rerun_config = json.load(open(os.path.join(out, "config.json")))
        if config is None:
            shutil.copyfile(os.path.join(out, "config.json"), config_path)
            print(f"{a.dir}: reproduced; config.json recorded")
            return 0
        for part in ("model", "settings"):
            mine = {k: v for k, v in config.get(part, {}).items() if k != "path"}
            theirs = {k: v for k, v in rerun_config[part].items() if k != "path"}
            if mine != theirs:
                print(f"{a.dir}: the rerun's {part} {theirs} differ from the recorded {mine} "
                      "(pass the folder's options after --); nothing recorded")
                return 1
        for t, fp in rerun_config["tasks"].items():
            if t in config.get("tasks", {}) and config["tasks"][t] != fp:
                print(f"{a.dir}: task {t} is another version ({fp}; recorded "
                      f"{config['tasks'][t]}); nothing recorded")
                return 1
        config.setdefault("presses", {})
        for p in ["none"] + presses:
            config["presses"].setdefault(p, rerun_config["presses"][p])
        tmp = config_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(config, indent=2) + "\n")
        os.replace(tmp, config_path)
        print(f"{a.dir}: reproduced; resolved presses recorded in config.json: "
              + ", ".join(f"{p} = {config['presses'][p]}" for p in presses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
