"""PrimeKV as a kvpress press: drop `PrimeKVPress` where a kvpress `ScorerPress` goes.

kvpress (NVIDIA's KV-cache compression library for Hugging Face transformers) asks a scorer
press for `score(module, hidden_states, keys, values, attentions, kwargs)`, one score per cached
entry of shape (batch, kv_heads, tokens), and keeps the top-scored entries in `compress`. This
class computes PrimeKV's score in the PrimeKV engine (the `primekv` Python module, C++ inside)
from the layer's keys, values and W_O (module.o_proj.weight); it needs no attention weights and
no queries, so it works with flash attention and during chunked prefill.

    import primekv_press
    press = primekv_press.PrimeKVPress(compression_ratio=0.75)
    # with kvpress installed: pipe(context, question=question, press=press)

Keys are expected after RoPE, as kvpress passes them; the RoPE base and layout come from the
module's config (rope_theta; Hugging Face Llama/Qwen order, pairs (i, i + d/2)).
"""
from dataclasses import dataclass, field

import torch

import primekv


@dataclass
class PrimeKVPress:
    """PrimeKV's attention-score-free scorer (docs/design.md) behind kvpress's interface."""

    compression_ratio: float = 0.0
    spec: str = "primekv"  # a press spec of the engine, e.g. "primekv" or "keydiff"
    params: dict = field(default_factory=dict)

    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        del hidden_states, attentions, kwargs  # PrimeKV reads neither attention nor queries
        config = module.config
        n = keys.shape[2]
        scores = primekv.score(
            self.spec, keys, values,
            wo=module.o_proj.weight,
            next_position=n,
            rope_base=float(getattr(config, "rope_theta", 10000.0)),
            rope_half=True,
            layer=int(getattr(module, "layer_idx", 0)),
            n_layers=int(getattr(config, "num_hidden_layers", 1)),
            **self.params)
        return torch.from_numpy(scores).to(keys.device)

    def compress(self, module, hidden_states, keys, values, attentions, kwargs):
        """kvpress's ScorerPress.compress: keep the top (1 - ratio) of each head's entries."""
        if self.compression_ratio == 0:
            return keys, values
        scores = self.score(module, hidden_states, keys, values, attentions, kwargs)
        n_kept = int(keys.shape[2] * (1 - self.compression_ratio))
        indices = scores.topk(n_kept, dim=-1).indices
        indices = indices.unsqueeze(-1).expand(-1, -1, -1, keys.shape[-1])
        return keys.gather(2, indices).contiguous(), values.gather(2, indices).contiguous()
