#!/usr/bin/python3
"""Checks the torch model against a naive per-head implementation of the Llama layer as the
engine computes it (adjacent-pair RoPE, GQA h -> h // group), and the KV-cache path against
the full pass.  Run: /usr/bin/python3 tools/train/test_model.py"""

import math
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Llama, ModelConfig  # noqa: E402


def naive_forward(m, ids):
    cfg = m.cfg
    T = len(ids)
    x = m.tok_emb.weight[ids].double()

    def rms(v, w):
        return v / torch.sqrt((v * v).mean(-1, keepdim=True) + cfg.norm_eps) * w.double()

    def rope(v, p):  # v: (hd,)
        out = v.clone()
        for i in range(cfg.head_dim // 2):
            th = p * cfg.rope_base ** (-2.0 * i / cfg.head_dim)
            a, b = v[2 * i], v[2 * i + 1]
            out[2 * i] = a * math.cos(th) - b * math.sin(th)
            out[2 * i + 1] = a * math.sin(th) + b * math.cos(th)
        return out

    hd = cfg.head_dim
    for blk in m.blocks:
        h = rms(x, blk.attn_norm.weight)
        q = h @ blk.wq.weight.double().T
        k = h @ blk.wk.weight.double().T
        v = h @ blk.wv.weight.double().T
        att = torch.zeros(T, cfg.n_heads * hd, dtype=torch.float64)
        for hq in range(cfg.n_heads):
            hk = hq // cfg.group
            for t in range(T):
                qt = rope(q[t, hq * hd:(hq + 1) * hd], t)
                s = torch.stack([qt @ rope(k[j, hk * hd:(hk + 1) * hd], j) for j in range(t + 1)]) / math.sqrt(hd)
                a = torch.softmax(s, 0)
                att[t, hq * hd:(hq + 1) * hd] = a @ v[:t + 1, hk * hd:(hk + 1) * hd]
        x = x + att @ blk.wo.weight.double().T
        h = rms(x, blk.ffn_norm.weight)
        g = h @ blk.w_gate.weight.double().T
        u = h @ blk.w_up.weight.double().T
        x = x + (torch.nn.functional.silu(g) * u) @ blk.w_down.weight.double().T
    x = rms(x, m.norm.weight)
    return x @ m.output_weight().double().T


class ModelTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.cfg = ModelConfig(vocab_size=50, d_model=128, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96,
                               context_length=64, rope_base=10000.0)
        self.m = Llama(self.cfg).eval()
        with torch.no_grad():  # larger weights so that attention is far from uniform
            for p in self.m.parameters():
                p.mul_(4.0 if p.dim() == 2 else 1.0).add_(0.1 * torch.randn_like(p) if p.dim() == 1 else 0)

    def test_matches_naive(self):
        ids = torch.randint(0, 50, (12,))
        with torch.no_grad():
            got = self.m(ids[None])[0].double()
        want = naive_forward(self.m, ids)
        err = (got - want).abs().max().item()
        self.assertLess(err, 1e-4 * want.abs().max().item())

    def test_cache_matches_full(self):
        ids = torch.randint(0, 50, (1, 20))
        with torch.no_grad():
            full = self.m(ids)
            caches = [dict() for _ in self.m.blocks]
            a = self.m(ids[:, :13], caches=caches)
            steps = [self.m(ids[:, t:t + 1], caches=caches, start_pos=t) for t in range(13, 20)]
        inc = torch.cat([a] + steps, dim=1)
        self.assertLess((inc - full).abs().max().item(), 1e-4)

    def test_hidden_matches_forward(self):
        ids = torch.randint(0, 50, (2, 16))
        with torch.no_grad():
            a = self.m(ids)
            b = torch.nn.functional.linear(self.m.hidden(ids), self.m.output_weight())
        self.assertLess((a - b).abs().max().item(), 1e-5)



class InductionInitTest(unittest.TestCase):
    def test_copies_repeated_random_tokens_at_init(self):
        """The initialised circuit copies: in a repeated random segment the next token is
        predicted far above chance (1/2000) before any training."""
        from model import init_induction_circuit
        torch.manual_seed(0)
        cfg = ModelConfig(vocab_size=2002, d_model=256, n_layers=4, n_heads=4, n_kv_heads=2, ffn_dim=512,
                          context_length=256, rope_base=1e6)
        m = Llama(cfg).eval()
        init_induction_circuit(m)
        hits = total = 0
        for _ in range(4):
            x = torch.randint(2, 2002, (1, 128))
            x[0, 80:110] = x[0, 10:40]
            with torch.no_grad():
                pred = m(x)[0].argmax(-1)
            hits += int((pred[80:109] == x[0, 81:110]).sum())
            total += 29
        self.assertGreater(hits / total, 0.25)


if __name__ == "__main__":
    unittest.main(verbosity=2)
