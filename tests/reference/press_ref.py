#!/usr/bin/python3
"""float64 numpy reference for the KV-cache compression scorers and budgets.

Written from the written specification (design.md section 2 and 3, methods.md section 2 and the
test brief), not from the C++ engine. Every scorer takes a `Layer` and returns scores [H, n]
(higher = keep); selection and budgets return the kept rows per KV head, ascending.

Usage: press_ref.py --selftest   (hand-computed checks of this file; needs no engine)
"""

import math
import sys
import unittest

import numpy as np

FLOAT_MAX = float(np.finfo(np.float32).max)  # AdaKV's "+inf" for the safeguarded entries


class Layer:
    """One layer's cached entries and the extra inputs some scorers read (all float64).

    keys, values: [H, n, d]; positions: [n]; window_queries: [w, Hq*d] post-RoPE;
    window_positions: [w]; wo: [D, Hq*d]; context_queries: [m, Hq*d] pre-RoPE;
    context_positions: [m]; future_queries: [t, Hq*d] post-RoPE.
    """

    def __init__(self, keys, values, positions, n_heads, *, window_queries=None,
                 window_positions=None, wo=None, context_queries=None, context_positions=None,
                 future_queries=None, layer=0, n_layers=1, next_position=None,
                 rope_base=10000.0, rope_half=False, wq=None, wk=None, wv=None):
        self.keys = np.asarray(keys, dtype=np.float64)
        self.values = np.asarray(values, dtype=np.float64)
        self.n_kv_heads, self.n, self.head_dim = self.keys.shape
        self.positions = np.asarray(positions, dtype=np.int64)
        self.n_heads = int(n_heads)
        assert self.n_heads % self.n_kv_heads == 0
        self.group = self.n_heads // self.n_kv_heads

        def opt(x, dtype=np.float64):
            return None if x is None else np.asarray(x, dtype=dtype)

        self.window_queries = opt(window_queries)
        self.window_positions = opt(window_positions, np.int64)
        self.wo = opt(wo)
        self.context_queries = opt(context_queries)
        self.context_positions = opt(context_positions, np.int64)
        self.future_queries = opt(future_queries)
        self.layer = int(layer)
        self.n_layers = int(n_layers)
        self.next_position = int(self.n if next_position is None else next_position)
        self.rope_base = float(rope_base)
        self.rope_half = bool(rope_half)
        # projections [Hq*d, D], [H*d, D], [H*d, D] (PrimeKV's key=typical)
        self.wq, self.wk, self.wv = opt(wq), opt(wk), opt(wv)

    def query_heads(self, rows):
        """[t, Hq*d] -> [t, Hq, d]."""
        return rows.reshape(rows.shape[0], self.n_heads, self.head_dim)

    def wo_slice(self, qh):
        """W_O^(qh): the [D, d] columns of W_O that read query head qh's output."""
        d = self.head_dim
        return self.wo[:, qh * d:(qh + 1) * d]

    def group_heads(self, h):
        return range(h * self.group, (h + 1) * self.group)

    def projections(self, h):
        """(W_q rows of KV head h's query group [g*d, D], W_k^(h) [d, D], W_v^(h) [d, D])."""
        d, g = self.head_dim, self.group
        if self.wq is None:
            return None
        return (self.wq[h * g * d:(h + 1) * g * d], self.wk[h * d:(h + 1) * d],
                self.wv[h * d:(h + 1) * d])


# ------------------------------------------------------------------------------------------------
# Helpers


def unit(x):
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norm, 1e-12)


def cos_to(x, a):
    """cos(x_j, a) per row of x with the 1e-12 norm guards."""
    return (x @ a) / (np.maximum(np.linalg.norm(x, axis=-1), 1e-12) *
                      max(float(np.linalg.norm(a)), 1e-12))


def softmax(z, axis=-1):
    z = np.asarray(z, dtype=np.float64)
    m = np.max(z, axis=axis, keepdims=True)
    e = np.exp(z - m)
    return e / e.sum(axis=axis, keepdims=True)


def order_desc(scores):
    """Row indices by score descending, ties -> lower row first."""
    scores = np.asarray(scores, dtype=np.float64)
    return np.lexsort((np.arange(scores.size), -scores))


def keep_count(n, ratio):
    return max(1, int(math.floor(n * (1.0 - ratio))))


def select_topk(scores, keep):
    """The `keep` highest scores (ties -> lower row), ascending."""
    return sorted(int(i) for i in order_desc(scores)[:keep])


def round_half_away(x):
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def pyramid_keep(n, ratio, layer, n_layers, window=64, beta=20.0):
    cap = window + n * (1.0 - ratio)
    mn = (cap - window) / beta
    mx = 2.0 * (cap - window) - mn
    if mx >= n - window:
        mx = float(n - window)
        mn = 2.0 * (cap - window) - mx
    if not (n >= mx >= mn >= window) or n_layers < 2:
        return keep_count(n, ratio)
    return min(max(round_half_away(mx - layer * (mx - mn) / (n_layers - 1)), 1), n)


def adakv_effective(scores, ratio, comparable, alpha=0.2):
    """The per-(head, row) values AdaKV ranks globally: normalised unless comparable, then each
    head's top-`safe` forced to float max. Returns (values [H, n], keep, safe)."""
    s = np.array(scores, dtype=np.float64)
    n_heads, n = s.shape
    keep = keep_count(n, ratio)
    safe = int(math.floor(alpha * keep))
    if not comparable:
        for h in range(n_heads):
            t = s[h] - s[h].min()
            total = t.sum()
            s[h] = t / total if total > 0 else 0.0
    for h in range(n_heads):
        if safe > 0:
            s[h, order_desc(s[h])[:safe]] = FLOAT_MAX
    return s, keep, safe


