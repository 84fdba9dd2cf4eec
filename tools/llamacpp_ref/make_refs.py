#!/usr/bin/python3
"""Writes llama.cpp's logits for the architecture cases of cases.json.

For each case and weight type: `primekv make-model` writes the model (random weights, fixed
seed), llama.cpp (arch_logits, built by build.sh against a llama.cpp checkout outside this tree)
computes every position's logits for the case's tokens at the case's context size, and the
result goes to OUT/<case>-<type>.logits (float32 for F32 weights, float16 for quantised ones)
with the model file's sha256 in OUT/manifest.json. tests/reference/check_llamacpp.py checks the
engine against them; it remakes each model and refuses to compare when the bytes differ.

  /usr/bin/python3 tools/llamacpp_ref/make_refs.py --primekv build/release/src/cli/primekv \\
      --arch-logits /tmp/arch_logits --out tests/reference/data/llamacpp
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def case_tokens(case, vocab=512):
    """The case's token ids: seeded, avoiding the first three (special) ids."""
    rng = np.random.default_rng(int(case["args"][case["args"].index("--seed") + 1]))
    return [int(t) for t in rng.integers(3, vocab, size=case["tokens"])]


def make_model(primekv, case, weight_type, path):
    subprocess.run([primekv, "make-model", *case["args"], "--type", weight_type, "-o", path],
                   check=True, capture_output=True)
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load_cases():
    with open(os.path.join(HERE, "cases.json")) as f:
        return json.load(f)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--primekv", required=True)
    ap.add_argument("--arch-logits", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    spec = load_cases()
    manifest = {"llama_cpp_commit": spec["llama_cpp_commit"], "files": {}}
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llamacpp_ref_") as tmp:
        for case in spec["cases"]:
            tokens = case_tokens(case)
            for weight_type in spec["types"]:
                name = f"{case['name']}-{weight_type}"
                model = os.path.join(tmp, name + ".gguf")
                digest = make_model(args.primekv, case, weight_type, model)
                raw = os.path.join(tmp, name + ".f32")
                subprocess.run([args.arch_logits, model, ",".join(map(str, tokens)),
                                str(case["ctx"]), raw], check=True, capture_output=True)
                logits = np.fromfile(raw, dtype="<f4").reshape(len(tokens), -1)
                dtype = "<f4" if weight_type == "F32" else "<f2"
                logits.astype(dtype).tofile(os.path.join(args.out, name + ".logits"))
                manifest["files"][name] = {"sha256": digest, "dtype": dtype,
                                           "shape": list(logits.shape)}
                print(f"{name}: {logits.shape[0]} x {logits.shape[1]}, "
                      f"max|logit| {np.abs(logits).max():.4g}")
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
