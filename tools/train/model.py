"""Llama-architecture model matching what the PrimeKV engine loads (GGUF arch "llama").

Per layer: RMSNorm -> q,k,v (no bias) -> RoPE on adjacent pairs (x[2i], x[2i+1]) ->
causal softmax attention (scale 1/sqrt(head_dim), GQA: query head h reads kv head
h // group) -> output projection -> residual; RMSNorm -> SwiGLU -> residual.
Final RMSNorm and an output matrix (tied to the embedding or separate).
"""

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn


@dataclasses.dataclass
class ModelConfig:
    vocab_size: int = 2048
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 64
    ffn_dim: int = 768
    context_length: int = 2048
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    tied_output: bool = False

    @property
    def group(self) -> int:
        return self.n_heads // self.n_kv_heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


def rope_tables(cfg: ModelConfig, positions: torch.Tensor):
    """cos/sin of shape (T, head_dim/2) for integer positions."""
    half = cfg.head_dim // 2
    inv_freq = cfg.rope_base ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / cfg.head_dim)
    ang = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):
    """x: (B, H, T, D); rotates adjacent pairs (x[2i], x[2i+1])."""
    xf = x.float()
    x0 = xf[..., 0::2]
    x1 = xf[..., 1::2]
    r0 = x0 * cos - x1 * sin
    r1 = x0 * sin + x1 * cos
    return torch.stack((r0, r1), dim=-1).flatten(-2).to(x.dtype)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.d_model, cfg.head_dim
        self.attn_norm = RMSNorm(d, cfg.norm_eps)
        self.wq = nn.Linear(d, cfg.n_heads * hd, bias=False)
        self.wk = nn.Linear(d, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(d, cfg.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, cfg.norm_eps)
        self.w_gate = nn.Linear(d, cfg.ffn_dim, bias=False)
        self.w_up = nn.Linear(d, cfg.ffn_dim, bias=False)
        self.w_down = nn.Linear(cfg.ffn_dim, d, bias=False)

    def attention(self, x, cos, sin, mask, cache):
        cfg = self.cfg
        B, T, _ = x.shape
        hkv, g, hd = cfg.n_kv_heads, cfg.group, cfg.head_dim
        q = self.wq(x).view(B, T, cfg.n_heads, hd).transpose(1, 2)
        k = self.wk(x).view(B, T, hkv, hd).transpose(1, 2)
        v = self.wv(x).view(B, T, hkv, hd).transpose(1, 2)
        q = apply_rope(q, cos, sin) * (1.0 / math.sqrt(hd))
        k = apply_rope(k, cos, sin)
        if cache is not None:
            if "k" in cache:
                k = torch.cat((cache["k"], k), dim=2)
                v = torch.cat((cache["v"], v), dim=2)
            cache["k"], cache["v"] = k, v
        S = k.shape[2]
        if mask is None and cache is None and T > 1 and x.is_cuda:
            # Training on a GPU: the fused causal kernel (q is already scaled; query head h reads
            # kv head h // group, as repeat_interleave lays them out).
            kr = k.repeat_interleave(g, dim=1).to(q.dtype)
            vr = v.repeat_interleave(g, dim=1).to(q.dtype)
            out = F.scaled_dot_product_attention(q, kr, vr, is_causal=True, scale=1.0)
            return self.wo(out.transpose(1, 2).reshape(B, T, cfg.n_heads * hd))
        if isinstance(mask, CausalBlocks):
            return self.wo(self._attention_blocks(q, k, v, mask))
        # Stack the g query heads of each kv head along the row axis so one bmm serves
        # the whole group without materialising repeated keys/values.
        qg = q.reshape(B * hkv, g * T, hd)
        kf = k.reshape(B * hkv, S, hd)
        vf = v.reshape(B * hkv, S, hd).to(qg.dtype)
        if mask is None:
            scores = torch.bmm(qg, kf.transpose(1, 2).to(qg.dtype))
        else:
            scores = torch.baddbmm(mask.to(qg.dtype), qg, kf.transpose(1, 2).to(qg.dtype))
        probs = torch.softmax(scores.float(), dim=-1).to(vf.dtype)
        out = torch.bmm(probs, vf)  # (B*hkv, g*T, hd)
        out = out.view(B, cfg.n_heads, T, hd).transpose(1, 2).reshape(B, T, cfg.n_heads * hd)
        return self.wo(out)

    def _attention_blocks(self, q, k, v, blocks):
        """Causal attention of a whole sequence, a block of queries at a time: block [a, b)
        reads keys [0, b), unmasked before a and through the (g*C, C) causal mask on the
        diagonal, so the masked upper triangle is never computed (about half the work of the
        dense (T x T) scores at long T) and no (T x T) mask exists."""
        cfg = self.cfg
        B, _, T, hd = q.shape
        hkv, g = cfg.n_kv_heads, cfg.group
        kf = k.reshape(B * hkv, T, hd)
        vf = v.reshape(B * hkv, T, hd)
        outs = []
        for a in range(0, T, blocks.size):
            b = min(T, a + blocks.size)
            C = b - a
            qg = q[:, :, a:b].reshape(B * hkv, g * C, hd)
            kt = kf[:, :b].transpose(1, 2).to(qg.dtype)
            diag = blocks.diagonal(C, q.device).to(qg.dtype)
            near = torch.baddbmm(diag, qg, kt[:, :, a:])
            scores = near if a == 0 else torch.cat((torch.bmm(qg, kt[:, :, :a]), near), dim=-1)
            probs = torch.softmax(scores.float(), dim=-1).to(qg.dtype)
            outs.append(torch.bmm(probs, vf[:, :b].to(qg.dtype)).view(B, cfg.n_heads, C, hd))
        out = torch.cat(outs, dim=2)
        return out.transpose(1, 2).reshape(B, T, cfg.n_heads * hd)

    def forward(self, x, cos, sin, mask, cache=None):
        x = x + self.attention(self.attn_norm(x), cos, sin, mask, cache)
        h = self.ffn_norm(x)
        x = x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))
        return x


