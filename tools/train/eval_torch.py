#!/usr/bin/python3
"""Reference evaluation of the trained model with PyTorch (float32, full KV cache).

Accuracy per task family (greedy decoding, RULER-style string_match_all: the fraction of
reference strings found case-insensitively in the prediction, and exact match):
    /usr/bin/python3 tools/train/eval_torch.py --name primekv-retrieval --lengths 1024 2048 --n 50

Logits for given token ids (or a text, encoded with BOS), for comparing the C++ engine:
    /usr/bin/python3 tools/train/eval_torch.py --name primekv-retrieval --logits-ids 1,450,300 --logits-out l.json
    /usr/bin/python3 tools/train/eval_torch.py --name primekv-retrieval --logits-text "Hello there" --logits-out l.json
The JSON holds "ids" and "logits" (one row of vocab_size floats per position); the engine
should match within max abs diff < 1e-3 * max |logit|.
"""

import argparse
import json
import os
import random
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
if __name__ == "__main__":
    import runtime_env

    runtime_env.reexec()

import torch  # noqa: E402

import data  # noqa: E402
from export import load_checkpoint  # noqa: E402
from tokenizer import EOS  # noqa: E402


@torch.no_grad()
def greedy(model, prompt_ids, max_new, stop_ids=(EOS,)):
    caches = [dict() for _ in model.blocks]
    x = torch.tensor([prompt_ids], dtype=torch.long)
    logits = model(x, caches=caches, start_pos=0, last_only=True)
    pos = len(prompt_ids)
    out = []
    for _ in range(max_new):
        t = int(logits[0, -1].argmax())
        if t in stop_ids:
            break
        out.append(t)
        logits = model(torch.tensor([[t]]), caches=caches, start_pos=pos)
        pos += 1
    return out


def score(pred, refs):
    p = pred.lower()
    return sum(r.lower() in p for r in refs) / len(refs)


def evaluate(model, tok, lengths, n, seed, families, log=print):
    res = {}
    for L in lengths:
        rng = random.Random(seed + L)
        for fam in families:
            t0 = time.time()
            s_all, em, cnt = 0.0, 0, 0
            examples = []
            for i in range(n):
                d = data.make_eval_doc(tok, rng, fam, L)
                if d is None:
                    continue
                for a in d.answers:
                    gold = d.ids[a["start"]:a["end"]]
                    out = greedy(model, d.ids[:a["start"]], len(gold) + 4)
                    pred = tok.decode([1] + out) if out else ""
                    s = score(pred, a["refs"])
                    s_all += s
                    em += int(out[:len(gold)] == gold)
                    cnt += 1
                    if len(examples) < 2:
                        examples.append({"pred": pred, "refs": a["refs"]})
            if cnt == 0:
                continue
            res["%s@%d" % (fam, L)] = {"string_match_all": round(100 * s_all / cnt, 2),
                                       "exact": round(100 * em / cnt, 2), "questions": cnt, "examples": examples}
            log("%-12s L=%-5d match %.1f  exact %.1f  (%d questions, %.0fs)" % (
                fam, L, 100 * s_all / cnt, 100 * em / cnt, cnt, time.time() - t0))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="primekv-retrieval")
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--n", type=int, default=30, help="documents per family and length")
    ap.add_argument("--seed", type=int, default=777)
    ap.add_argument("--families", nargs="+", default=data.EVAL_FAMILIES)
    ap.add_argument("--json", default=None, help="write results here")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--logits-ids", default=None, help="comma-separated token ids")
    ap.add_argument("--logits-text", default=None)
    ap.add_argument("--logits-out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok, state = load_checkpoint(args.name)

    if args.logits_ids is not None or args.logits_text is not None:
        ids = [int(t) for t in args.logits_ids.split(",")] if args.logits_ids else tok.encode(args.logits_text)
        with torch.no_grad():
            logits = model(torch.tensor([ids]))[0]
        outp = {"ids": ids, "logits": logits.tolist()}
        if args.logits_out:
            with open(args.logits_out, "w") as f:
                json.dump(outp, f)
        print("ids", ids)
        print("argmax", logits.argmax(-1).tolist())
        print("max |logit| %.4f" % float(logits.abs().max()))
        return

    L_max = model.cfg.context_length
    lengths = [L for L in args.lengths if L <= L_max]
    res = evaluate(model, tok, lengths, args.n, args.seed, args.families)
    summary = {"name": args.name, "step": state["step"], "tokens_seen": state["tokens"], "n": args.n,
               "seed": args.seed, "results": res}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    print(json.dumps({k: v["string_match_all"] for k, v in res.items()}))


if __name__ == "__main__":
    main()