def adakv_order(eff):
    """Global order of (head, row) entries: score desc, then row asc, then head asc."""
    n_heads, n = eff.shape
    hh, jj = np.meshgrid(np.arange(n_heads), np.arange(n), indexing="ij")
    flat = np.lexsort((hh.ravel(), jj.ravel(), -eff.ravel()))
    return [(int(hh.ravel()[i]), int(jj.ravel()[i])) for i in flat]


def select_adakv(scores, ratio, comparable, alpha=0.2):
    eff, keep, _ = adakv_effective(scores, ratio, comparable, alpha)
    n_heads = eff.shape[0]
    kept = [[] for _ in range(n_heads)]
    for h, j in adakv_order(eff)[:n_heads * keep]:
        kept[h].append(j)
    return [sorted(k) if k else [0] for k in kept]


def select_uniform(scores, ratio):
    keep = keep_count(scores.shape[1], ratio)
    return [select_topk(s, keep) for s in scores]


def select_pyramid(scores, ratio, layer, n_layers):
    keep = pyramid_keep(scores.shape[1], ratio, layer, n_layers)
    return [select_topk(s, keep) for s in scores]


# ------------------------------------------------------------------------------------------------
# Query-free scorers


def knorm(layer):
    return -np.linalg.norm(layer.keys, axis=-1)


def keydiff(layer):
    out = np.empty((layer.n_kv_heads, layer.n))
    for h in range(layer.n_kv_heads):
        k = layer.keys[h]
        out[h] = -cos_to(k, unit(k).mean(axis=0))
    return out


def streamingllm(layer, n_sink=4):
    n = layer.n
    s = np.arange(n, dtype=np.float64)
    s[:min(n_sink, n)] = n + 1
    return np.tile(s, (layer.n_kv_heads, 1))


def _lag_partition_score(x, ref):
    """Softmax over the partition's rows of the channel std of x min-max normalised by ref."""
    lo = ref.min(axis=0)
    hi = ref.max(axis=0)
    xt = (x - lo) / np.maximum(hi - lo, 1e-6)
    return softmax(np.std(xt, axis=1, ddof=1))


def lagkv(layer, n_sink=4, lag=128):
    n = layer.n
    out = np.ones((layer.n_kv_heads, n))
    if n < n_sink + 2 * lag:
        out[:, n_sink:] = (np.arange(n_sink, n) - n_sink) / (n - n_sink)
        return out
    parts = (n - n_sink) // lag
    for h in range(layer.n_kv_heads):
        for c in range(parts - 1):
            rows = slice(n_sink + c * lag, n_sink + (c + 1) * lag)
            ref = slice(n_sink + (c + 1) * lag, n_sink + (c + 2) * lag)
            ks = _lag_partition_score(layer.keys[h, rows], layer.keys[h, ref])
            vs = _lag_partition_score(layer.values[h, rows], layer.values[h, ref])
            combined = (ks + vs) / 2
            rank = np.empty(lag)
            rank[np.argsort(combined, kind="stable")] = np.arange(lag)
            out[h, rows] = rank / lag
    return out


def _output_gram(layer, h):
    """M = sum over the group's query heads of W_O^(g)T W_O^(g), [d, d]."""
    d = layer.head_dim
    m = np.zeros((d, d))
    for g in layer.group_heads(h):
        w = layer.wo_slice(g)
        m += w.T @ w
    return m


def _m_norm(x, m):
    return np.sqrt(np.maximum(0.0, np.einsum("ja,ab,jb->j", x, m, x)))


def leverage(k):
    """Centred leverage with the relative diagonal jitter."""
    d = k.shape[1]
    kc = k - k.mean(axis=0)
    gram = kc.T @ kc
    gram = gram + 1e-6 * max(np.trace(gram) / d, 1e-30) * np.eye(d)
    return np.einsum("ja,ja->j", kc, np.linalg.solve(gram, kc.T).T)


PRIMEKV_KEYS = ("leverage", "cosine", "self", "selfexact", "centered", "centeredexact", "next",
                "centerednext", "typical", "none")
PRIMEKV_VALUES = ("wo_centered", "wo", "wo_self", "centered", "norm", "none")
PRIMEKV_COMBINES = ("product", "rank", "logit")
PRIMEKV_ROUNDS = ("one", "halving")


def ranks(x):
    """Normalised ascending ranks (1 + number of smaller entries) / n; ties: lower row first."""
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = (np.arange(len(x)) + 1.0) / len(x)
    return r


