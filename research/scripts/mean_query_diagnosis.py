#!/usr/bin/python3
"""Which query-free estimate predicts where real future queries attend? (research/notes/results-history.md §6.14)

For dev contexts, the independent numpy forward (tests/reference/ref_forward.py) runs the
context and the 64 tokens that follow it. Per layer and KV head it compares, by Spearman
correlation over the head's entries, the log of the mean attention those 64 future queries
give each cached entry with:

 * `true common`: qbar . d_j, the mean future query's logit on entry j (d_j = k_j - kbar).
   Every future query adds this to entry j's logit, so it is the typical query's share of the
   attention; it is computed from the real queries and is a diagnosis, not a press;
 * `recovered common`: the same term with PrimeKV key=typical's mean query, recovered from the
   cached keys and values through W_q [W_k; W_v]^+ (press_ref.mean_content_query) and asked at
   the next position;
 * `centerednext` (the default's key side) and `typical` (centerednext + recovered common);

and prints the mean cosine between the mean future query and the mean key, and the typical
query's norm relative to the spread of the queries around it. With --future-from question the
future queries are those of the sample's first question, answer prefix and answer (as
research/scripts/diagnose_presses.py forms them) instead of the text that follows the context.
Nothing is chosen here.

    /usr/bin/python3 research/scripts/mean_query_diagnosis.py --model models/primekv-retrieval.gguf
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

FAMILIES = ("single", "multikey", "vt", "drift", "multiquery", "multiturn")
ROWS = ("cos(mean future query, mean key)", "|mean query| / rms spread",
        "true common", "recovered common", "centerednext", "typical")


def spearman(a, b):
    ra, rb = P.ranks(a), P.ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / den) if den > 0 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(_ROOT, "models", "primekv-retrieval.gguf"))
    ap.add_argument("--split", default="dev", help="research/results/heldout-SPLIT")
    ap.add_argument("--samples", type=int, default=2, help="per family")
    ap.add_argument("--tokens", type=int, default=1024, help="context tokens")
    ap.add_argument("--future", type=int, default=64, help="future tokens")
    ap.add_argument("--future-from", choices=("text", "question"), default="text")
    args = ap.parse_args()
    model = R.Model(args.model)
    cfg = model.cfg
    if cfg.rope_scaling not in ("none", "") or model.opt("rope_freqs.weight") is not None:
        sys.exit("mean_query_diagnosis.py: models with RoPE scaling are not supported")
    tok = D.tokenizer_of(model)
    hd, group, n, f = cfg.head_dim, cfg.n_heads // cfg.n_kv_heads, args.tokens, args.future
    acc = {r: np.zeros(cfg.n_layers) for r in ROWS}
    count = 0
    for fam in FAMILIES:
        path = os.path.join(_ROOT, "research", "results", f"heldout-{args.split}", f"{fam}.jsonl")
        with open(path, encoding="utf-8") as fh:
            samples = [json.loads(x) for x in fh if x.strip()][:args.samples]
        for s in samples:
            if args.future_from == "question":
                t0 = s["turns"][0]
                ids = tok.encode(s["context"] + "\n", bos=True)
                ids = ids[:n] + tok.encode_segment("\n" + t0["question"] + "\n" +
                                                   t0["answer_prefix"]) + \
                    tok.encode_segment(" " + t0["answers"][0])
                f = len(ids) - n
            else:
                ids = tok.encode(s["context"], bos=True)[:n + f]
            if len(ids) < n + f or f < 1:
                continue
            cap = D.prefill(model, ids)
            count += 1
            for L in range(cfg.n_layers):
                q, k, v = cap["q"][L], cap["k"][L], cap["v"][L]
                layer = P.Layer(np.transpose(k[:n], (1, 0, 2)), np.transpose(v[:n], (1, 0, 2)),
                                np.arange(n), cfg.n_heads, layer=L, n_layers=cfg.n_layers,
                                next_position=n, rope_base=cfg.rope_base, rope_half=cfg.rope_neox,
                                wq=model.W(f"blk.{L}.attn_q.weight"),
                                wk=model.W(f"blk.{L}.attn_k.weight"),
                                wv=model.W(f"blk.{L}.attn_v.weight"))
                rope = (layer.positions, n, cfg.rope_base, cfg.rope_neox)
                w = 1.0 / cfg.n_kv_heads
                for h in range(cfg.n_kv_heads):
                    K, V = layer.keys[h], layer.values[h]
                    dev = K - K.mean(axis=0)
                    fq = q[n:n + f, h * group:(h + 1) * group].reshape(-1, hd)
                    z = fq @ K.T / math.sqrt(hd)
                    p = np.exp(z - z.max(axis=1, keepdims=True))
                    p /= p.sum(axis=1, keepdims=True)
                    log_a = np.log(p.mean(axis=0) + 1e-30)
                    qbar = fq.mean(axis=0)
                    spread = math.sqrt(((fq - qbar) ** 2).sum(axis=1).mean())
                    u = P.mean_content_query(K, V, layer.positions, cfg.rope_base, cfg.rope_neox,
                                             layer.projections(h))
                    q0 = P.rope_rotations(hd, cfg.rope_base, np.array([float(n)]),
                                          cfg.rope_neox)[0] @ u
                    cn = P.primekv_set_scores(K, V, None, "centerednext", "none", "logit", rope)
                    common = dev @ q0 / math.sqrt(hd)
                    kbar = K.mean(axis=0)
                    acc[ROWS[0]][L] += w * float(qbar @ kbar / np.linalg.norm(qbar) /
                                                 np.linalg.norm(kbar))
                    acc[ROWS[1]][L] += w * float(np.linalg.norm(qbar) / spread)
                    acc[ROWS[2]][L] += w * spearman(dev @ qbar, log_a)
                    acc[ROWS[3]][L] += w * spearman(common, log_a)
                    acc[ROWS[4]][L] += w * spearman(cn, log_a)
                    acc[ROWS[5]][L] += w * spearman(cn + common, log_a)
            print(f"{s['id']}: {n} + {f} tokens", file=sys.stderr, flush=True)
    if count == 0:
        sys.exit("mean_query_diagnosis.py: no context is long enough")
    layers = " | ".join(f"L{L}" for L in range(cfg.n_layers))
    what = "the question's tokens" if args.future_from == "question" else f"{f} future tokens"
    print(f"\n{os.path.basename(args.model)}, {count} contexts of {n} tokens, {what}\n")
    print(f"| quantity | {layers} | mean |")
    print("|---" * (cfg.n_layers + 2) + "|")
    for r in ROWS:
        x = acc[r] / count
        print(f"| {r} | " + " | ".join(f"{v:+.2f}" for v in x) + f" | {x.mean():+.2f} |")


if __name__ == "__main__":
    main()
