#!/usr/bin/python3
"""Independent float64 numpy forward pass for Llama-family GGUF models (llama, qwen2, qwen3,
qwen3moe, granite, phi3, gemma, gemma2).

It is the oracle for the C++ engine's logits, so it is written to read like the maths rather
than to be fast: every position is recomputed from scratch with a full causal mask.

Usage: ref_forward.py --model M.gguf --tokens 1,2,3 [--out logits.npy]
"""

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_read import GGUFFile  # noqa: E402

# Architectures whose RoPE rotates (x[i], x[i + rope_dim/2]) instead of (x[2i], x[2i+1]).
NEOX_ROPE_ARCHS = {"qwen2", "qwen3", "qwen3moe", "phi3", "gemma", "gemma2"}
SUPPORTED_ARCHS = {"llama", "qwen2", "qwen3", "qwen3moe", "granite", "phi3", "gemma", "gemma2"}
# Architectures whose FFN is a routed mixture of experts.
MOE_ARCHS = {"qwen3moe"}


class Config:
    """Hyper-parameters read from the `<arch>.*` GGUF keys, with the usual defaults."""

    def __init__(self, meta, vocab_size, context=0):
        self.arch = meta["general.architecture"]
        if self.arch not in SUPPORTED_ARCHS:
            raise ValueError(f"unsupported architecture {self.arch!r}")
        a = self.arch

        def get(key, default=None):
            full = f"{a}.{key}"
            if full in meta:
                return meta[full]
            if default is None:
                raise KeyError(f"missing required key {full}")
            return default

        self.n_layers = int(get("block_count"))
        self.d_model = int(get("embedding_length"))
        self.d_ff = int(get("feed_forward_length"))
        self.n_heads = int(get("attention.head_count"))
        self.n_kv_heads = int(get("attention.head_count_kv", self.n_heads))
        self.head_dim = int(get("attention.key_length", self.d_model // self.n_heads))
        self.rms_eps = float(get("attention.layer_norm_rms_epsilon", 1e-5))
        self.rope_base = float(get("rope.freq_base", 10000.0))
        self.rope_dim = int(get("rope.dimension_count", self.head_dim))
        self.rope_neox = a in NEOX_ROPE_ARCHS
        self.rope_scaling = str(get("rope.scaling.type", "none"))
        self.rope_scaling_factor = float(get("rope.scaling.factor", 1.0))
        self.rope_low_freq_factor = float(get("rope.scaling.low_freq_factor", 1.0))
        self.rope_high_freq_factor = float(get("rope.scaling.high_freq_factor", 4.0))
        self.rope_orig_ctx = float(get("rope.scaling.original_context_length", 8192))
        self.vocab_size = vocab_size
        self.n_experts = 0
        if a in MOE_ARCHS:
            self.n_experts = int(get("expert_count"))
            self.n_experts_used = int(get("expert_used_count"))
            if not 1 <= self.n_experts_used <= self.n_experts:
                raise ValueError("expert_used_count must be in [1, expert_count]")
        self.max_context = int(get("context_length", 2048))
        # Granite's multipliers; gemma's embedding scale sqrt(d_model) and GELU (tanh form).
        self.embedding_scale = float(get("embedding_scale", 1.0))
        self.residual_scale = float(get("residual_scale", 1.0))
        self.attention_scale = float(get("attention.scale", 1.0 / math.sqrt(self.head_dim)))
        self.logit_scale = float(get("logit_scale", 1.0))
        self.gelu = a in ("gemma", "gemma2")
        if self.gelu:
            self.embedding_scale = math.sqrt(self.d_model)
        self.attn_softcap = 0.0
        self.final_softcap = 0.0
        self.sliding_window = 0
        self.swa_layers = lambda layer: False
        if a == "gemma2":
            self.attn_softcap = float(get("attn_logit_softcapping", 50.0))
            self.final_softcap = float(get("final_logit_softcapping", 30.0))
            self.sliding_window = int(get("attention.sliding_window", 4096))
            self.swa_layers = lambda layer: layer % 2 == 0
            # Gemma 2 27B (46 layers) scales queries by 1/sqrt(d_model / n_heads).
            scalar = self.d_model // self.n_heads if self.n_layers == 46 else self.head_dim
            self.attention_scale = 1.0 / math.sqrt(scalar)
        # Phi-3: a window on every layer; LongRoPE's long factors when the context run exceeds
        # the original one, and its attention factor on the rotated dimensions.
        self.rope_attn_factor = 1.0
        self.long_rope_ctx = 0
        if a == "phi3":
            self.sliding_window = int(get("attention.sliding_window", 0))
            self.swa_layers = lambda layer: True
            self.rope_attn_factor = float(get("rope.scaling.attn_factor", 1.0))
            self.long_rope_ctx = int(get("rope.scaling.original_context_length", self.max_context))
        self.context = context if context > 0 else self.max_context
        if self.n_heads % self.n_kv_heads:
            raise ValueError("head_count must be a multiple of head_count_kv")
        if self.rope_dim % 2 or self.rope_dim > self.head_dim:
            raise ValueError(f"bad rope dimension {self.rope_dim}")


def llama3_freq_divisors(cfg, freqs):
    """Per-pair divisors of the llama3 ("rope_freqs") scaling rule, computed from the keys.

    Long wavelengths are slowed by `factor`, short ones are untouched, and the band between
    is interpolated linearly in 1/wavelength.
    """
    factor = cfg.rope_scaling_factor
    lo, hi = cfg.rope_low_freq_factor, cfg.rope_high_freq_factor
    wavelen = 2.0 * math.pi / freqs
    low_wavelen = cfg.rope_orig_ctx / lo
    high_wavelen = cfg.rope_orig_ctx / hi
    out = np.ones_like(freqs)
    for i, (f, w) in enumerate(zip(freqs, wavelen)):
        if w < high_wavelen:
            new = f
        elif w > low_wavelen:
            new = f / factor
        else:
            t = (cfg.rope_orig_ctx / w - lo) / (hi - lo)
            new = (1.0 - t) * f / factor + t * f
        out[i] = f / new
    return out


def rope_frequencies(cfg, rope_freqs=None):
    """theta_i = base^(-2i/rope_dim) for each of the rope_dim/2 pairs, after any scaling."""
    i = np.arange(cfg.rope_dim // 2, dtype=np.float64)
    freqs = cfg.rope_base ** (-2.0 * i / cfg.rope_dim)
    if rope_freqs is not None:
        # The file carries the per-pair divisors explicitly (llama3-style scaling).
        rope_freqs = np.asarray(rope_freqs, dtype=np.float64).reshape(-1)
        if rope_freqs.size != freqs.size:
            raise ValueError(f"rope_freqs has {rope_freqs.size} entries, want {freqs.size}")
        return freqs / rope_freqs
    if cfg.rope_scaling == "linear" and cfg.rope_scaling_factor > 0:
        return freqs / cfg.rope_scaling_factor
    if cfg.rope_scaling == "llama3":
        return freqs / llama3_freq_divisors(cfg, freqs)
    if cfg.rope_scaling not in ("none", "", "linear"):
        raise ValueError(f"unsupported rope scaling {cfg.rope_scaling!r}")
    return freqs


def apply_rope(x, positions, freqs, rope_dim, neox, mscale=1.0):
    """Rotates the first rope_dim dims of each head. x: [n_tokens, n_heads, head_dim].

    mscale multiplies the rotated dims (LongRoPE's attention factor)."""
    x = x.copy()
    half = rope_dim // 2
    angle = np.outer(np.asarray(positions, dtype=np.float64), freqs)  # [n_tokens, half]
    cos = mscale * np.cos(angle)[:, None, :]
    sin = mscale * np.sin(angle)[:, None, :]
    if neox:
        a_idx = np.arange(half)
        b_idx = a_idx + half
    else:
        a_idx = 2 * np.arange(half)
        b_idx = a_idx + 1
    a = x[:, :, a_idx]
    b = x[:, :, b_idx]
    x[:, :, a_idx] = a * cos - b * sin
    x[:, :, b_idx] = a * sin + b * cos
    return x


def rms_norm(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) * weight over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def causal_attention(q, k, v, n_heads, n_kv_heads, scale=None, softcap=0.0, window=0):
    """q: [n, n_heads, d], k/v: [n, n_kv_heads, d] -> ([n, n_heads, d], probs [n_heads, n, n]).

    scores = scale q.k (default 1/sqrt(d)), then softcap * tanh(scores / softcap) when softcap > 0;
    with a window, query i sees keys j with i - window < j <= i."""
    n, _, d = q.shape
    group = n_heads // n_kv_heads
    kv_of_head = np.arange(n_heads) // group
    kh = k[:, kv_of_head, :]  # [n, n_heads, d]
    vh = v[:, kv_of_head, :]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    scores = np.einsum("qhd,khd->hqk", q, kh) * scale
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    mask = np.triu(np.ones((n, n), dtype=bool), k=1)  # key after query
    if window > 0:
        mask |= np.tril(np.ones((n, n), dtype=bool), k=-window)  # key left the window
    scores = np.where(mask[None, :, :], -np.inf, scores)
    probs = softmax(scores, axis=-1)
    out = np.einsum("hqk,khd->qhd", probs, vh)
    return out, probs


def route(router_logits, k):
    """Qwen3-MoE routing of one token: (experts, weights).

    p = softmax(logits) over all experts; the k largest p are kept (equal p: lower expert index
    first) and renormalised to sum 1 (norm_topk_prob = true).
    """
    p = softmax(np.asarray(router_logits, dtype=np.float64))
    order = np.argsort(-p, kind="stable")  # stable: ties keep increasing index order
    chosen = order[:k]
    w = p[chosen]
    return chosen, w / np.sum(w)


def moe_ffn(h, router, gate_exps, up_exps, down_exps, k):
    """sum over the routed experts e of w_e * down_e(silu(gate_e h) * up_e h), per token.

    h: [n, d_model]; router: [n_experts, d_model]; gate_exps/up_exps: [n_experts, d_ff, d_model];
    down_exps: [n_experts, d_model, d_ff].
    """
    out = np.zeros_like(h)
    logits = h @ router.T
    for t in range(h.shape[0]):
        experts, weights = route(logits[t], k)
        for e, w in zip(experts, weights):
            act = silu(gate_exps[e] @ h[t]) * (up_exps[e] @ h[t])
            out[t] += w * (down_exps[e] @ act)
    return out


class Model:
    def __init__(self, path, context=0):
        self.file = GGUFFile(path)
        self.meta = self.file.metadata
        self._cache = {}
        vocab = self.W("token_embd.weight").shape[0]
        self.cfg = Config(self.meta, vocab, context)
        self.tied = not self.file.has("output.weight")

    def W(self, name):
        if name not in self._cache:
            self._cache[name] = self.file.tensor(name)
        return self._cache[name]

    def opt(self, name):
        return self.W(name) if self.file.has(name) else None

    @property
    def bos_id(self):
        return self.meta.get("tokenizer.ggml.bos_token_id")

    def forward(self, tokens, tap=None):
        """Logits [n_tokens, vocab] for every position of `tokens` (positions 0..n-1).

        `tap(layer, name, array)`, when given, sees intermediate values for debugging.
        """
        cfg = self.cfg
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or tokens.size == 0:
            raise ValueError("need a non-empty 1-D token list")
        if tokens.min() < 0 or tokens.max() >= cfg.vocab_size:
            raise ValueError("token id out of range")
        n = tokens.size
        positions = np.arange(n)
        factors = self.opt("rope_freqs.weight")
        if self.file.has("rope_factors_long.weight"):
            use_long = cfg.context > cfg.long_rope_ctx
            factors = self.W("rope_factors_long.weight" if use_long else "rope_factors_short.weight")
            factors = np.asarray(factors).reshape(-1)[: cfg.rope_dim // 2]
        freqs = rope_frequencies(cfg, factors)
        hd = cfg.head_dim
        x = self.W("token_embd.weight")[tokens] * cfg.embedding_scale  # [n, d_model]
        qw, kw = cfg.n_heads * hd, cfg.n_kv_heads * hd
        for L in range(cfg.n_layers):
            p = f"blk.{L}."
            h = rms_norm(x, self.W(p + "attn_norm.weight"), cfg.rms_eps)
            if self.file.has(p + "attn_qkv.weight"):
                qkv = h @ self.W(p + "attn_qkv.weight").T
                q, k, v = qkv[:, :qw], qkv[:, qw:qw + kw], qkv[:, qw + kw:]
            else:
                q = h @ self.W(p + "attn_q.weight").T
                k = h @ self.W(p + "attn_k.weight").T
                v = h @ self.W(p + "attn_v.weight").T
            for name, t in (("attn_q.bias", "q"), ("attn_k.bias", "k"), ("attn_v.bias", "v")):
                b = self.opt(p + name)
                if b is not None:
                    if t == "q":
                        q = q + b
                    elif t == "k":
                        k = k + b
                    else:
                        v = v + b
            q = q.reshape(n, cfg.n_heads, hd)
            k = k.reshape(n, cfg.n_kv_heads, hd)
            v = v.reshape(n, cfg.n_kv_heads, hd)
            qn = self.opt(p + "attn_q_norm.weight")
            kn = self.opt(p + "attn_k_norm.weight")
            if qn is not None:
                q = rms_norm(q, qn, cfg.rms_eps)
            if kn is not None:
                k = rms_norm(k, kn, cfg.rms_eps)
            q = apply_rope(q, positions, freqs, cfg.rope_dim, cfg.rope_neox, cfg.rope_attn_factor)
            k = apply_rope(k, positions, freqs, cfg.rope_dim, cfg.rope_neox, cfg.rope_attn_factor)
            if tap:
                tap(L, "k", k)
                tap(L, "v", v)
                tap(L, "q", q)
            window = cfg.sliding_window if cfg.swa_layers(L) else 0
            attn, _ = causal_attention(q, k, v, cfg.n_heads, cfg.n_kv_heads, cfg.attention_scale,
                                       cfg.attn_softcap, window)
            attn = attn.reshape(n, cfg.n_heads * hd)
            out = attn @ self.W(p + "attn_output.weight").T
            post = self.opt(p + "post_attention_norm.weight")
            if post is not None:
                out = rms_norm(out, post, cfg.rms_eps)
            x = x + cfg.residual_scale * out
            h = rms_norm(x, self.W(p + "ffn_norm.weight"), cfg.rms_eps)
            if cfg.n_experts:
                x = x + moe_ffn(h, self.W(p + "ffn_gate_inp.weight"),
                                self.W(p + "ffn_gate_exps.weight"),
                                self.W(p + "ffn_up_exps.weight"),
                                self.W(p + "ffn_down_exps.weight"), cfg.n_experts_used)
            else:
                if self.file.has(p + "ffn_gate.weight"):
                    gate = h @ self.W(p + "ffn_gate.weight").T
                    up = h @ self.W(p + "ffn_up.weight").T
                else:  # phi3: ffn_up holds the gate, then the up projection
                    gate_up = h @ self.W(p + "ffn_up.weight").T
                    gate, up = gate_up[:, :cfg.d_ff], gate_up[:, cfg.d_ff:]
                act = gelu_tanh(gate) if cfg.gelu else silu(gate)
                out = (act * up) @ self.W(p + "ffn_down.weight").T
                post = self.opt(p + "post_ffw_norm.weight")
                if post is not None:
                    out = rms_norm(out, post, cfg.rms_eps)
                x = x + cfg.residual_scale * out
            if tap:
                tap(L, "x", x)
        x = rms_norm(x, self.W("output_norm.weight"), cfg.rms_eps)
        out_w = self.W("token_embd.weight") if self.tied else self.W("output.weight")
        logits = (x @ out_w.T) / cfg.logit_scale
        if cfg.final_softcap > 0:
            logits = cfg.final_softcap * np.tanh(logits / cfg.final_softcap)
        return logits


def decode_tokens(meta, ids):
    """Eyeball-quality detokenisation from tokenizer.ggml.tokens (SentencePiece style)."""
    vocab = meta["tokenizer.ggml.tokens"]
    out = bytearray()
    for i in ids:
        piece = vocab[i]
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            out.append(int(piece[3:5], 16))
        elif piece in ("<s>", "</s>", "<unk>"):
            continue
        else:
            out.extend(piece.replace("\u2581", " ").encode("utf-8"))
    return out.decode("utf-8", errors="replace")


def greedy(model, prompt, n_new):
    """Greedy continuation: ids of the n_new tokens that follow `prompt`."""
    ids = list(prompt)
    for _ in range(n_new):
        logits = model.forward(ids)
        ids.append(int(np.argmax(logits[-1])))
    return ids[len(prompt):]


def parse_tokens(text):
    return [int(t) for t in text.replace(" ", "").split(",") if t]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--out", help="save logits [n_tokens, vocab] as .npy")
    ap.add_argument("--greedy", type=int, default=0,
                    help="instead, print this many greedily decoded ids and their text")
    args = ap.parse_args(argv)
    model = Model(args.model)
    tokens = parse_tokens(args.tokens)
    if args.greedy:
        ids = greedy(model, tokens, args.greedy)
        print(",".join(map(str, ids)))
        if "tokenizer.ggml.tokens" in model.meta:
            print(repr(decode_tokens(model.meta, tokens + ids)))
        return 0
    logits = model.forward(tokens)
    if args.out:
        np.save(args.out, logits)
    np.set_printoptions(precision=5, suppress=True, linewidth=120)
    print(f"logits shape {logits.shape}, max |logit| {np.abs(logits).max():.6g}")
    for i, row in enumerate(logits):
        print(f"pos {i}: argmax {int(np.argmax(row))} first {row[:6]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
