#!/usr/bin/python3
"""Compare the C++ engine's logits on the exported GGUF with PyTorch's on the same text.

    /usr/bin/python3 tools/train/check_engine.py --name primekv-retrieval \
        --gguf models/primekv-retrieval.gguf --primekv build/release/src/cli/primekv \
        --fixture models/primekv-retrieval.torch-logits.npz

The text is an evaluation document of --length tokens from data.py. The engine encodes the
text itself (`primekv logits --text`), so the check covers the tokenizer as well: a different
token count fails at once. PyTorch runs in float32 on the Python tokenizer's ids. Passes when
max |engine - torch| < --rel-tol * max |torch| over every position.

--fixture also writes the text, the ids and PyTorch's logits at a few positions to an .npz
that tests/reference/check_torch_logits.py (numpy only, no PyTorch) compares in ctest.
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
if __name__ == "__main__":
    import runtime_env

    runtime_env.reexec()

import numpy as np  # noqa: E402
import torch  # noqa: E402

import data  # noqa: E402
from export import REPO, load_checkpoint  # noqa: E402


def engine_logits(primekv, gguf, text, vocab):
    with tempfile.TemporaryDirectory(prefix="primekv_check_") as tmp:
        out = os.path.join(tmp, "logits.f32")
        cmd = [primekv, "logits", "-m", gguf, "--text", text, "-o", out]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("engine failed (%d): %s" % (r.returncode, r.stderr[-2000:]))
        return np.fromfile(out, dtype="<f4").reshape(-1, vocab)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="primekv-retrieval")
    ap.add_argument("--gguf", default="models/primekv-retrieval.gguf")
    ap.add_argument("--primekv", default=os.path.join(REPO, "build/release/src/cli/primekv"))
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--family", default="multikey")
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--rel-tol", type=float, default=1e-3)
    ap.add_argument("--fixture", default=None, help="write an .npz for the numpy-only ctest")
    ap.add_argument("--fixture-positions", type=int, default=24)
    ap.add_argument("--ckpt", default=None, help="checkpoint file (default tools/train/ckpt/NAME/last.pt)")
    ap.add_argument("--tokenizer", default=None, help="tokenizer.json or GGUF (default tools/train/runs/NAME/)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    model, tok, _ = load_checkpoint(args.name, args.ckpt, args.tokenizer)
    rng = random.Random(args.seed)
    doc = data.make_eval_doc(tok, rng, args.family, min(args.length, model.cfg.context_length))
    ids = [i for i in doc.ids if i != 2]  # drop the end-of-text and padding tokens
    text = tok.decode(ids)
    if tok.encode(text) != ids:
        ids = tok.encode(text)  # decode/encode is not always a round trip at piece boundaries
    with torch.no_grad():
        ref = model(torch.tensor([ids]))[0].double().numpy()
    gguf = args.gguf if os.path.isabs(args.gguf) else os.path.join(REPO, args.gguf)
    eng = engine_logits(args.primekv, gguf, text, model.cfg.vocab_size)
    if eng.shape != ref.shape:
        sys.exit("FAIL: the engine encoded %d tokens, the Python tokenizer %d" % (eng.shape[0], ref.shape[0]))
    diff = np.abs(eng - ref)
    max_ref = float(np.abs(ref).max())
    ratio = float(diff.max()) / max_ref
    agree = float((eng.argmax(1) == ref.argmax(1)).mean())
    print("tokens %d  max|torch| %.4f  max|engine - torch| %.3e  ratio %.3e (tolerance %.0e)  argmax agreement %.4f"
          % (len(ids), max_ref, float(diff.max()), ratio, args.rel_tol, agree))
    if args.fixture:
        pos = np.unique(np.linspace(0, len(ids) - 1, args.fixture_positions).round().astype(np.int64))
        path = args.fixture if os.path.isabs(args.fixture) else os.path.join(REPO, args.fixture)
        np.savez_compressed(path, text=np.array(text), ids=np.array(ids, dtype=np.int32), positions=pos,
                            logits=ref[pos].astype(np.float32))
        print("fixture written: %s (%d positions)" % (path, len(pos)))
    if not ratio < args.rel_tol:
        print("FAIL")
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
