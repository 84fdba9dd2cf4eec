#!/usr/bin/python3
"""Compares the C++ engine's all-position logits with the numpy reference forward pass.

Runs `PRIMEKV logits -m MODEL --tokens a,b,c -o OUT.f32` (raw little-endian float32,
[n_tokens, vocab], row-major) on seeded random token ids and checks
max |engine - reference| <= rel_tol * max |reference|. Exit status 0 on pass, 1 on fail.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_forward import Model  # noqa: E402


def random_tokens(model, n, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, model.cfg.vocab_size, size=n).tolist()
    bos = model.bos_id
    if bos is not None and 0 <= int(bos) < model.cfg.vocab_size:
        ids[0] = int(bos)
    return ids


def run_engine(primekv, model_path, tokens, timeout_s, chunk=0, ctx=0):
    with tempfile.TemporaryDirectory(prefix="primekv_logits_") as tmp:
        out = os.path.join(tmp, "logits.f32")
        cmd = [primekv, "logits", "-m", model_path, "--tokens", ",".join(map(str, tokens)),
               "-o", out]
        if chunk:
            cmd += ["--chunk", str(chunk)]
        if ctx:
            cmd += ["-c", str(ctx)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"engine failed (rc {proc.returncode}): {' '.join(cmd[:4])} ...\n"
                               f"stdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}")
        if not os.path.exists(out):
            raise RuntimeError("engine wrote no output file")
        return np.fromfile(out, dtype="<f4")


def compare(engine, ref, rel_tol):
    """Returns (ok, summary dict). engine, ref: [n, vocab]."""
    diff = np.abs(engine.astype(np.float64) - ref)
    max_ref = float(np.abs(ref).max())
    tol = rel_tol * max_ref
    row_diff = diff.max(axis=1)
    bad_rows = np.nonzero(~(row_diff <= tol))[0]  # NaN counts as bad
    max_diff = float(np.nanmax(diff)) if np.isfinite(diff).any() else float("inf")
    if not np.isfinite(engine).all():
        max_diff = float("inf")
    info = {
        "max_diff": max_diff,
        "max_ref": max_ref,
        "ratio": max_diff / max_ref if max_ref > 0 else float("inf"),
        "tol": tol,
        "first_bad_pos": int(bad_rows[0]) if bad_rows.size else -1,
        "n_bad_pos": int(bad_rows.size),
        "argmax_agree": float(np.mean(np.argmax(engine, axis=1) == np.argmax(ref, axis=1))),
        "row_diff": row_diff,
    }
    return bad_rows.size == 0 and np.isfinite(engine).all(), info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--primekv", required=True, help="path to the primekv CLI binary")
    ap.add_argument("--model", required=True)
    ap.add_argument("--n-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rel-tol", type=float, default=1e-3)
    ap.add_argument("--timeout", type=float, default=300.0, help="engine timeout in seconds")
    ap.add_argument("--chunk", type=int, default=0,
                    help="engine prefills in chunks of this many tokens (1 = token by token)")
    ap.add_argument("--ctx", type=int, default=0,
                    help="the context the model runs at (picks Phi-3's LongRoPE factors)")
    args = ap.parse_args(argv)

    name = os.path.basename(args.model)
    model = Model(args.model, args.ctx)
    tokens = random_tokens(model, args.n_tokens, args.seed)
    ref = model.forward(tokens)
    try:
        flat = run_engine(args.primekv, args.model, tokens, args.timeout, args.chunk, args.ctx)
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
        print(f"FAIL {name}: {e}")
        return 1
    if flat.size != ref.size:
        print(f"FAIL {name}: engine wrote {flat.size} floats, want {ref.shape[0]}x{ref.shape[1]}"
              f" = {ref.size}")
        return 1
    engine = flat.reshape(ref.shape)
    ok, info = compare(engine, ref, args.rel_tol)
    print(f"{'PASS' if ok else 'FAIL'} {name} arch={model.cfg.arch} n={len(tokens)} "
          f"vocab={ref.shape[1]} max_diff={info['max_diff']:.3e} "
          f"max|logit|={info['max_ref']:.4g} ratio={info['ratio']:.3e} (tol {args.rel_tol:g}) "
          f"argmax_agree={info['argmax_agree']:.3f}")
    if not ok:
        p = info["first_bad_pos"]
        np.set_printoptions(precision=5, suppress=True, linewidth=120)
        print(f"  {info['n_bad_pos']} positions exceed tol {info['tol']:.3e}; first at pos {p} "
              f"(token {tokens[p]}), row max diff {info['row_diff'][p]:.3e}")
        print(f"  per-position max diff (first 16): {info['row_diff'][:16]}")
        print(f"  engine[{p}][:8] = {engine[p, :8]}")
        print(f"  ref[{p}][:8]    = {ref[p, :8]}")
        print(f"  tokens: {','.join(map(str, tokens))}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
