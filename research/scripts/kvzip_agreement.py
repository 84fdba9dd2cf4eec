#!/usr/bin/python3
"""How well does each query-free key score predict the attention KVzip measures?

PrimeKV's key side estimates, without a forward pass, the log-attention an entry can get from a
query that singles it out (docs/design.md §2). KVzip (research/notes/results-history.md §6.12) measures such an attention:
the largest probability an entry gets from the queries of a pass that repeats the context, each
of which must find the token it copies. This script computes both by the independent numpy
forward (tests/reference/ref_forward.py, tests/reference/press_ref.py) and reports, per layer,
the rank agreement of each estimate with KVzip's score:

 * Spearman correlation over a KV head's entries (the first 4, KVzip's sinks, left out), mean
   over heads and samples;
 * recall at 0.75: the share of KVzip's kept quarter that the estimate's kept quarter holds.

    /usr/bin/python3 research/scripts/kvzip_agreement.py --model models/primekv-retrieval.gguf \\
        --tasks research/results/heldout-dev/single.jsonl,research/results/heldout-dev/vt.jsonl \\
        --samples 3

Contexts are cut to --tokens tokens (default 960), so that context and repeat are as long as
the engine's KVzip runs them inside a 2048-token window. A diagnosis, not a selection: nothing
here is used to choose a default.
"""

import argparse
import json
import math
import os
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_ROOT, "tests", "reference"))
import diagnose_presses as D  # noqa: E402
import press_ref as P  # noqa: E402
import ref_forward as R  # noqa: E402

PROMPT = "\n\nRepeat the previous context exactly.\n"
SINKS = 4
ESTIMATES = ("centerednext", "next", "centered", "self", "keydiff", "primekv (default)")


def kvzip_scores(q, k, n, group):
    """[H, n]: each context entry's largest probability over the repeat's queries (rows n..)
    and the query heads of its group, causal over the whole sequence."""
    total, hq, d = q.shape
    hkv = k.shape[1]
    out = np.zeros((hkv, n))
    rows = np.arange(n, total)
    mask = np.arange(total)[None, :] > rows[:, None]
    for g in range(hq):
        h = g // group
        s = q[n:, g] @ k[:, h].T / math.sqrt(d)
        s = np.where(mask, -np.inf, s)
        s = s - s.max(axis=1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=1, keepdims=True)
        out[h] = np.maximum(out[h], p[:, :n].max(axis=0))
    out[:, :SINKS] = 1.0
    return out


def spearman(a, b):
    ra, rb = P.ranks(a), P.ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / den) if den > 0 else 0.0


def estimates(model, layer_idx, k, v, n):
    cfg = model.cfg
    layer = P.Layer(np.transpose(k[:n], (1, 0, 2)), np.transpose(v[:n], (1, 0, 2)), np.arange(n),
                    cfg.n_heads, wo=model.W(f"blk.{layer_idx}.attn_output.weight"),
                    layer=layer_idx, n_layers=cfg.n_layers, next_position=n,
                    rope_base=cfg.rope_base, rope_half=cfg.rope_neox)
    out = {}
    for key in ("centerednext", "next", "centered", "self"):
        out[key] = P.primekv(layer, key=key, value="none")
    out["keydiff"] = P.keydiff(layer)
    out["primekv (default)"] = P.primekv(layer)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(_ROOT, "models", "primekv-retrieval.gguf"))
    ap.add_argument("--tasks", required=True, help="comma-separated jsonl files")
    ap.add_argument("--samples", type=int, default=3, help="per task file")
    ap.add_argument("--tokens", type=int, default=960)
    args = ap.parse_args()
    model = R.Model(args.model)
    cfg = model.cfg
    if cfg.rope_scaling not in ("none", "") or model.opt("rope_freqs.weight") is not None:
        sys.exit("kvzip_agreement.py: models with RoPE scaling are not supported")
    tok = D.tokenizer_of(model)
    group = cfg.n_heads // cfg.n_kv_heads
    rho = {e: np.zeros(cfg.n_layers) for e in ESTIMATES}
    recall = {e: np.zeros(cfg.n_layers) for e in ESTIMATES}
    count = 0
    for path in args.tasks.split(","):
        with open(path, encoding="utf-8") as f:
            samples = [json.loads(x) for x in f if x.strip()][:args.samples]
        for s in samples:
            ctx = tok.encode(s["context"] + "\n", bos=True)[:args.tokens]
            n = len(ctx)
            cap = D.prefill(model, ctx + tok.encode_segment(PROMPT) + ctx)
            keep = P.keep_count(n, 0.75)
            for L in range(cfg.n_layers):
                q, k, v = cap["q"][L], cap["k"][L], cap["v"][L]
                truth = kvzip_scores(q, k, n, group)
                for e, x in estimates(model, L, k, v, n).items():
                    for h in range(cfg.n_kv_heads):
                        rho[e][L] += spearman(x[h, SINKS:], truth[h, SINKS:]) / cfg.n_kv_heads
                        kz = set(P.select_topk(truth[h], keep))
                        ks = set(P.select_topk(x[h], keep))
                        recall[e][L] += len(kz & ks) / len(kz) / cfg.n_kv_heads
            count += 1
            print(f"{s['id']}: {n} tokens", file=sys.stderr, flush=True)
    layers = " | ".join(f"L{L}" for L in range(cfg.n_layers))
    print(f"\n{os.path.basename(args.model)}, {count} contexts of at most {args.tokens} tokens\n")
    print(f"| estimate | Spearman with KVzip: {layers} | mean | recall of KVzip's kept quarter: "
          f"{layers} | mean |")
    print("|---" * (2 * cfg.n_layers + 3) + "|")
    for e in ESTIMATES:
        r, c = rho[e] / count, recall[e] / count
        print(f"| {e} | " + " | ".join(f"{x:+.2f}" for x in r) + f" | {r.mean():+.2f} | "
              + " | ".join(f"{x:.2f}" for x in c) + f" | {c.mean():.2f} |")


if __name__ == "__main__":
    main()
