"""Export a trained model as a PrimeKV manifest (manifest.json + tensors.bin) and convert it
to GGUF with `primekv convert --manifest DIR/manifest.json -o OUT.gguf [--type F32|F16]`.

Standalone use (after a run, from its checkpoint):
    /usr/bin/python3 tools/train/export.py --name primekv-retrieval --out models/primekv-retrieval.gguf
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(_HERE))


def tensor_list(model):
    """(gguf name, 2-D/1-D float32 array as PyTorch stores it) in file order."""
    cfg = model.cfg
    out = [("token_embd.weight", model.tok_emb.weight)]
    for i, b in enumerate(model.blocks):
        p = "blk.%d." % i
        out += [(p + "attn_norm.weight", b.attn_norm.weight), (p + "attn_q.weight", b.wq.weight),
                (p + "attn_k.weight", b.wk.weight), (p + "attn_v.weight", b.wv.weight),
                (p + "attn_output.weight", b.wo.weight), (p + "ffn_norm.weight", b.ffn_norm.weight),
                (p + "ffn_gate.weight", b.w_gate.weight), (p + "ffn_up.weight", b.w_up.weight),
                (p + "ffn_down.weight", b.w_down.weight)]
    out.append(("output_norm.weight", model.norm.weight))
    if not cfg.tied_output:
        out.append(("output.weight", model.output.weight))
    return [(n, t.detach().float().cpu().numpy()) for n, t in out]


def metadata(cfg, tok, name):
    def kv(k, t, v):
        return {"key": k, "type": t, "value": v}
    return [
        kv("general.architecture", "string", "llama"),
        kv("general.name", "string", name),
        kv("llama.context_length", "uint32", cfg.context_length),
        kv("llama.embedding_length", "uint32", cfg.d_model),
        kv("llama.block_count", "uint32", cfg.n_layers),
        kv("llama.feed_forward_length", "uint32", cfg.ffn_dim),
        kv("llama.attention.head_count", "uint32", cfg.n_heads),
        kv("llama.attention.head_count_kv", "uint32", cfg.n_kv_heads),
        kv("llama.attention.layer_norm_rms_epsilon", "float32", cfg.norm_eps),
        kv("llama.rope.freq_base", "float32", float(cfg.rope_base)),
        kv("llama.rope.dimension_count", "uint32", cfg.head_dim),
    ] + ([  # a head_dim other than d_model / heads must be stated (the second model: 4 x 128 on 384)
        kv("llama.attention.key_length", "uint32", cfg.head_dim),
        kv("llama.attention.value_length", "uint32", cfg.head_dim),
    ] if cfg.head_dim * cfg.n_heads != cfg.d_model else []) + [
        kv("llama.vocab_size", "uint32", tok.vocab_size),
        kv("tokenizer.ggml.model", "string", "llama"),
        kv("tokenizer.ggml.tokens", "array[string]", tok.tokens),
        kv("tokenizer.ggml.scores", "array[float32]", tok.scores),
        kv("tokenizer.ggml.token_type", "array[int32]", tok.types),
        kv("tokenizer.ggml.bos_token_id", "uint32", 1),
        kv("tokenizer.ggml.eos_token_id", "uint32", 2),
        kv("tokenizer.ggml.unknown_token_id", "uint32", 0),
        kv("tokenizer.ggml.add_bos_token", "bool", True),
        kv("tokenizer.ggml.add_space_prefix", "bool", True),
    ]


def write_manifest(model, tok, name, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    tensors = []
    off = 0
    with open(os.path.join(out_dir, "tensors.bin"), "wb") as f:
        for n, a in tensor_list(model):
            a = np.ascontiguousarray(a, dtype="<f4")
            # PyTorch (rows, cols) is GGUF ne = [cols, rows]: ne[0] is the contiguous axis.
            ne = list(reversed(a.shape))
            tensors.append({"name": n, "dtype": "F32", "ne": ne, "offset": off})
            f.write(a.tobytes())
            off += a.nbytes
            pad = (-off) % 32
            if pad:
                f.write(b"\0" * pad)
                off += pad
    man = {"metadata": metadata(model.cfg, tok, name), "tensors": tensors, "data": "tensors.bin"}
    path = os.path.join(out_dir, "manifest.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(man, f, ensure_ascii=False)
    return path


def export(model, tok, name, out_dir, gguf_out, primekv, gguf_type="F32", log=print):
    man = write_manifest(model, tok, name, out_dir)
    log("manifest written: %s" % man)
    if not primekv or not os.path.exists(primekv):
        log("primekv binary not found at %s; convert later with:\n  %s convert --manifest %s -o %s --type %s" % (
            primekv, primekv or "build/release/src/cli/primekv", man, gguf_out, gguf_type))
        return False
    cmd = [primekv, "convert", "--manifest", man, "-o", gguf_out, "--type", gguf_type]
    log("running: %s" % " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True)
    log(r.stdout + r.stderr)
    if r.returncode != 0:
        log("convert failed with exit status %d" % r.returncode)
        return False
    log("wrote %s (%.1f MB)" % (gguf_out, os.path.getsize(gguf_out) / 1e6))
    return True


def load_checkpoint(name, ckpt=None, tokenizer=None):
    """The run's checkpoint and tokenizer (tools/train/{ckpt,runs}/NAME/), or the given files
    (a tokenizer.json or a GGUF whose pieces are the tokenizer: tokenizer.load_tokenizer)."""
    import torch
    sys.path.insert(0, _HERE)
    from model import Llama, ModelConfig
    from tokenizer import Tokenizer, load_tokenizer
    ck = torch.load(ckpt or os.path.join(_HERE, "ckpt", name, "last.pt"), map_location="cpu")
    cfg = ModelConfig(**ck["state"]["config"])
    model = Llama(cfg)
    model.load_state_dict(ck["model"])
    model.eval()
    if tokenizer:
        tok = load_tokenizer(tokenizer)
    else:
        tok = Tokenizer.load(os.path.join(_HERE, "runs", name, "tokenizer.json"))
    return model, tok, ck["state"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="primekv-retrieval")
    ap.add_argument("--out", default="models/primekv-retrieval.gguf")
    ap.add_argument("--primekv", default=os.path.join(REPO, "build/release/src/cli/primekv"))
    ap.add_argument("--type", default="F32")
    ap.add_argument("--ckpt", default=None, help="checkpoint file (default tools/train/ckpt/NAME/last.pt)")
    ap.add_argument("--tokenizer", default=None, help="tokenizer.json or GGUF (default tools/train/runs/NAME/)")
    args = ap.parse_args()
    model, tok, _ = load_checkpoint(args.name, args.ckpt, args.tokenizer)
    out = args.out if os.path.isabs(args.out) else os.path.join(REPO, args.out)
    ok = export(model, tok, args.name, os.path.join(_HERE, "runs", args.name, "export"), out, args.primekv, args.type)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
