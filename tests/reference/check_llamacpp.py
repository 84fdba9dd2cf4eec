#!/usr/bin/python3
"""Checks the engine's logits against llama.cpp's for one case of tools/llamacpp_ref/cases.json.

The model is remade with `primekv make-model` (the case's arguments and weight type) and must
have the bytes llama.cpp computed on (the sha256 in data/llamacpp/manifest.json): a changed
writer is reported, never compared. The engine then runs the case's tokens at the case's
context size twice, as one prefill batch and one token at a time (the decode path), and each
run must meet the bounds of the weight type:
  F32: max |engine - llama.cpp| <= 1e-3 * max |llama.cpp| (the issue's bound);
  quantised: the top token equal at >= 98% of positions, with two measured exceptions below.
Where the numpy reference reads the weights (F32, Q8_0) it also computes the exact float64
logits of the same file: the engine must be within 1e-4 of them in F32, and in Q8_0 no further
from them than llama.cpp is (1.5x), so a disagreement with llama.cpp is shown to be rounding
that both engines do, not an error of ours.

The exceptions (docs/models.md, "New architectures against llama.cpp"):
  - K-quant prefill: our batched products keep the activations in float where llama.cpp
    rounds them to 8 bits (Q8_K); near-tied top tokens of these random models then flip
    (decode rounds as llama.cpp does and matches it to 5e-4): >= 95%.
Exit status 0 on pass, 1 on fail.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "llamacpp_ref"))
sys.path.insert(0, HERE)
from make_refs import case_tokens, load_cases, make_model  # noqa: E402
from ref_forward import Model  # noqa: E402

DATA = os.path.join(HERE, "data", "llamacpp")
F32_REL = 1e-3
EXACT_REL = 1e-4


def min_argmax(case, weight_type, label):
    if weight_type.startswith("Q4_K") and label == "prefill":
        return 0.95
    return 0.98


def engine_logits(primekv, model, tokens, ctx, chunk, tmp):
    out = os.path.join(tmp, f"engine-{chunk}.f32")
    cmd = [primekv, "logits", "-m", model, "--tokens", ",".join(map(str, tokens)),
           "-c", str(ctx), "-o", out]
    if chunk:
        cmd += ["--chunk", str(chunk)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"engine failed (rc {proc.returncode}): {proc.stderr[-1500:]}")
    return np.fromfile(out, dtype="<f4").reshape(len(tokens), -1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--primekv", required=True)
    ap.add_argument("--case", required=True)
    ap.add_argument("--type", required=True)
    args = ap.parse_args(argv)
    spec = load_cases()
    case = next((c for c in spec["cases"] if c["name"] == args.case), None)
    if case is None:
        print(f"FAIL: no case {args.case!r} in cases.json")
        return 1
    name = f"{args.case}-{args.type}"
    with open(os.path.join(DATA, "manifest.json")) as f:
        entry = json.load(f)["files"].get(name)
    if entry is None:
        print(f"FAIL {name}: no llama.cpp logits in {DATA}")
        return 1
    ref = np.fromfile(os.path.join(DATA, name + ".logits"), dtype=entry["dtype"])
    ref = ref.astype(np.float64).reshape(entry["shape"])
    tokens = case_tokens(case)
    ok = True
    with tempfile.TemporaryDirectory(prefix="primekv_llamacpp_") as tmp:
        model = os.path.join(tmp, name + ".gguf")
        digest = make_model(args.primekv, case, args.type, model)
        if digest != entry["sha256"]:
            print(f"FAIL {name}: make-model now writes other bytes than llama.cpp ran on "
                  f"(sha256 {digest[:12]}, recorded {entry['sha256'][:12]}); rerun "
                  "tools/llamacpp_ref/make_refs.py with llama.cpp to renew the references")
            return 1
        max_ref = float(np.abs(ref).max())
        for label, chunk in (("prefill", 0), ("decode", 1)):
            try:
                ours = engine_logits(args.primekv, model, tokens, case["ctx"], chunk, tmp)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"FAIL {name} {label}: {e}")
                return 1
            rel = float(np.abs(ours - ref).max()) / max_ref
            agree = float(np.mean(ours.argmax(axis=1) == ref.argmax(axis=1)))
            if args.type == "F32":
                passed = rel <= F32_REL
                bound = f"max|diff|/max|logit| <= {F32_REL:g}"
            else:
                want = min_argmax(args.case, args.type, label)
                passed = agree >= want
                bound = f"argmax >= {want:.0%}"
            ok = ok and passed
            print(f"{'PASS' if passed else 'FAIL'} {name} {label}: n={len(tokens)} "
                  f"max|logit| {max_ref:.4g} max|diff|/max|logit| {rel:.3g} "
                  f"argmax {agree:.1%} ({bound})")
            if label == "prefill" and args.type in ("F32", "Q8_0"):
                ok = check_exact(name, args.type, model, case, tokens, ours, ref) and ok
    return 0 if ok else 1


def check_exact(name, weight_type, model, case, tokens, ours, ref):
    """The engine and llama.cpp against the float64 logits of the same file."""
    exact = Model(model, case["ctx"]).forward(tokens)
    scale = float(np.abs(exact).max())
    ours_rel = float(np.abs(ours - exact).max()) / scale
    theirs_rel = float(np.abs(ref - exact).max()) / scale
    bound = EXACT_REL if weight_type == "F32" else 1.5 * theirs_rel
    passed = ours_rel <= bound
    print(f"{'PASS' if passed else 'FAIL'} {name} exact: engine {ours_rel:.3g}, llama.cpp "
          f"{theirs_rel:.3g} of max|logit| from the float64 reference (engine <= {bound:.3g}); "
          f"argmax engine {np.mean(ours.argmax(1) == exact.argmax(1)):.1%}, llama.cpp "
          f"{np.mean(ref.argmax(1) == exact.argmax(1)):.1%}")
    return passed


if __name__ == "__main__":
    sys.exit(main())