def rope_rotations(d, base, shifts, half):
    """The RoPE rotation matrices [len(shifts), d, d] for shifts of that many positions."""
    inv_freq = base ** (-2.0 * np.arange(d // 2) / d)
    r = np.tile(np.eye(d), (len(shifts), 1, 1))
    for i in range(d // 2):
        a, b = (i, i + d // 2) if half else (2 * i, 2 * i + 1)
        c, s = np.cos(shifts * inv_freq[i]), np.sin(shifts * inv_freq[i])
        r[:, a, a] = r[:, b, b] = c
        r[:, a, b] = -s
        r[:, b, a] = s
    return r


def mean_content_query(k, v, pos, base, half, proj):
    """The group's mean content query recovered from the cached means: cbar = mean_j
    R(-pos_j) k_j (each key turned back by its own position), xbar = pinv([W_k; W_v])
    [cbar; vbar] (numpy's SVD pseudo-inverse), u = mean over the group of W_q^(g) xbar."""
    wq, wk, wv = proj
    d = k.shape[1]
    back = rope_rotations(d, base, -np.asarray(pos, dtype=np.float64), half)
    cbar = np.einsum("nab,nb->a", back, k) / k.shape[0]
    xbar = np.linalg.pinv(np.concatenate([wk, wv])) @ np.concatenate([cbar, v.mean(axis=0)])
    return (wq @ xbar).reshape(-1, d).mean(axis=0)


def primekv_set_scores(k, v, m, key, value, combine, rope=None, proj=None):
    """PrimeKV's score of each of the n entries (keys k, values v: [n, d]) judged against this
    set only; m is the head's output Gram (or None); rope = (positions, next position, base,
    half) of these entries; proj = the head's projections (key=typical)."""
    n = k.shape[0]
    if key == "leverage":
        r = leverage(k)
    elif key == "cosine":
        r = 1.0 - cos_to(k, unit(k).mean(axis=0))
    elif key == "self":
        # mean-field log-attention of the query q = k_i: (|k_i|^2 - k_i . kbar) / sqrt(d)
        r = np.einsum("ja,ja->j", k, k - k.mean(axis=0)) / math.sqrt(k.shape[1])
    elif key in ("selfexact", "centeredexact"):
        kk = k - k.mean(axis=0) if key == "centeredexact" else k
        z = kk @ kk.T / math.sqrt(k.shape[1])
        zmax = z.max(axis=1, keepdims=True)
        r = np.diag(z) - (zmax[:, 0] + np.log(np.exp(z - zmax).sum(axis=1)))
    elif key == "centered":
        # mean-field log-attention of the centred self-query q = k_i - kbar
        r = ((k - k.mean(axis=0)) ** 2).sum(axis=1) / math.sqrt(k.shape[1])
    elif key in ("next", "centerednext", "typical"):
        # the self-query rotated to the next position: q_i = R(p - pos_i) k_i (or k_i - kbar)
        pos, nxt, base, half = rope
        kc = k - k.mean(axis=0)
        q = k if key == "next" else kc
        rot = rope_rotations(k.shape[1], base, nxt - np.asarray(pos, dtype=np.float64), half)
        r = np.einsum("nab,nb,na->n", rot, q, kc) / math.sqrt(k.shape[1])
        if key == "typical":
            # plus the typical query asked at p: R(p) u, u the mean content query
            u = mean_content_query(k, v, pos, base, half, proj)
            q0 = rope_rotations(k.shape[1], base, np.array([float(nxt)]), half)[0] @ u
            r = r + kc @ q0 / math.sqrt(k.shape[1])
    elif key == "none":
        r = np.ones(n)
    else:
        raise ValueError(key)
    if value == "wo_centered":
        c = _m_norm(v - v.mean(axis=0), m)
    elif value == "wo":
        c = _m_norm(v, m)
    elif value == "wo_self":
        # v_i minus the self-query's (q = k_i) output over the other entries
        if n == 1:
            c = _m_norm(v, m)
        else:
            z = k @ k.T / math.sqrt(k.shape[1])
            np.fill_diagonal(z, -np.inf)
            p = np.exp(z - z.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            c = _m_norm(v - p @ v, m)
    elif value == "centered":
        c = np.linalg.norm(v - v.mean(axis=0), axis=1)
    elif value == "norm":
        c = np.linalg.norm(v, axis=1)
    elif value == "none":
        c = np.ones(n)
    else:
        raise ValueError(value)
    if combine == "rank":
        r, c = ranks(r), ranks(c)
    elif combine == "logit":
        return r + np.log(np.maximum(c, 1e-30))
    elif combine != "product":
        raise ValueError(combine)
    return r * c


def primekv(layer, key="centerednext", value="wo_centered", combine="logit", rounds="one"):
    out = np.empty((layer.n_kv_heads, layer.n))
    for h in range(layer.n_kv_heads):
        k = layer.keys[h]
        v = layer.values[h]
        m = _output_gram(layer, h) if value in ("wo_centered", "wo", "wo_self") else None
        rope = (layer.positions, layer.next_position, layer.rope_base, layer.rope_half)
        proj = layer.projections(h) if key == "typical" else None
        if rounds == "one":
            out[h] = primekv_set_scores(k, v, m, key, value, combine, rope, proj)
            continue
        if rounds != "halving":
            raise ValueError(rounds)
        # Successive halving: drop the lower half of the remaining entries (by their score among
        # the remaining), rescore, repeat; round t's removed entries get t + place/(removed+1).
        active = np.arange(layer.n)
        t = 0
        while len(active) > 1:
            sub = (layer.positions[active],) + rope[1:]
            x = primekv_set_scores(k[active], v[active], m, key, value, combine, sub, proj)
            order = np.lexsort((active, x))  # ascending score, ties: lower row first
            removed = len(active) // 2
            out[h, active[order[:removed]]] = t + np.arange(1, removed + 1) / (removed + 1.0)
            active = np.sort(active[order[removed:]])
            t += 1
        out[h, active] = t + 1
    return out


def curdkv(layer, window=16, n_sink=4):
    """CurDKV (arXiv 2509.15038): |k|^2 and |v|^2, each divided by its sum over consecutive
    windows of 16 rows, multiplied, normalised over the head; the first 4 rows get max + 1."""
    out = np.empty((layer.n_kv_heads, layer.n))
    for h in range(layer.n_kv_heads):
        parts = []
        for x in (layer.keys[h], layer.values[h]):
            s = (x * x).sum(axis=1)
            for w0 in range(0, layer.n, window):
                tot = s[w0:w0 + window].sum()
                s[w0:w0 + window] = s[w0:w0 + window] / tot if tot > 0 else 0.0
            parts.append(s)
        p = parts[0] * parts[1]
        p = p / p.sum() if p.sum() > 0 else np.zeros_like(p)
        p[:n_sink] = p.max() + 1.0
        out[h] = p
    return out


# ------------------------------------------------------------------------------------------------
# Query-aware scorers


def window_attention(layer, q_rows, q_pos):
    """Causal attention of post-RoPE query rows [t, Hq*d] over all n keys: [Hq, t, n]."""
    q = layer.query_heads(q_rows)
    masked = layer.positions[None, :] > np.asarray(q_pos)[:, None]
    out = np.empty((layer.n_heads, q.shape[0], layer.n))
    for qh in range(layer.n_heads):
        logits = q[:, qh] @ layer.keys[qh // layer.group].T / math.sqrt(layer.head_dim)
        logits = np.where(masked, -np.inf, logits)
        out[qh] = softmax(logits)
    return out


def snapkv(layer, kernel=5):
    attn = window_attention(layer, layer.window_queries, layer.window_positions)
    window_rows = layer.positions >= layer.window_positions[0]
    m = layer.n - int(window_rows.sum())
    a = attn[:, :, :m].mean(axis=1)  # [Hq, m], not renormalised
    half = kernel // 2
    pooled = np.zeros_like(a)
    for j in range(m):
        pooled[:, j] = a[:, max(0, j - half):min(m, j + half + 1)].sum(axis=1) / kernel
    out = np.zeros((layer.n_kv_heads, layer.n))
    for h in range(layer.n_kv_heads):
        out[h, :m] = pooled[list(layer.group_heads(h))].mean(axis=0)
        out[h, window_rows] = out[h].max() + 1.0
    return out


def tova(layer):
    last = layer.window_positions[-1]
    attn = window_attention(layer, layer.window_queries[-1:], [last])[:, 0]  # [Hq, n]
    s = attn.sum(axis=0) / layer.n_heads
    window_rows = layer.positions >= last
    s[window_rows] = 0.0
    s[window_rows] = s.max() + 1.0
    return np.tile(s, (layer.n_kv_heads, 1))


def lookback(layer, skip=1, reduce="max"):
    """Attention each entry got from the window queries at least `skip` positions after it:
    the largest probability over those queries and the group's heads, or their mean. The first 4
    positions and entries no such query saw score max + 1."""
    attn = window_attention(layer, layer.window_queries, layer.window_positions)  # [Hq, t, n]
    qpos = np.asarray(layer.window_positions)
    valid = qpos[:, None] >= layer.positions[None, :] + skip  # [t, n]
    seen = valid.sum(axis=0)
    out = np.zeros((layer.n_kv_heads, layer.n))
    for h in range(layer.n_kv_heads):
        a = np.where(valid[None], attn[list(layer.group_heads(h))], 0.0)  # [g, t, n]
        if reduce == "max":
            out[h] = a.max(axis=(0, 1))
        else:
            out[h] = a.sum(axis=(0, 1)) / np.maximum(seen * layer.group, 1)
        protect = (seen == 0) | (layer.positions < 4)
        out[h, protect] = 0.0
        out[h, protect] = out[h].max() + 1.0
    return out


def mean_rope_rotation(d, base, start, count, half):
    """The average over positions start..start+count-1 of the RoPE rotation matrix."""
    inv_freq = base ** (-2.0 * np.arange(d // 2) / d)
    angles = np.arange(start, start + count, dtype=np.float64)[:, None] * inv_freq[None, :]
    c = np.cos(angles).mean(axis=0)
    s = np.sin(angles).mean(axis=0)
    r = np.zeros((d, d))
    for i in range(d // 2):
        a, b = (i, i + d // 2) if half else (2 * i, 2 * i + 1)
        r[a, a] = r[b, b] = c[i]
        r[a, b] = -s[i]
        r[b, a] = s[i]
    return r


def query_stats(layer, n_sink=4):
    """Per query head mean [Hq, d] and biased covariance [Hq, d, d] of the pre-RoPE context
    queries at positions >= n_sink."""
    q = layer.query_heads(layer.context_queries[layer.context_positions >= n_sink])
    mu = q.mean(axis=0)
    x = q - mu[None]
    sigma = np.einsum("tha,thb->hab", x, x) / q.shape[0]
    return mu, sigma


def expected_attention_logits(layer, n_sink=4, n_future=512):
    """z [Hq, n - n_sink] for the rows j >= n_sink."""
    d = layer.head_dim
    mu, sigma = query_stats(layer, n_sink)
    rbar = mean_rope_rotation(d, layer.rope_base, layer.next_position, n_future, layer.rope_half)
    z = np.empty((layer.n_heads, layer.n - n_sink))
    for qh in range(layer.n_heads):
        k = layer.keys[qh // layer.group, n_sink:]
        mu_r = rbar @ mu[qh]
        sig_r = rbar @ sigma[qh] @ rbar.T
        z[qh] = k @ mu_r / math.sqrt(d) + np.einsum("ja,ab,jb->j", k, sig_r, k) / (2 * d)
    return z


def expected_attention(layer, n_sink=4, n_future=512, epsilon=1e-2, vnorm=True):
    prob = softmax(expected_attention_logits(layer, n_sink, n_future), axis=1)
    out = np.zeros((layer.n_kv_heads, layer.n))
    for h in range(layer.n_kv_heads):
        p = prob[list(layer.group_heads(h))].mean(axis=0)
        if vnorm:
            p = (p + epsilon) * np.linalg.norm(layer.values[h, n_sink:], axis=1)
        out[h, n_sink:] = p
        out[h, :n_sink] = out[h].max() + 1.0
    return out


def oracle(layer):
    d = layer.head_dim
    q = layer.query_heads(layer.future_queries)
    out = np.zeros((layer.n_kv_heads, layer.n))
    for h in range(layer.n_kv_heads):
        k = layer.keys[h]
        v = layer.values[h]
        for g in layer.group_heads(h):
            w = layer.wo_slice(g)
            a = softmax(q[:, g] @ k.T / math.sqrt(d))  # [t, n]
            o = a @ v  # [t, d]
            proj = (o @ w.T)[:, None, :] - (v @ w.T)[None, :, :]  # W_O (o_t - v_j): [t, n, D]
            out[h] += (a * np.linalg.norm(proj, axis=2)).sum(axis=0)
    return out


# ------------------------------------------------------------------------------------------------
# Presses: spec -> (scores, selection)

COMPARABLE = {"snapkv", "pyramidkv", "tova", "expected_attention", "lookback"}


def _parse(spec):
    name, _, rest = spec.partition(":")
    params = {}
    if rest:
        for item in rest.split(","):
            k, _, v = item.partition("=")
            params[k] = v
    return name, params


def scores_for(spec, layer):
    """Reference scores [H, n] for a press spec (without the "adakv:" prefix)."""
    name, params = _parse(spec)
    if name == "knorm":
        return knorm(layer)
    if name == "keydiff":
        return keydiff(layer)
    if name == "streamingllm":
        return streamingllm(layer)
    if name == "lagkv":
        return lagkv(layer)
    if name in ("snapkv", "pyramidkv"):
        return snapkv(layer)
    if name == "tova":
        return tova(layer)
    if name == "lookback":
        return lookback(layer, int(params.get("skip", 1)), params.get("reduce", "max"))
    if name == "expected_attention":
        return expected_attention(layer)
    if name == "primekv":
        return primekv(layer, params.get("key", "centerednext"), params.get("value", "wo_centered"),
                       params.get("combine", "logit"), params.get("rounds", "one"))
    if name == "oracle":
        return oracle(layer)
    if name == "curdkv":
        return curdkv(layer)
    raise ValueError(f"no reference for press '{spec}'")


def base_name(spec):
    return _parse(spec[len("adakv:"):] if spec.startswith("adakv:") else spec)[0]


def budget_of(spec):
    if spec.startswith("adakv:") or spec == "expected_attention":
        return "adaptive"
    if spec == "pyramidkv":
        return "pyramid"
    return "uniform"


def select(spec, scores, ratio, layer_index, n_layers):
    """Kept rows per head for a press spec's budget, given its scores [H, n]."""
    budget = budget_of(spec)
    if budget == "adaptive":
        return select_adakv(scores, ratio, base_name(spec) in COMPARABLE)
    if budget == "pyramid":
        return select_pyramid(scores, ratio, layer_index, n_layers)
    return select_uniform(scores, ratio)


def reference(spec, layer, ratio):
    """(scores [H, n], kept rows per head) for a press spec at a ratio."""
    base = spec[len("adakv:"):] if spec.startswith("adakv:") else spec
    s = scores_for(base, layer)
    return s, select(spec, s, ratio, layer.layer, layer.n_layers)


def ranking_values(spec, scores, ratio):
    """The values the selection ranks: per head for uniform/pyramid, AdaKV's effective values
    (normalised, safeguarded) for adaptive budgets."""
    if budget_of(spec) == "adaptive":
        return adakv_effective(scores, ratio, base_name(spec) in COMPARABLE)[0]
    return np.asarray(scores, dtype=np.float64)


# ------------------------------------------------------------------------------------------------
# Self-test on hand-computed cases


def _layer(keys, values=None, n_heads=None, **kw):
    keys = np.asarray(keys, dtype=np.float64)
    if keys.ndim == 2:
        keys = keys[None]
    values = keys.copy() if values is None else np.asarray(values, dtype=np.float64)
    if values.ndim == 2:
        values = values[None]
    n = keys.shape[1]
    return Layer(keys, values, kw.pop("positions", np.arange(n)),
                 keys.shape[0] if n_heads is None else n_heads, **kw)


class SelfTest(unittest.TestCase):
    def assertClose(self, a, b, tol=1e-12):
        np.testing.assert_allclose(np.asarray(a, dtype=np.float64), b, rtol=0, atol=tol)

    def test_selection(self):
        self.assertEqual(select_topk([1, 3, 3, 2], 2), [1, 2])
        self.assertEqual(select_topk([5, 5, 5], 2), [0, 1])
        self.assertEqual(select_topk([0, 2, 1, 2], 3), [1, 2, 3])
        self.assertEqual(keep_count(700, 0.9), 69)  # 700 * (1 - 0.9) = 69.99999999999999
        self.assertEqual(keep_count(10, 0.99), 1)
        self.assertEqual(keep_count(300, 0.25), 225)

    def test_pyramid_keep(self):
        # cap - w = 525: max = 1023.75 clamps to n - w = 636, min = 414; 636 - 3 * 222 / 7 = 540.86
        self.assertEqual(pyramid_keep(700, 0.25, 3, 8), 541)
        # cap - w = 350: max 682.5 -> 636, min = 64; 636 - 3 * 572 / 7 = 390.86
        self.assertEqual(pyramid_keep(700, 0.5, 3, 8), 391)
        self.assertEqual(pyramid_keep(700, 0.5, 0, 8), 636)
        self.assertEqual(pyramid_keep(700, 0.5, 7, 8), 64)
        # min = 175 / 20 < w: fallback to floor(n (1 - r))
        self.assertEqual(pyramid_keep(700, 0.75, 3, 8), 175)
        self.assertEqual(pyramid_keep(700, 0.25, 0, 1), 525)  # one layer
        # exactly 500.5 -> 501 (half away from zero, not to even)
        self.assertEqual(pyramid_keep(1001, 0.5, 1, 3), 501)

    def test_knorm_keydiff(self):
        lay = _layer([[3.0, 4.0], [1.0, 0.0]])
        self.assertClose(knorm(lay), [[-5.0, -1.0]])
        lay = _layer([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0]])
        # anchor (2/3, 1/3): cos = 2/sqrt5, 1/sqrt5, 2/sqrt5
        r5 = math.sqrt(5.0)
        self.assertClose(keydiff(lay), [[-2 / r5, -1 / r5, -2 / r5]])
        # a zero key has cosine 0 with the guard
        lay = _layer([[0.0, 0.0], [1.0, 0.0]])
        self.assertClose(keydiff(lay), [[0.0, -1.0]])

    def test_streamingllm(self):
        lay = _layer(np.zeros((2, 6, 2)))
        self.assertClose(streamingllm(lay), [[7, 7, 7, 7, 4, 5]] * 2)
        self.assertEqual(select_uniform(streamingllm(lay), 0.5), [[0, 1, 2]] * 2)

    def test_lagkv_short(self):
        lay = _layer(np.zeros((1, 10, 2)))
        self.assertClose(lagkv(lay), [[1, 1, 1, 1, 0, 1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6]])

    def test_lagkv_partitions(self):
        # sink 1, lag 2, n = 7: partitions rows 1-2, 3-4, 5-6; only partitions 0 and 1 are scored.
        keys = np.array([[9, 9, 9], [1, 2, 4], [1, 0, 0], [0, 0, 0], [1, 2, 4],
                         [5, 5, 5], [5, 5, 5]], dtype=np.float64)
        values = np.ones((7, 3))
        lay = _layer(keys, values)
        # partition 0 vs rows 3-4 (range 1, 2, 4): row 1 -> (1,1,1), std 0; row 2 -> (1,0,0),
        # std sqrt(1/3): row 2 ranks higher. Values are constant, equal scores -> no effect.
        # partition 1 vs rows 5-6 (range 0 -> 1e-6): both rows far apart, row 4 std is larger.
        s = lagkv(lay, n_sink=1, lag=2)
        self.assertClose(s, [[1, 0, 0.5, 0, 0.5, 1, 1]])
        self.assertClose(_lag_partition_score(keys[1:3], keys[3:5]),
                         softmax([0.0, math.sqrt(1 / 3)]))
        # equal combined scores: the earlier row gets rank 0
        lay = _layer(np.ones((7, 3)), values)
        self.assertClose(lagkv(lay, n_sink=1, lag=2), [[1, 0, 0.5, 0, 0.5, 1, 1]])

    def test_snapkv_uniform_attention(self):
        # zero keys: uniform attention over the visible rows. n = 8, window rows at 6, 7.
        n, w = 8, 2
        lay = _layer(np.zeros((1, n, 1)), n_heads=2, window_queries=np.ones((w, 2)),
                     window_positions=[6, 7])
        a = (1 / 7 + 1 / 8) / 2
        expect = [3 * a / 5, 4 * a / 5, a, a, 4 * a / 5, 3 * a / 5, a + 1, a + 1]
        self.assertClose(snapkv(lay), [expect])
        # a window query cannot see the rows after it
        attn = window_attention(lay, lay.window_queries, lay.window_positions)
        self.assertClose(attn[0, 0], [1 / 7] * 7 + [0])

    def test_snapkv_group_mean(self):
        # two query heads; the first looks only at row 0 (large logit), the second is uniform.
        keys = np.zeros((1, 8, 1))
        keys[0, 0, 0] = 1.0
        wq = np.array([[200.0, 0.0], [200.0, 0.0]])
        lay = _layer(keys, n_heads=2, window_queries=wq, window_positions=[6, 7])
        a0 = np.array([1.0, 0, 0, 0, 0, 0])
        a1 = np.full(6, (1 / 7 + 1 / 8) / 2)
        p0 = np.array([a0[max(0, j - 2):j + 3].sum() / 5 for j in range(6)])
        p1 = np.array([a1[max(0, j - 2):j + 3].sum() / 5 for j in range(6)])
        core = (p0 + p1) / 2
        self.assertClose(snapkv(lay)[0, :6], core, 1e-12)
        self.assertClose(snapkv(lay)[0, 6:], [core.max() + 1] * 2, 1e-12)

    def test_tova(self):
        lay = _layer(np.zeros((2, 3, 1)), n_heads=4, window_queries=np.ones((2, 4)),
                     window_positions=[1, 2])
        self.assertClose(tova(lay), [[1 / 3, 1 / 3, 4 / 3]] * 2)

    def test_mean_rope_rotation(self):
        r = mean_rope_rotation(2, 10000.0, 0, 2, False)
        c, s = (1 + math.cos(1.0)) / 2, math.sin(1.0) / 2
        self.assertClose(r, [[c, -s], [s, c]])
        # d = 4: pairs (0,1),(2,3) interleaved vs (0,2),(1,3) half; frequencies 1 and 1/100.
        ri = mean_rope_rotation(4, 10000.0, 3, 1, False)
        rh = mean_rope_rotation(4, 10000.0, 3, 1, True)
        c0, s0, c1, s1 = math.cos(3), math.sin(3), math.cos(0.03), math.sin(0.03)
        self.assertClose(ri, [[c0, -s0, 0, 0], [s0, c0, 0, 0], [0, 0, c1, -s1], [0, 0, s1, c1]])
        self.assertClose(rh, [[c0, 0, -s0, 0], [0, c1, 0, -s1], [s0, 0, c0, 0], [0, s1, 0, c1]])

    def test_expected_attention(self):
        # queries (2, 0) everywhere: mu = (2, 0), Sigma = 0; T = 1 at position 0: Rbar = I.
        d = 2
        x = math.log(3.0) * math.sqrt(d) / 2  # z = 2 x / sqrt(2) = ln 3
        keys = np.array([[5, 5], [5, 5], [5, 5], [5, 5], [0, 0], [x, 0]], dtype=np.float64)
        values = np.array([[0, 0]] * 4 + [[1, 0], [0, 2]], dtype=np.float64)
        cq = np.tile([2.0, 0.0], (6, 1))
        lay = _layer(keys, values, context_queries=cq, context_positions=np.arange(6),
                     next_position=0)
        self.assertClose(expected_attention_logits(lay, n_future=1), [[0, math.log(3)]])
        s = expected_attention(lay, n_future=1)
        self.assertClose(s, [[2.52] * 4 + [0.26, 1.52]])
        # covariance term: queries +-(1, 1) -> mu = 0, Sigma = all ones; k = (1, 0): z = 1/4.
        cq = np.array([[9, 9]] * 4 + [[1, 1], [-1, -1]], dtype=np.float64)
        keys = np.array([[0, 0]] * 4 + [[1, 0], [0, 0]], dtype=np.float64)
        lay = _layer(keys, keys, context_queries=cq, context_positions=np.arange(6),
                     next_position=0)
        mu, sigma = query_stats(lay)
        self.assertClose(mu, [[0, 0]])
        self.assertClose(sigma, [[[1, 1], [1, 1]]])
        self.assertClose(expected_attention_logits(lay, n_future=1), [[0.25, 0]])

    def test_primekv_hand(self):
        keys = np.array([[1, 0], [-1, 0], [0, 1], [0, -1]], dtype=np.float64)
        values = np.array([[1, 0], [0, 1], [0, 0], [0, 0]], dtype=np.float64)
        wo = np.array([[2.0, 0.0], [0.0, 1.0]])  # D = 2, Hq = 1: M = diag(4, 1)
        lay = _layer(keys, values, wo=wo)
        r = 0.5 / (1 + 1e-6)  # Gram = 2 I, jitter 1e-6 * 2
        self.assertClose(leverage(keys), [r] * 4)
        c = [math.sqrt(4 * 0.5625 + 0.0625), math.sqrt(4 * 0.0625 + 0.5625),
             math.sqrt(4 * 0.0625 + 0.0625), math.sqrt(4 * 0.0625 + 0.0625)]
        self.assertClose(primekv(lay, "leverage", combine="product"), [np.multiply(r, c)])
        self.assertClose(primekv(lay, "none", "wo", "product"), [[2, 1, 0, 0]])
        self.assertClose(primekv(lay, "none", "norm", "product"), [[1, 1, 0, 0]])
        self.assertClose(primekv(lay, "none", "centered", "product"),
                         [[math.sqrt(0.625), math.sqrt(0.625), math.sqrt(0.125),
                           math.sqrt(0.125)]])
        self.assertClose(primekv(lay, "none", "none", "product"), [[1, 1, 1, 1]])
        # cosine: unit keys sum to 0 -> anchor 0 -> cos 0 -> r = 1
        self.assertClose(primekv(lay, "cosine", "none", "product"), [[1, 1, 1, 1]])
        # key=self (combine=logit): kbar = 0, so r = |k|^2 / sqrt(2) = 1/sqrt(2); the score is
        # r + log c
        self.assertClose(primekv(lay, "self"), [1 / math.sqrt(2) + np.log(c)])
        # default (key=centerednext): kbar = 0, one rotary pair with theta = 1, positions 0..3,
        # next position 4: q_i = R(4 - i) k_i, r_i = cos(4 - i) |k_i|^2 / sqrt(2)
        rot = [math.cos(4 - i) / math.sqrt(2) for i in range(4)]
        self.assertClose(primekv(lay), [np.add(rot, np.log(c))])
        # selfexact for k0 = (1, 0): logits k0.k_j / sqrt(2) = (1, -1, 0, 0) / sqrt(2)
        z = 1 / math.sqrt(2)
        lse = math.log(math.exp(z) + math.exp(-z) + 2)
        self.assertClose(primekv(lay, "selfexact", "none", "product"), [[z - lse] * 4])
        # rank: key none -> ranks (1/4, 2/4, 3/4, 1) by row; |v| = (1, 1, 0, 0) -> ranks
        # (3/4, 1, 1/4, 2/4) (ties: lower row ranks lower)
        self.assertClose(primekv(lay, "none", "norm", "rank"), [[0.1875, 0.5, 0.1875, 0.5]])
        # halving on |v| = (1, 1, 0, 0): round 0 drops rows 2, 3 (scores 0 + 1/3, 0 + 2/3),
        # round 1 drops row 0 (1 + 1/2, tie broken toward the lower row), row 1 is left (2 + 1)
        self.assertClose(primekv(lay, "none", "norm", "product", "halving"),
                         [[1.5, 3, 1 / 3, 2 / 3]])

    def test_curdkv_hand(self):
        # 20 rows in windows of 16 and 4: |k|^2 = 1 except row 5 (4) and row 17 (3); |v|^2 = 1
        # except row 6 (2). Window 0 sums: k 19, v 17; window 1: k 6, v 4.
        k = np.ones((20, 1))
        k[5, 0], k[17, 0] = 2.0, math.sqrt(3.0)
        v = np.ones((20, 1))
        v[6, 0] = math.sqrt(2.0)
        p = np.array([1 / 19 / 17] * 16 + [1 / 6 / 4] * 4)
        p[5], p[6], p[17] = 4 / 19 / 17, 1 / 19 * 2 / 17, 3 / 6 / 4
        p = p / p.sum()
        p[:4] = p.max() + 1
        self.assertClose(curdkv(_layer(k, v)), [p], 1e-12)

    def test_leverage_properties(self):
        rng = np.random.default_rng(1)
        k = rng.normal(size=(40, 5))
        r = leverage(k)
        self.assertAlmostEqual(r.sum(), 5.0, places=4)  # trace of the hat matrix
        self.assertTrue(np.all(r >= 0) and np.all(r <= 1))
        # the only key with a component along a direction: 1 with an intercept, so 1 - 1/n
        # once centred
        k = np.zeros((30, 4))
        k[:29, :3] = rng.normal(size=(29, 3))
        k[29] = [0, 0, 0, 5]
        self.assertAlmostEqual(leverage(k)[29], 29 / 30, places=5)
        # Mahalanobis identity: r_j = (k_j - kbar)^T C^-1 (k_j - kbar) / n, C the biased covariance
        k = rng.normal(size=(50, 3))
        kc = k - k.mean(axis=0)
        cov = kc.T @ kc / 50
        maha = np.einsum("ja,ab,jb->j", kc, np.linalg.inv(cov), kc) / 50
        self.assertClose(leverage(k), maha, 1e-6)

    def test_group_wo_gram(self):
        # Hq = 2, H = 1, d = 1: M = w0^2 + w1^2 summed over D rows
        wo = np.array([[1.0, 2.0], [3.0, 0.0]])
        lay = _layer(np.array([[1.0], [2.0]]), np.array([[0.0], [2.0]]), n_heads=2, wo=wo)
        m = 1 + 9 + 4
        self.assertClose(primekv(lay, "none", "wo_centered", "product"),
                         [[math.sqrt(m), math.sqrt(m)]])

    def test_oracle(self):
        # d = 1, q = 1, k = (0, ln 3): a = (1/4, 3/4); v = (0, 4): o = 3; |W_O| = 2
        keys = np.array([[0.0], [math.log(3.0)]])
        values = np.array([[0.0], [4.0]])
        lay = _layer(keys, values, wo=np.array([[2.0]]), future_queries=np.array([[1.0]]))
        self.assertClose(oracle(lay), [[0.25 * 2 * 3, 0.75 * 2 * 1]], 1e-12)
        # two future queries add up; q = 0 gives a = 1/2, o = 2
        lay = _layer(keys, values, wo=np.array([[2.0]]),
                     future_queries=np.array([[1.0], [0.0]]))
        self.assertClose(oracle(lay), [[1.5 + 0.5 * 2 * 2, 1.5 + 0.5 * 2 * 2]], 1e-12)

    def test_adakv(self):
        # not comparable: h0 -> (3,2,1,0)/6, h1 -> (0,0,0,1); keep 2, safe 0, 4 slots
        s = np.array([[4.0, 3, 2, 1], [1, 1, 1, 10]])
        self.assertEqual(select_adakv(s, 0.5, False), [[0, 1, 2], [3]])
        # normalised h1 -> (1.5,0,0,9)/10.5 loses row 0; raw (comparable) 2.5 beats h0's 2
        s = np.array([[4.0, 3, 2, 1], [2.5, 1, 1, 10]])
        self.assertEqual(select_adakv(s, 0.5, False), [[0, 1, 2], [3]])
        self.assertEqual(select_adakv(s, 0.5, True), [[0, 1], [0, 3]])
        # tie order: row before head. h0 = (1,1,0), h1 = (1,0,0), keep 1 -> (r0,h0), (r0,h1)
        s = np.array([[1.0, 1, 0], [1, 0, 0]])
        self.assertEqual(select_adakv(s, 0.5, True), [[0], [0]])
        # a head with nothing kept keeps row 0
        s = np.array([[5.0, 4, 3], [0, 0, 0]])
        self.assertEqual(select_adakv(s, 0.5, True), [[0, 1], [0]])
        # safeguard: keep 5 -> safe 1; h1's best entry is forced although h0 dominates
        s = np.array([[10.0] * 10, np.arange(10.0)])
        self.assertEqual(select_adakv(s, 0.5, True), [[0, 1, 2, 3, 4, 5, 6, 7, 8], [9]])
        eff, keep, safe = adakv_effective(s, 0.5, True)
        self.assertEqual((keep, safe), (5, 1))
        self.assertEqual(eff[0, 0], FLOAT_MAX)
        self.assertEqual(eff[1, 9], FLOAT_MAX)
        # constant head normalises to 0
        eff, _, _ = adakv_effective(np.array([[2.0, 2.0], [1.0, 3.0]]), 0.5, False)
        self.assertClose(eff, [[0, 0], [0, 1]])

    def test_reference_dispatch(self):
        lay = _layer(np.zeros((2, 6, 2)))
        s, kept = reference("streamingllm", lay, 0.5)
        self.assertEqual(kept, [[0, 1, 2]] * 2)
        self.assertEqual(budget_of("adakv:primekv:key=cosine,value=none"), "adaptive")
        self.assertEqual(base_name("adakv:primekv:key=cosine,value=none"), "primekv")
        self.assertEqual(budget_of("expected_attention"), "adaptive")
        self.assertEqual(budget_of("pyramidkv"), "pyramid")


def main(argv):
    if "--selftest" in argv:
        prog = unittest.main(module=__name__, argv=[argv[0]] + [a for a in argv[1:]
                                                                if a != "--selftest"],
                             exit=False, verbosity=2)
        return 0 if prog.result.wasSuccessful() else 1
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
