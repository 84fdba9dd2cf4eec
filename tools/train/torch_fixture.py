#!/usr/bin/python3
"""PyTorch's logits for a GGUF the training code wrote, on a long text, as a fixture the
numpy-only ctest (tests/reference/check_torch_logits.py) compares the engine with.

    /usr/bin/python3 tools/train/torch_fixture.py --gguf models/primekv-long.gguf \
        --length 9216 --after 8192 --out models/primekv-long.torch-logits-9k.npz

The weights are the GGUF's own (dequantised to float32 by tests/reference/gguf_read.py), so no
checkpoint is needed and the check covers positions the float export check never reached: the
text is a held-out multikey document of --length tokens (data_long.py, its own seed), and the
fixture keeps PyTorch's logits at --positions positions from --after on, plus four before it.
The shape comes from the file's metadata (llama architecture, as tools/train/export.py writes).
"""

import argparse
import os
import random
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "tests", "reference"))
if __name__ == "__main__":
    import runtime_env

    runtime_env.reexec()

import numpy as np  # noqa: E402
import torch  # noqa: E402

import data_long  # noqa: E402
from gguf_read import GGUFFile  # noqa: E402
from model import Llama, ModelConfig  # noqa: E402
from tokenizer import load_tokenizer  # noqa: E402
from train_ref2 import load_gguf_weights  # noqa: E402


def config_of(meta, vocab):
    a = meta["general.architecture"]
    heads = int(meta[a + ".attention.head_count"])
    d = int(meta[a + ".embedding_length"])
    return ModelConfig(vocab_size=vocab, d_model=d, n_layers=int(meta[a + ".block_count"]),
                       n_heads=heads, n_kv_heads=int(meta[a + ".attention.head_count_kv"]),
                       head_dim=int(meta.get(a + ".attention.key_length", d // heads)),
                       ffn_dim=int(meta[a + ".feed_forward_length"]),
                       context_length=int(meta[a + ".context_length"]),
                       rope_base=float(meta[a + ".rope.freq_base"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--tokenizer", default=os.path.join(_HERE, "..", "..", "models", "primekv-retrieval.gguf"))
    ap.add_argument("--length", type=int, default=9216)
    ap.add_argument("--after", type=int, default=8192)
    ap.add_argument("--positions", type=int, default=20)
    ap.add_argument("--seed", type=str, default="torch-fixture-9k")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    tok = load_tokenizer(args.tokenizer)
    cfg = config_of(GGUFFile(args.gguf).metadata, tok.vocab_size)
    model = Llama(cfg)
    load_gguf_weights(model, args.gguf)
    model.eval()
    sample = data_long.long_eval_sample(tok, random.Random(args.seed), "multikey", args.length)
    text = sample["context"]
    ids = tok.encode(text)
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0].double().numpy()
    late = np.linspace(args.after, len(ids) - 1, args.positions).round().astype(np.int64)
    pos = np.unique(np.concatenate([np.array([0, 1, args.after // 2, args.after - 1]), late]))
    np.savez_compressed(args.out, text=np.array(text), ids=np.array(ids, dtype=np.int32), positions=pos,
                        logits=logits[pos].astype(np.float32))
    print("%s: %d tokens, %d positions (%d from %d on)" % (args.out, len(ids), len(pos), len(late), args.after))


if __name__ == "__main__":
    main()
