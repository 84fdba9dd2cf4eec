#!/usr/bin/python3
"""Why a press loses: per layer and KV head, the recall of the oracle's kept set, which token
kinds each press drops, and the gold answer's log-probability under the compressed cache.

    /usr/bin/python3 research/scripts/diagnose_presses.py \
        --tasks research/results/heldout-dev/single.jsonl \
        --samples 4 --ratios 0.75,0.9 --presses "primekv;keydiff"

Everything is computed by the independent numpy forward (tests/reference/ref_forward.py) and
the numpy press references (tests/reference/press_ref.py), not by the engine:
 * the context (BOS + text) is prefilled in full; its keys/values per layer are the cache;
 * the oracle (design.md §6) scores the context entries with the true future queries: those of
   every turn's question, answer prefix and gold answer;
 * each press keeps its entries per KV head; recall = |kept & oracle-kept| / |oracle-kept|;
 * token kinds: sink (BOS), asked value (tokens of a gold answer's occurrence in the context),
   asked key (tokens of the asked keys' occurrences), other fact (other digits), prose (rest);
 * answer log-prob: the first turn's question, prefix and gold answer are run against the
   compressed context cache (teacher forcing), as context-only compression does.
"""

import argparse
import json
import math
import os
import re
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))
sys.path.insert(0, os.path.join(_ROOT, "tests", "reference"))
sys.path.insert(0, os.path.join(_ROOT, "tools", "train"))
import press_ref as P  # noqa: E402
import ref_forward as R  # noqa: E402
from tokenizer import FIRST_PIECE, Tokenizer  # noqa: E402

KINDS = ("sink", "asked_value", "asked_key", "other_fact", "prose")


def tokenizer_of(model):
    meta = model.meta
    return Tokenizer(list(meta["tokenizer.ggml.tokens"][FIRST_PIECE:]),
                     list(meta["tokenizer.ggml.scores"][FIRST_PIECE:]))


def token_spans(tok, ids):
    """Character spans of each id in the decoded text ' ' + context (BOS has an empty span)."""
    spans, pos = [], 0
    for t in ids:
        s = tok.token_text(t)
        spans.append((pos, pos + len(s)))
        pos += len(s)
    return spans


def classify(tok, ctx_ids, context, turns):
    text = " " + context
    spans = token_spans(tok, ctx_ids)
    kind = np.full(len(ctx_ids), KINDS.index("prose"))
    mark = np.zeros(len(text), dtype=np.int64) + KINDS.index("prose")
    for m in re.finditer(r"[0-9][0-9a-f-]*", text):
        mark[m.start():m.end()] = KINDS.index("other_fact")
    for t in turns:
        for a in t["answers"]:
            for m in re.finditer(re.escape(a), text):
                mark[m.start():m.end()] = KINDS.index("asked_value")
        for key in re.findall(r"[a-z]+-[a-z]+", t["question"] + " " + t["answer_prefix"]):
            for m in re.finditer(re.escape(key), text):
                mark[m.start():m.end()] = KINDS.index("asked_key")
    for i, (a, b) in enumerate(spans):
        if b > a:
            kind[i] = min(mark[a:b])  # the most specific kind wins
    kind[0] = KINDS.index("sink")
    return kind


class Capture:
    def __init__(self):
        self.k, self.v, self.q = {}, {}, {}

    def __call__(self, layer, name, arr):
        getattr(self, name, {})[layer] = arr if name in ("k", "v", "q") else None


def prefill(model, ids):
    cap = {"k": {}, "v": {}, "q": {}}

    def tap(layer, name, arr):
        if name in cap:
            cap[name][layer] = arr

    model.forward(ids, tap=tap)
    return cap


def suffix_logprob(model, cap, n_ctx, kept, suffix, answer_from):
    """Mean log-prob of suffix[answer_from:] given the context cache restricted to `kept`
    (per layer, per KV head) and the suffix itself, causal."""
    cfg = model.cfg
    hd, hq, hkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    group = hq // hkv
    m = len(suffix)
    pos = n_ctx + np.arange(m)
    freqs = R.rope_frequencies(cfg, model.opt("rope_freqs.weight"))
    x = model.W("token_embd.weight")[np.asarray(suffix)]
    for L in range(cfg.n_layers):
        p = f"blk.{L}."
        h = R.rms_norm(x, model.W(p + "attn_norm.weight"), cfg.rms_eps)
        q = (h @ model.W(p + "attn_q.weight").T).reshape(m, hq, hd)
        k = (h @ model.W(p + "attn_k.weight").T).reshape(m, hkv, hd)
        v = (h @ model.W(p + "attn_v.weight").T).reshape(m, hkv, hd)
        q = R.apply_rope(q, pos, freqs, cfg.rope_dim, cfg.rope_neox)
        k = R.apply_rope(k, pos, freqs, cfg.rope_dim, cfg.rope_neox)
        out = np.zeros((m, hq, hd))
        for g in range(hq):
            kh = g // group
            rows = kept[L][kh] if kept is not None else np.arange(n_ctx)
            K = np.concatenate([cap["k"][L][:n_ctx, kh][rows], k[:, kh]], axis=0)
            V = np.concatenate([cap["v"][L][:n_ctx, kh][rows], v[:, kh]], axis=0)
            s = q[:, g] @ K.T / math.sqrt(hd)
            nr = len(rows)
            mask = np.zeros_like(s, dtype=bool)
            mask[:, nr:] = np.triu(np.ones((m, m), dtype=bool), k=1)
            s = np.where(mask, -np.inf, s)
            out[:, g] = R.softmax(s, axis=-1) @ V
        x = x + out.reshape(m, hq * hd) @ model.W(p + "attn_output.weight").T
        h = R.rms_norm(x, model.W(p + "ffn_norm.weight"), cfg.rms_eps)
        x = x + (R.silu(h @ model.W(p + "ffn_gate.weight").T) * (h @ model.W(p + "ffn_up.weight").T)) \
            @ model.W(p + "ffn_down.weight").T
    x = R.rms_norm(x, model.W("output_norm.weight"), cfg.rms_eps)
    out_w = model.W("token_embd.weight") if model.tied else model.W("output.weight")
    logits = x @ out_w.T
    lp = logits - logits.max(axis=1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(axis=1, keepdims=True))
    tgt = np.asarray(suffix[answer_from:])
    rows = np.arange(answer_from - 1, m - 1)
    return float(lp[rows, tgt].mean()), bool((logits[rows].argmax(axis=1) == tgt).all())