class CausalBlocks:
    """The CPU training path's causal mask for a long sequence: query blocks of `size`, whose
    diagonal blocks all take the model's own (g*C, C) causal mask (Llama.causal_mask(C, C))."""

    def __init__(self, size: int, causal_mask):
        self.size = size
        self.diagonal = lambda C, device: causal_mask(C, C, device)

    @staticmethod
    def size_for(T: int) -> int:
        return max(256, T // 16)


def checkpointed(blk, x, cos, sin, mask):
    """blk(x, ...) whose activations are recomputed in the backward pass.  The recomputation
    re-enters the forward's CPU autocast state explicitly: torch 1.13's checkpoint restores
    only the CUDA one."""
    from torch.utils.checkpoint import checkpoint
    cpu_bf16 = torch.is_autocast_cpu_enabled()

    def run(x_):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cpu_bf16):
            return blk(x_, cos, sin, mask)
    return checkpoint(run, x, use_reentrant=False)


class Llama(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = None if cfg.tied_output else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self._mask_cache = {}
        self.reset_parameters()

    def reset_parameters(self):
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                s = std
                if name.endswith("wo.weight") or name.endswith("w_down.weight"):
                    s = std / math.sqrt(2 * self.cfg.n_layers)
                nn.init.normal_(p, mean=0.0, std=s)

    def output_weight(self):
        return self.tok_emb.weight if self.output is None else self.output.weight

    def causal_mask(self, T, S, device):
        """Additive mask (g*T, S) for T new queries at the end of S positions."""
        key = (T, S)
        m = self._mask_cache.get(key)
        if m is None:
            qpos = torch.arange(S - T, S)[:, None]
            kpos = torch.arange(S)[None, :]
            m = torch.zeros(T, S)
            m.masked_fill_(kpos > qpos, float("-inf"))
            m = m.repeat(self.cfg.group, 1).to(device)
            if len(self._mask_cache) > 8:
                self._mask_cache.clear()
            self._mask_cache[key] = m
        return m

    def hidden(self, ids, positions=None, recompute_from=0):
        """Final-normed hidden states (B, T, d) for a full causal pass (training).  positions
        (B, T), increasing along each row, replaces 0..T-1: PoSE's skipped position ids, so a
        short window sees the relative distances of a longer context.  recompute_from > 0: rows
        of at least that many tokens keep only each block's input for the backward pass and run
        the block again there (activation checkpointing), because the CPU path materialises
        (T x T) scores: 8 layers of them at 8K tokens would hold about 16 GB."""
        T = ids.shape[1]
        if positions is None:
            cos, sin = rope_tables(self.cfg, torch.arange(T))
        else:
            B = ids.shape[0]
            cos, sin = rope_tables(self.cfg, positions.reshape(-1).cpu())
            cos, sin = cos.view(B, 1, T, -1), sin.view(B, 1, T, -1)
        cos, sin = cos.to(ids.device), sin.to(ids.device)
        # On a GPU the blocks use the fused causal kernel (mask None); on the CPU an additive
        # mask, or query blocks that skip the masked triangle once T is long enough to matter.
        if ids.is_cuda:
            mask = None
        elif T > 2 * CausalBlocks.size_for(T):
            mask = CausalBlocks(CausalBlocks.size_for(T), self.causal_mask)
        else:
            mask = self.causal_mask(T, T, ids.device)
        x = self.tok_emb(ids)
        recompute = 0 < recompute_from <= T and torch.is_grad_enabled()
        for blk in self.blocks:
            x = checkpointed(blk, x, cos, sin, mask) if recompute else blk(x, cos, sin, mask)
        return self.norm(x)

    def forward(self, ids, caches=None, start_pos=0, last_only=False):
        """ids (B, T) -> logits (B, T, V) in float32. With caches (list of dicts per layer)
        the new keys/values are appended and attention covers all cached positions."""
        B, T = ids.shape
        pos = torch.arange(start_pos, start_pos + T)
        cos, sin = rope_tables(self.cfg, pos)
        S = start_pos + T
        mask = self.causal_mask(T, S, ids.device) if T > 1 else None
        x = self.tok_emb(ids)
        for i, blk in enumerate(self.blocks):
            x = blk(x, cos, sin, mask, None if caches is None else caches[i])
        if last_only:
            x = x[:, -1:]
        x = self.norm(x)
        return F.linear(x, self.output_weight().to(x.dtype)).float()

    def num_params(self):
        return sum(p.numel() for p in self.parameters())



def _orthonormal(d, k, g, avoid=None):
    """(d, k) orthonormal columns, orthogonal to the columns of avoid."""
    a = torch.randn(d, k, generator=g, dtype=torch.float64)
    if avoid is not None:
        a = a - avoid @ (avoid.T @ a)
    q, _ = torch.linalg.qr(a)
    return q


@torch.no_grad()
def init_induction_circuit(model: Llama, prev_strength: float = 2.0, prev_pairs: int = 16, match_scale: float = 6.0,
                           copy_gain: float = 16.0, prev_gain: float = 4.0, slow_dims: int = 26, seed: int = 0):
    """Initialise one induction circuit (layer 0: previous-token head; layer 1: a head that
    finds earlier occurrences of the current token and copies the token that followed).

    Small models learn in-context copying only after a long plateau: an induction head needs
    a previous-token head below it, a query/key match and a copying value/output map, and no
    part lowers the loss alone.  This is an initialisation only; every weight is trained.

    - Every token embedding gets a shared component c, so the normed residual has a nearly
      constant projection on c.  The layer-0 head's query and key read only that projection;
      on RoPE pair i the query is sqrt(w)(1, 0) and the key sqrt(w)(cos th_i, sin th_i), so
      the score is proportional to sum_i w cos(th_i (t - s - 1)): largest at t - s = 1.  Its
      value/output maps write the previous token's projection P^T x onto an unused subspace Q.
    - The layer-1 head's query reads P^T x of the current token and its key reads Q^T x (the
      previous token's projection), both on the slowest RoPE pairs, where rotation over the
      context is small; its value/output maps copy the attended token (U U^T), and the output
      matrix starts equal to the embedding, so attending to a token raises its logit."""
    cfg = model.cfg
    g = torch.Generator().manual_seed(seed)
    d, hd = cfg.d_model, cfg.head_dim
    emb = model.tok_emb.weight
    # shared component
    c = torch.randn(d, 1, generator=g, dtype=torch.float64)
    c = c / c.norm()
    e_norm = emb.norm(dim=1).mean().item()
    P = _orthonormal(d, hd, g, avoid=c)
    Q = _orthonormal(d, hd, g, avoid=torch.cat([c, P], 1))
    U = _orthonormal(d, hd, g, avoid=torch.cat([c, Q], 1))
    if model.output is not None:
        model.output.weight.copy_(emb)
    emb.add_((c[:, 0] * e_norm).float())
    theta = cfg.rope_base ** (-torch.arange(hd // 2, dtype=torch.float64) * 2.0 / hd)
    # x_hat . c is about sqrt(d) / sqrt(2) after RMSNorm (|e| = |c| and e is nearly orthogonal to c)
    cproj = (d / 2) ** 0.5
    # layer 0, query head 0 / kv head 0: previous-token head
    b0 = model.blocks[0]
    w = torch.zeros(hd // 2, dtype=torch.float64)
    w[:prev_pairs] = prev_strength
    qv = torch.zeros(hd, dtype=torch.float64)
    kv = torch.zeros(hd, dtype=torch.float64)
    qv[0::2] = w.sqrt()
    kv[0::2] = w.sqrt() * torch.cos(theta)
    kv[1::2] = w.sqrt() * torch.sin(theta)
    sc = (hd ** 0.5) ** 0.5 / cproj
    b0.wq.weight[0:hd] = (qv[:, None] * c.T * sc).float()
    b0.wk.weight[0:hd] = (kv[:, None] * c.T * sc).float()
    b0.wv.weight[0:hd] = P.T.float()
    b0.wo.weight[:, 0:hd] = (Q * prev_gain * e_norm / (d ** 0.5)).float()
    if cfg.group > 1:  # the other query heads of kv head 0 would also write P^T x onto Q
        b0.wo.weight[:, hd:cfg.group * hd] *= 0.0
    # layer 1, query head 0 / kv head 0: induction head on the slowest pairs
    b1 = model.blocks[1]
    slow = list(range(hd - slow_dims, hd))  # dims of the slowest pairs
    wq = torch.zeros(hd, d, dtype=torch.float64)
    wk = torch.zeros(hd, d, dtype=torch.float64)
    wq[slow] = P[:, :slow_dims].T
    wk[slow] = Q[:, :slow_dims].T
    b1.wq.weight[0:hd] = (wq * match_scale).float()
    b1.wk.weight[0:hd] = (wk * match_scale).float()
    b1.wv.weight[0:hd] = U.T.float()
    b1.wo.weight[:, 0:hd] = (U * copy_gain * e_norm / (d ** 0.5)).float()
    if cfg.group > 1:
        b1.wo.weight[:, hd:cfg.group * hd] *= 0.0

