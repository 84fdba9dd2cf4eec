#!/usr/bin/python3
"""Compares the engine with logits that PyTorch computed for the project's trained model.

The fixture (written by tools/train/check_engine.py --fixture) holds a text, the ids the
training tokenizer gave it, and PyTorch's float32 logits at some positions. The engine encodes
the text itself (`primekv logits --text`), so a tokenizer mismatch fails on the token count
or the logits. Needs numpy only. Exit status 0 on pass, 1 on fail.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--primekv", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--rel-tol", type=float, default=1e-3)
    args = ap.parse_args(argv)

    fx = np.load(args.fixture)
    text, ids, pos, ref = str(fx["text"]), fx["ids"], fx["positions"], fx["logits"].astype(np.float64)
    with tempfile.TemporaryDirectory(prefix="primekv_torch_") as tmp:
        out = os.path.join(tmp, "logits.f32")
        cmd = [args.primekv, "logits", "-m", args.model, "--text", text, "-o", out]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            print(f"FAIL: engine exited {r.returncode}: {r.stderr[-2000:]}")
            return 1
        flat = np.fromfile(out, dtype="<f4")
    vocab = ref.shape[1]
    if flat.size != len(ids) * vocab:
        print(f"FAIL: engine wrote {flat.size} floats; the training tokenizer gives {len(ids)} tokens"
              f" x {vocab} = {len(ids) * vocab} (tokenizers disagree)")
        return 1
    eng = flat.reshape(len(ids), vocab)[pos].astype(np.float64)
    diff = np.abs(eng - ref)
    max_ref = float(np.abs(ref).max())
    ratio = float(diff.max()) / max_ref
    agree = float(np.mean(eng.argmax(1) == ref.argmax(1)))
    ok = bool(np.isfinite(eng).all()) and ratio < args.rel_tol
    print(f"{'PASS' if ok else 'FAIL'} {os.path.basename(args.model)}: {len(ids)} tokens, "
          f"{len(pos)} positions, max|torch|={max_ref:.4g} max diff={diff.max():.3e} "
          f"ratio={ratio:.3e} (tol {args.rel_tol:g}) argmax agreement={agree:.3f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