def layer_inputs(model, cap, n_ctx, future_rows):
    cfg = model.cfg
    out = []
    for L in range(cfg.n_layers):
        keys = np.transpose(cap["k"][L][:n_ctx], (1, 0, 2))
        values = np.transpose(cap["v"][L][:n_ctx], (1, 0, 2))
        fq = cap["q"][L][future_rows].reshape(len(future_rows), -1)
        out.append(P.Layer(keys, values, np.arange(n_ctx), cfg.n_heads,
                           wo=model.W(f"blk.{L}.attn_output.weight"), future_queries=fq,
                           layer=L, n_layers=cfg.n_layers))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(_ROOT, "models", "primekv-retrieval.gguf"))
    ap.add_argument("--tasks", required=True, help="comma-separated jsonl files")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--ratios", default="0.75,0.9")
    ap.add_argument("--presses", default="primekv;keydiff", help="press specs separated by ;")
    ap.add_argument("--json", help="write the per-sample records here")
    args = ap.parse_args()
    model = R.Model(args.model)
    tok = tokenizer_of(model)
    ratios = [float(r) for r in args.ratios.split(",")]
    presses = args.presses.split(";")
    n_layers, n_kv = model.cfg.n_layers, model.cfg.n_kv_heads
    # press -> ratio -> accumulators
    rec = {p: {r: {"recall": np.zeros((n_layers, n_kv)), "kept": np.zeros((n_layers, len(KINDS))),
                   "total": np.zeros((n_layers, len(KINDS))), "lp": [], "em": []}
               for r in ratios} for p in presses + ["oracle"]}
    full_lp, count = [], 0
    records = []
    for path in args.tasks.split(","):
        with open(path, encoding="utf-8") as f:
            lines = [json.loads(x) for x in f if x.strip()][:args.samples]
        for s in lines:
            ctx = tok.encode(s["context"] + "\n", bos=True)
            t0 = s["turns"][0]
            q_ids = tok.encode_segment("\n" + t0["question"] + "\n" + t0["answer_prefix"])
            a_ids = tok.encode_segment(" " + t0["answers"][0])
            n_ctx = len(ctx)
            suffix = q_ids + a_ids
            cap = prefill(model, ctx + suffix)
            future = np.arange(n_ctx, n_ctx + len(suffix))
            layers = layer_inputs(model, cap, n_ctx, future)
            kind = classify(tok, ctx, s["context"] + "\n", s["turns"])
            lp_full, _ = suffix_logprob(model, cap, n_ctx, None, suffix, len(q_ids))
            full_lp.append(lp_full)
            count += 1
            r_rec = {"id": s["id"], "n_ctx": n_ctx, "full_lp": lp_full}
            for r in ratios:
                oracle_kept = [P.select_uniform(P.oracle(layers[L]), r) for L in range(n_layers)]
                for p in presses + ["oracle"]:
                    kept = oracle_kept if p == "oracle" else \
                        [P.reference(p, layers[L], r)[1] for L in range(n_layers)]
                    acc = rec[p][r]
                    for L in range(n_layers):
                        for h in range(n_kv):
                            ks, os_ = set(np.asarray(kept[L][h]).tolist()), set(np.asarray(oracle_kept[L][h]).tolist())
                            acc["recall"][L, h] += len(ks & os_) / max(1, len(os_))
                            mask = np.zeros(n_ctx, dtype=bool)
                            mask[kept[L][h]] = True
                            for c in range(len(KINDS)):
                                acc["kept"][L, c] += np.sum(mask & (kind == c))
                                acc["total"][L, c] += np.sum(kind == c)
                    lp, em = suffix_logprob(model, cap, n_ctx, kept, suffix, len(q_ids))
                    acc["lp"].append(lp)
                    acc["em"].append(em)
                    r_rec[f"{p}@{r}"] = lp
            records.append(r_rec)
            print(json.dumps(r_rec), flush=True)
    print(f"\n{count} samples; full-cache answer log-prob {np.mean(full_lp):.3f}")
    for r in ratios:
        print(f"\n## ratio {r}\n")
        print("| press | answer log-prob | teacher-forced exact | oracle recall per layer (mean of heads) |"
              + "".join(f" kept {k} (L0..L{n_layers - 1}) |" for k in KINDS))
        for p in presses + ["oracle"]:
            acc = rec[p][r]
            rc = acc["recall"] / max(1, count)
            frac = acc["kept"] / np.maximum(1, acc["total"])
            print(f"| {p} | {np.mean(acc['lp']):.3f} | {np.mean(acc['em']):.2f} | "
                  + " ".join(f"{x:.2f}" for x in rc.mean(axis=1)) + " |"
                  + "".join(" " + " ".join(f"{x:.2f}" for x in frac[:, c]) + " |" for c in range(len(KINDS))))
        print("\nper head recall:", {p: np.round(rec[p][r]["recall"] / max(1, count), 2).tolist() for p in presses})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f)


if __name__ == "__main__":
    main()
