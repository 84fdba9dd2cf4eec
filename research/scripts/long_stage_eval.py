#!/usr/bin/python3
"""The long model's training-time evaluation (tools/train/train_long.py do_eval) on any GGUF of
retrieval-2's shape at a given RoPE base: teacher-forced exact match on 4 documents per family at
2,048 tokens, with plain positions and with the question block moved to span 16,384 positions.

    /usr/bin/python3 research/scripts/long_stage_eval.py --gguf models/primekv-retrieval-2.gguf --base 1e6 1.67e7

(research/results/long-cpu-stage1/README.md; the documents are the run's own, seed 2525.)"""
import argparse
import json
import os
import random
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_ROOT, "tools", "train"))
sys.path.insert(0, os.path.join(_ROOT, "tests", "reference"))
import torch  # noqa: E402

import data_long  # noqa: E402
import train_long as TL  # noqa: E402
from model import Llama, ModelConfig  # noqa: E402
from tokenizer import load_tokenizer  # noqa: E402
from train_ref2 import load_gguf_weights, teacher_forced_accuracy  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--base", type=float, nargs="+", default=[1e6])
    ap.add_argument("--families", nargs="+", default=["single", "multikey", "near_key", "vt"])
    ap.add_argument("--seed", type=int, default=2525)
    ap.add_argument("--span", type=int, default=16384)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tok = load_tokenizer(os.path.join(_ROOT, "models", "primekv-retrieval.gguf"))
    erng = random.Random("long-train-eval-%d" % args.seed)
    L = 2048
    ev = {f: [d for d in (data_long.eval_doc_long(tok, erng, f, L) for _ in range(4)) if d is not None]
          for f in args.families}
    dev = torch.device("cpu")
    for base in args.base:
        cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=384, n_layers=8, n_heads=4, n_kv_heads=2,
                          head_dim=128, ffn_dim=1024, context_length=32768, rope_base=base)
        m = Llama(cfg)
        load_gguf_weights(m, args.gguf)
        res, t0 = {}, time.time()
        for fam, docs in ev.items():
            res["%s@%d" % (fam, L)] = round(teacher_forced_accuracy(m, docs, dev, 8), 3)
            pos = [TL.far_positions(d, L, args.span) for d in docs]
            res["%s@far%d" % (fam, args.span)] = round(teacher_forced_accuracy(m, docs, dev, 8, pos), 3)
        print("%s base %.3g %s (%.0f s)" % (os.path.basename(args.gguf), base, json.dumps(res), time.time() - t0),
              flush=True)


if __name__ == "__main__":
    main()
