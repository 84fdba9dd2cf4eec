#!/usr/bin/python3
"""Checks of the numpy reference itself; none of them needs the C++ engine.

Usage: test_ref_selfcheck.py [--shared-dir DIR] [unittest args]
"""

import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_read  # noqa: E402
import ref_forward as rf  # noqa: E402
from gguf_write import Typed, random_model, write_gguf  # noqa: E402

SHARED_DIR = os.environ.get("PRIMEKV_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))

# Greedy continuation of "Once upon a time" ([1, 403, 407, 261, 378]) by stories260K; the text
# is upstream llama2.c's documented sample: ", there was a little girl named Lily. She loved to
# play outside in the park."
STORIES_PROMPT = [1, 403, 407, 261, 378]
STORIES_GREEDY_30 = [432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267,
                     337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432]
STORIES_TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside "
                "in the park.")


class TmpDirCase(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="ref_selfcheck_")
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp, name)


class DequantTest(unittest.TestCase):
    def test_q8_0_hand_block(self):
        d = np.float16(0.5)
        q = np.arange(-16, 16, dtype=np.int8) * 4  # -64..60
        raw = d.astype("<f2").tobytes() + q.tobytes()
        self.assertEqual(len(raw), 34)
        x = gguf_read.dequantize(raw, gguf_read.GGML_Q8_0, 32)
        np.testing.assert_array_equal(x, 0.5 * q.astype(np.float64))
        self.assertEqual(x[0], -32.0)
        self.assertEqual(x[31], 30.0)

    def test_q4_0_hand_block(self):
        # byte j holds nibbles lo = j, hi = 15 - j.
        packed = bytes((j & 0xF) | ((15 - j) << 4) for j in range(16))
        raw = np.float16(2.0).astype("<f2").tobytes() + packed
        x = gguf_read.dequantize(raw * 2, gguf_read.GGML_Q4_0, 64)
        want = [2.0 * (j - 8) for j in range(16)] + [2.0 * (15 - j - 8) for j in range(16)]
        np.testing.assert_array_equal(x[:32], want)
        np.testing.assert_array_equal(x[32:], want)
        self.assertEqual(x[0], -16.0)
        self.assertEqual(x[16], 14.0)

    def test_f16_bf16_bits(self):
        raw = struct.pack("<4H", 0x3C00, 0xC000, 0x3555, 0x7BFF)
        np.testing.assert_array_equal(gguf_read.dequantize(raw, gguf_read.GGML_F16, 4),
                                      [1.0, -2.0, 0.333251953125, 65504.0])
        raw = struct.pack("<3H", 0x3F80, 0xC040, 0x4049)
        np.testing.assert_array_equal(gguf_read.dequantize(raw, gguf_read.GGML_BF16, 3),
                                      [1.0, -3.0, 3.140625])

    def test_truncated_data_rejected(self):
        with self.assertRaises(gguf_read.GGUFError):
            gguf_read.dequantize(b"\0" * 33, gguf_read.GGML_Q8_0, 32)
        with self.assertRaises(gguf_read.GGUFError):
            gguf_read.dequantize(b"\0" * 18, gguf_read.GGML_Q4_0, 20)


class GGUFRoundTripTest(TmpDirCase):
    def test_metadata_and_tensors(self):
        rng = np.random.default_rng(1)
        a = rng.standard_normal((3, 64))
        meta = {
            "general.architecture": "llama",
            "u8": Typed(gguf_read.T_U8, 200),
            "i16": Typed(gguf_read.T_I16, -300),
            "u64": Typed(gguf_read.T_U64, 2**40 + 3),
            "i64": Typed(gguf_read.T_I64, -(2**40)),
            "f64": Typed(gguf_read.T_F64, 0.1),
            "f32": 0.25,
            "flag": True,
            "strs": ["a", "\u2581b", ""],
            "ints": Typed(gguf_read.T_ARRAY, [1, -2, 3], gguf_read.T_I32),
            "nested": Typed(gguf_read.T_ARRAY, [[1, 2], [3]], gguf_read.T_ARRAY),
        }
        tensors = [(f"t.{t}", a, t) for t in ("F32", "F16", "BF16", "Q8_0", "Q4_0")]
        tensors.append(("vec", np.arange(5.0), "F32"))
        for version, align in ((3, 32), (2, 64)):
            p = self.path(f"rt{version}.gguf")
            write_gguf(p, meta, tensors, alignment=align, version=version)
            f = gguf_read.GGUFFile(p)
            self.assertEqual(f.version, version)
            self.assertEqual(f.data_start % align, 0)
            m = f.metadata
            self.assertEqual(m["u8"], 200)
            self.assertEqual(m["i16"], -300)
            self.assertEqual(m["u64"], 2**40 + 3)
            self.assertEqual(m["i64"], -(2**40))
            self.assertEqual(m["f64"], 0.1)
            self.assertEqual(m["f32"], 0.25)
            self.assertIs(m["flag"], True)
            self.assertEqual(m["strs"], ["a", "\u2581b", ""])
            self.assertEqual(m["ints"], [1, -2, 3])
            self.assertEqual(m["nested"], [[1, 2], [3]])
            self.assertEqual(f.infos["t.F32"].ne, [64, 3])
            self.assertEqual(f.tensor("vec").shape, (5,))
            np.testing.assert_array_equal(f.tensor("t.F32"), a.astype(np.float32))
            np.testing.assert_array_equal(f.tensor("t.F16"), a.astype(np.float16))
            for t, rel in (("BF16", 2**-8), ("Q8_0", 1 / 127 / 2 * 1.01), ("Q4_0", 1 / 8 * 1.01)):
                got = f.tensor(f"t.{t}")
                self.assertEqual(got.shape, (3, 64))
                err = np.abs(got - a).reshape(-1, 32).max(axis=1)
                bound = np.abs(a).reshape(-1, 32).max(axis=1) * rel
                self.assertTrue(np.all(err <= bound), f"{t}: {err} > {bound}")

    def test_bad_files_rejected(self):
        p = self.path("bad.gguf")
        with open(p, "wb") as fh:
            fh.write(b"GGUX" + b"\0" * 60)
        with self.assertRaises(gguf_read.GGUFError):
            gguf_read.GGUFFile(p)
        write_gguf(p, {"k": 1}, [("w", np.ones((2, 32)), "F32")])
        size = os.path.getsize(p)
        with open(p, "r+b") as fh:
            fh.truncate(size - 4)
        with self.assertRaises(gguf_read.GGUFError):
            gguf_read.GGUFFile(p)

    def test_stories_layout(self):
        f = gguf_read.GGUFFile(os.path.join(SHARED_DIR, "models", "stories260K.gguf"))
        self.assertEqual(f.version, 3)
        self.assertEqual(len(f.metadata), 19)
        self.assertEqual(len(f.infos), 48)
        self.assertEqual(f.data_start, 14176)
        self.assertEqual(f.tensor("blk.0.ffn_down.weight").shape, (64, 172))
        self.assertEqual(f.tensor("blk.0.attn_k.weight").shape, (32, 64))
        np.testing.assert_array_equal(f.tensor("output.weight"), f.tensor("token_embd.weight"))


class RopeTest(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(7)

    def test_hand_values_adjacent_pairs(self):
        x = np.array([1.0, 2.0, 3.0, 4.0]).reshape(1, 1, 4)
        freqs = 10000.0 ** (-np.arange(2) * 2 / 4)  # 1, 0.01
        y = rf.apply_rope(x, [1], freqs, 4, neox=False)[0, 0]
        c0, s0, c1, s1 = math.cos(1), math.sin(1), math.cos(0.01), math.sin(0.01)
        want = [1 * c0 - 2 * s0, 1 * s0 + 2 * c0, 3 * c1 - 4 * s1, 3 * s1 + 4 * c1]
        np.testing.assert_allclose(y, want, rtol=0, atol=1e-15)

    def test_hand_values_neox_pairs(self):
        x = np.array([1.0, 2.0, 3.0, 4.0]).reshape(1, 1, 4)
        freqs = np.array([1.0, 0.01])
        y = rf.apply_rope(x, [1], freqs, 4, neox=True)[0, 0]
        c0, s0, c1, s1 = math.cos(1), math.sin(1), math.cos(0.01), math.sin(0.01)
        # pairs (x0, x2) by 1 rad and (x1, x3) by 0.01 rad
        want = [1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 1 * s0 + 3 * c0, 2 * s1 + 4 * c1]
        np.testing.assert_allclose(y, want, rtol=0, atol=1e-15)

    def test_norm_preserved_and_partial_rotation(self):
        x = self.rng.standard_normal((6, 3, 16))
        cfg_freqs = 10000.0 ** (-np.arange(4) * 2 / 8)
        for neox in (False, True):
            y = rf.apply_rope(x, np.arange(6) * 37, cfg_freqs, 8, neox)
            np.testing.assert_allclose(np.linalg.norm(y[..., :8], axis=-1),
                                       np.linalg.norm(x[..., :8], axis=-1), rtol=1e-13)
            np.testing.assert_array_equal(y[..., 8:], x[..., 8:])
            np.testing.assert_allclose(y[0], x[0], rtol=0, atol=0)  # position 0 is identity

    def test_orders_differ(self):
        x = self.rng.standard_normal((2, 1, 8))
        freqs = 10000.0 ** (-np.arange(4) * 2 / 8)
        a = rf.apply_rope(x, [0, 5], freqs, 8, neox=False)
        b = rf.apply_rope(x, [0, 5], freqs, 8, neox=True)
        self.assertGreater(np.abs(a[1] - b[1]).max(), 0.1)

    def test_relative_position(self):
        # <R(m) q, R(n) k> depends only on m - n.
        q = self.rng.standard_normal((1, 1, 8))
        k = self.rng.standard_normal((1, 1, 8))
        freqs = 500.0 ** (-np.arange(4) * 2 / 8)
        for neox in (False, True):
            def dot(m, n):
                return float(np.sum(rf.apply_rope(q, [m], freqs, 8, neox)
                                    * rf.apply_rope(k, [n], freqs, 8, neox)))
            self.assertAlmostEqual(dot(10, 3), dot(107, 100), places=10)
            self.assertAlmostEqual(dot(3, 10), dot(0, 7), places=10)
            self.assertNotAlmostEqual(dot(10, 3), dot(10, 4), places=3)

    def test_llama3_divisors(self):
        class C:
            rope_scaling_factor = 8.0
            rope_low_freq_factor = 1.0
            rope_high_freq_factor = 4.0
            rope_orig_ctx = 8192.0
        freqs = 500000.0 ** (-np.arange(64) * 2 / 128)
        div = rf.llama3_freq_divisors(C, freqs)
        wavelen = 2 * math.pi / freqs
        np.testing.assert_array_equal(div[wavelen < 8192 / 4], 1.0)
        np.testing.assert_allclose(div[wavelen > 8192], 8.0)
        mid = (wavelen >= 2048) & (wavelen <= 8192)
        self.assertTrue(mid.any())
        self.assertTrue(np.all((div[mid] >= 1.0) & (div[mid] <= 8.0)))
        self.assertTrue(np.all(np.diff(div) >= -1e-12))  # lower frequency, more slowdown


class AttentionTest(unittest.TestCase):
    def test_rows_sum_to_one_and_causal(self):
        rng = np.random.default_rng(3)
        q = rng.standard_normal((7, 4, 8))
        k = rng.standard_normal((7, 2, 8))
        v = rng.standard_normal((7, 2, 8))
        out, probs = rf.causal_attention(q, k, v, 4, 2)
        np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-14)
        self.assertEqual(np.abs(np.triu(probs, k=1)).max(), 0.0)
        np.testing.assert_allclose(probs[:, 0, 0], 1.0)
        # Position 0 attends only to itself: output is its own value row (of its KV head).
        np.testing.assert_allclose(out[0, 0], v[0, 0])
        np.testing.assert_allclose(out[0, 1], v[0, 0])
        np.testing.assert_allclose(out[0, 2], v[0, 1])
        np.testing.assert_allclose(out[0, 3], v[0, 1])

    def test_gqa_head_mapping_by_hand(self):
        rng = np.random.default_rng(4)
        n, d = 5, 4
        q = rng.standard_normal((n, 6, d))
        k = rng.standard_normal((n, 3, d))
        v = rng.standard_normal((n, 3, d))
        out, _ = rf.causal_attention(q, k, v, 6, 3)
        for h in range(6):
            g = h // 2
            for t in range(n):
                s = [float(q[t, h] @ k[j, g]) / math.sqrt(d) for j in range(t + 1)]
                m = max(s)
                w = [math.exp(x - m) for x in s]
                z = sum(w)
                want = sum(w[j] / z * v[j, g] for j in range(t + 1))
                np.testing.assert_allclose(out[t, h], want, rtol=1e-12, atol=1e-14)


def naive_forward(meta, W, tokens):
    """Scalar-loop forward, one token at a time with an explicit KV cache, as a cross-check of
    ref_forward's vectorised one. Only for tiny models."""
    arch = meta["general.architecture"]

    def key(k, default=None):
        return meta.get(f"{arch}.{k}", default)

    n_layers = key("block_count")
    n_head = key("attention.head_count")
    n_kv = key("attention.head_count_kv", n_head)
    d_model = key("embedding_length")
    hd = key("attention.key_length", d_model // n_head)
    eps = key("attention.layer_norm_rms_epsilon")
    base = key("rope.freq_base", 10000.0)
    rd = key("rope.dimension_count", hd)
    neox = arch != "llama"

    def rms(vec, w):
        s = math.sqrt(sum(x * x for x in vec) / len(vec) + eps)
        return [vec[i] / s * w[i] for i in range(len(vec))]

    def matvec(m, vec):
        return [sum(m[r][c] * vec[c] for c in range(len(vec))) for r in range(len(m))]

    def rotate(vec, pos):
        out = list(vec)
        for i in range(rd // 2):
            theta = base ** (-2.0 * i / rd)
            if "rope_freqs.weight" in W:
                theta /= W["rope_freqs.weight"][i]
            a, b = (i, i + rd // 2) if neox else (2 * i, 2 * i + 1)
            c, s = math.cos(pos * theta), math.sin(pos * theta)
            out[a] = vec[a] * c - vec[b] * s
            out[b] = vec[a] * s + vec[b] * c
        return out

    cache = [([], []) for _ in range(n_layers)]  # per layer: keys[t][kv_head], values
    logits = []
    for pos, tok in enumerate(tokens):
        x = list(W["token_embd.weight"][tok])
        for L in range(n_layers):
            p = f"blk.{L}."
            h = rms(x, W[p + "attn_norm.weight"])
            q, k, v = (matvec(W[p + f"attn_{t}.weight"], h) for t in "qkv")
            if p + "attn_q.bias" in W:
                q = [a + b for a, b in zip(q, W[p + "attn_q.bias"])]
                k = [a + b for a, b in zip(k, W[p + "attn_k.bias"])]
                v = [a + b for a, b in zip(v, W[p + "attn_v.bias"])]
            qh = [q[i * hd:(i + 1) * hd] for i in range(n_head)]
            kh = [k[i * hd:(i + 1) * hd] for i in range(n_kv)]
            vh = [v[i * hd:(i + 1) * hd] for i in range(n_kv)]
            if p + "attn_q_norm.weight" in W:
                qh = [rms(a, W[p + "attn_q_norm.weight"]) for a in qh]
                kh = [rms(a, W[p + "attn_k_norm.weight"]) for a in kh]
            qh = [rotate(a, pos) for a in qh]
            kh = [rotate(a, pos) for a in kh]
            cache[L][0].append(kh)
            cache[L][1].append(vh)
            attn = []
            for hh in range(n_head):
                g = hh * n_kv // n_head
                scores = [sum(a * b for a, b in zip(qh[hh], cache[L][0][t][g])) / math.sqrt(hd)
                          for t in range(pos + 1)]
                m = max(scores)
                e = [math.exp(s - m) for s in scores]
                z = sum(e)
                attn += [sum(e[t] / z * cache[L][1][t][g][i] for t in range(pos + 1))
                         for i in range(hd)]
            o = matvec(W[p + "attn_output.weight"], attn)
            x = [a + b for a, b in zip(x, o)]
            h = rms(x, W[p + "ffn_norm.weight"])
            g_ = matvec(W[p + "ffn_gate.weight"], h)
            u = matvec(W[p + "ffn_up.weight"], h)
            act = [gg / (1 + math.exp(-gg)) * uu for gg, uu in zip(g_, u)]
            x = [a + b for a, b in zip(x, matvec(W[p + "ffn_down.weight"], act))]
        x = rms(x, W["output_norm.weight"])
        out_w = W.get("output.weight", W["token_embd.weight"])
        logits.append(matvec(out_w, x))
    return np.array(logits)


class ForwardTest(TmpDirCase):
    SMALL = dict(n_layers=2, d_model=16, n_heads=4, n_kv_heads=2, head_dim=6, d_ff=20, vocab=32)

    def model(self, name, **kw):
        args = dict(self.SMALL)
        args.update(kw)
        p = self.path(name)
        meta, _ = random_model(p, **args)
        m = rf.Model(p)
        return p, meta, m

    def test_matches_scalar_loop_forward(self):
        tokens = [1, 5, 9, 31, 0, 7, 7]
        for arch, extra in (("llama", {}), ("qwen2", {}), ("qwen3", {}),
                            ("llama", {"rope_base": 50.0}), ("qwen3", {"head_dim": 8}),
                            ("llama", {"extra_meta": {"llama.rope.dimension_count": 4}}),
                            ("qwen2", {"extra_meta": {"qwen2.rope.dimension_count": 4}})):
            with self.subTest(arch=arch, extra=extra):
                _, meta, m = self.model(f"{arch}.gguf", arch=arch, **extra)
                W = m.file.tensors()
                want = naive_forward(meta, W, tokens)
                got = m.forward(tokens)
                np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)

    def test_rope_freqs_tensor(self):
        tokens = [1, 2, 3, 4, 5, 6]
        div = np.array([1.0, 2.0, 8.0])
        _, meta, m = self.model("rf.gguf", extra_tensors=[("rope_freqs.weight", div)])
        want = naive_forward(meta, m.file.tensors(), tokens)
        np.testing.assert_allclose(m.forward(tokens), want, rtol=1e-10, atol=1e-10)
        # The same divisors from the llama3 keys give the same logits.
        extra = {"llama.rope.scaling.type": "llama3", "llama.rope.scaling.factor": 8.0,
                 "llama.rope.scaling.low_freq_factor": 1.0,
                 "llama.rope.scaling.high_freq_factor": 4.0,
                 "llama.rope.scaling.original_context_length": 64}
        _, _, m2 = self.model("keys.gguf", extra_meta=extra)
        d2 = rf.llama3_freq_divisors(m2.cfg, rf.rope_frequencies(
            type("C", (), {"rope_dim": 6, "rope_base": 10000.0, "rope_scaling": "none"})()))
        self.assertGreater(d2.max(), d2.min())  # the rule really changes something here
        _, _, m3 = self.model("tensor.gguf", extra_tensors=[("rope_freqs.weight", d2)])
        np.testing.assert_allclose(m2.forward(tokens), m3.forward(tokens), rtol=1e-6, atol=1e-6)
        _, _, m4 = self.model("plain.gguf")
        self.assertGreater(np.abs(m4.forward(tokens) - m3.forward(tokens)).max(), 1e-3)

    def test_gqa_equals_repeated_kv_heads(self):
        tokens = [1, 3, 30, 2, 9, 11, 4, 4, 17]
        p, meta, m = self.model("gqa.gguf", arch="qwen2", n_heads=6, n_kv_heads=2)
        W = m.file.tensors()
        hd, group = 6, 3
        meta2 = dict(meta)
        meta2["qwen2.attention.head_count_kv"] = 6
        for L in range(2):
            for t in ("k", "v"):
                w = W[f"blk.{L}.attn_{t}.weight"].reshape(2, hd, -1)
                W[f"blk.{L}.attn_{t}.weight"] = np.repeat(w, group, axis=0).reshape(6 * hd, -1)
                b = W[f"blk.{L}.attn_{t}.bias"].reshape(2, hd)
                W[f"blk.{L}.attn_{t}.bias"] = np.repeat(b, group, axis=0).reshape(-1)
        p2 = self.path("mha.gguf")
        write_gguf(p2, meta2, [(k, v, "F32") for k, v in W.items()])
        np.testing.assert_allclose(rf.Model(p2).forward(tokens), m.forward(tokens),
                                   rtol=1e-12, atol=1e-12)

    def test_tied_output(self):
        tokens = [1, 2, 3]
        p, meta, m = self.model("untied.gguf")
        W = m.file.tensors()
        W["output.weight"] = W["token_embd.weight"]
        p1 = self.path("copy.gguf")
        write_gguf(p1, meta, [(k, v, "F32") for k, v in W.items()])
        del W["output.weight"]
        p2 = self.path("tied.gguf")
        write_gguf(p2, meta, [(k, v, "F32") for k, v in W.items()])
        t2 = rf.Model(p2)
        self.assertTrue(t2.tied)
        np.testing.assert_array_equal(rf.Model(p1).forward(tokens), t2.forward(tokens))

    def test_causal_prefix_consistency(self):
        _, _, m = self.model("c.gguf", arch="qwen3")
        tokens = [1, 4, 8, 15, 16, 23, 31]
        full = m.forward(tokens)
        for i in (0, 3, 6):
            np.testing.assert_allclose(m.forward(tokens[:i + 1])[-1], full[i], rtol=1e-12,
                                       atol=1e-12)

    def test_quantised_weights_stay_close(self):
        tokens = [1, 2, 3, 4, 5, 6, 7, 8]
        ref = None
        for t, tol in (("F32", 0), ("F16", 2e-3), ("BF16", 2e-2), ("Q8_0", 2e-2), ("Q4_0", 0.3)):
            _, _, m = self.model(f"{t}.gguf", type_name=t, d_model=32, d_ff=64, head_dim=8)
            got = m.forward(tokens)
            if ref is None:
                ref = got
                continue
            err = np.abs(got - ref).max() / np.abs(ref).max()
            self.assertLessEqual(err, tol, t)
            self.assertGreater(err, 0, t)


class MoeTest(TmpDirCase):
    """qwen3moe: routing by hand, the expert tensor layout, and a reduction to the dense FFN."""

    def test_route_hand_values(self):
        # Logits ln(1..4): p = (0.1, 0.2, 0.3, 0.4); top-2 = (3, 2), renormalised to 4/7, 3/7.
        e, w = rf.route(np.log([1.0, 2.0, 3.0, 4.0]), 2)
        self.assertEqual(list(e), [3, 2])
        np.testing.assert_allclose(w, [4 / 7, 3 / 7], rtol=1e-12)
        e, w = rf.route(np.log([1.0, 2.0, 3.0, 4.0]), 4)
        np.testing.assert_allclose(w, [0.4, 0.3, 0.2, 0.1], rtol=1e-12)
        # Ties: the lower expert index first.
        e, w = rf.route([1.0, 1.0, 1.0, 1.0], 2)
        self.assertEqual(list(e), [0, 1])
        np.testing.assert_allclose(w, [0.5, 0.5], rtol=1e-12)
        e, w = rf.route([1.0, 0.0, 1.0, 0.0, 3.0], 3)
        self.assertEqual(list(e), [4, 0, 2])
        z = 1 + 2 * math.exp(-2)
        np.testing.assert_allclose(w, [1 / z, math.exp(-2) / z, math.exp(-2) / z], rtol=1e-12)

    def test_moe_ffn_by_loops(self):
        rng = np.random.default_rng(3)
        n, d, f, n_exp, k = 3, 5, 4, 6, 2
        h = rng.standard_normal((n, d))
        router = rng.standard_normal((n_exp, d))
        gate = rng.standard_normal((n_exp, f, d))
        up = rng.standard_normal((n_exp, f, d))
        down = rng.standard_normal((n_exp, d, f))
        got = rf.moe_ffn(h, router, gate, up, down, k)
        for t in range(n):
            logits = [sum(router[e][j] * h[t][j] for j in range(d)) for e in range(n_exp)]
            top = sorted(range(n_exp), key=lambda e: -logits[e])[:k]
            z = sum(math.exp(logits[e]) for e in top)
            want = [0.0] * d
            for e in top:
                act = []
                for i in range(f):
                    g = sum(gate[e][i][j] * h[t][j] for j in range(d))
                    u = sum(up[e][i][j] * h[t][j] for j in range(d))
                    act.append(g / (1 + math.exp(-g)) * u)
                for j in range(d):
                    want[j] += math.exp(logits[e]) / z * sum(down[e][j][i] * act[i]
                                                             for i in range(f))
            np.testing.assert_allclose(got[t], want, rtol=1e-10, atol=1e-12)

    def test_expert_tensor_layout(self):
        # ne = [cols, rows, n_experts]: numpy shape (n_experts, rows, cols), expert-major.
        p = self.path("e.gguf")
        arr = np.arange(3 * 4 * 2, dtype=np.float64).reshape(3, 4, 2)
        write_gguf(p, {"general.architecture": "qwen3moe"}, [("x", arr, "F32")])
        f = gguf_read.GGUFFile(p)
        self.assertEqual(f.infos["x"].ne, [2, 4, 3])
        np.testing.assert_array_equal(f.tensor("x"), arr)

    def test_identical_experts_reduce_to_dense_qwen3(self):
        # Routing weights sum to 1, so E copies of one FFN behind any router give the dense model.
        dense = self.path("dense.gguf")
        meta, t = random_model(dense, arch="qwen3", n_layers=2, d_model=16, n_heads=4,
                               n_kv_heads=2, head_dim=8, d_ff=20, vocab=32, seed=5)
        rng = np.random.default_rng(9)
        n_exp = 5
        moe_meta = {k.replace("qwen3.", "qwen3moe.", 1): v for k, v in meta.items()}
        moe_meta["general.architecture"] = "qwen3moe"
        moe_meta["qwen3moe.expert_count"] = n_exp
        moe_meta["qwen3moe.expert_used_count"] = 2
        moe_meta["qwen3moe.expert_feed_forward_length"] = 20
        tensors = []
        for name, arr in t.items():
            kind = name.split(".")[-2] if name.startswith("blk.") else ""
            if kind in ("ffn_gate", "ffn_up", "ffn_down"):
                tensors.append((name.replace(kind, kind + "_exps"),
                                np.stack([arr] * n_exp), "F32"))
                if kind == "ffn_gate":
                    tensors.append((name.replace("ffn_gate", "ffn_gate_inp"),
                                    rng.standard_normal((n_exp, 16)), "F32"))
            else:
                tensors.append((name, arr, "F32"))
        moe = self.path("moe.gguf")
        write_gguf(moe, moe_meta, tensors)
        tokens = [1, 4, 9, 16, 25, 3]
        m = rf.Model(moe)
        self.assertEqual(m.cfg.n_experts, n_exp)
        np.testing.assert_allclose(m.forward(tokens), rf.Model(dense).forward(tokens),
                                   rtol=1e-10, atol=1e-10)


class StoriesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = rf.Model(os.path.join(SHARED_DIR, "models", "stories260K.gguf"))

    def test_config(self):
        c = self.model.cfg
        self.assertEqual((c.arch, c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.head_dim,
                          c.d_ff, c.vocab_size, c.rope_dim, c.rope_base, c.rope_neox),
                         ("llama", 5, 64, 8, 4, 8, 172, 512, 8, 10000.0, False))
        self.assertAlmostEqual(c.rms_eps, 1e-5, places=12)

    def test_greedy_continuation(self):
        ids = rf.greedy(self.model, STORIES_PROMPT, len(STORIES_GREEDY_30))
        self.assertEqual(ids, STORIES_GREEDY_30)
        text = rf.decode_tokens(self.model.meta, STORIES_PROMPT + ids).strip()
        self.assertTrue(text.startswith(STORIES_TEXT), text)

    def test_neox_order_would_break_it(self):
        # Guards the pair order: the wrong one must change the greedy story.
        self.model.cfg.rope_neox = True
        try:
            ids = rf.greedy(self.model, STORIES_PROMPT, 12)
        finally:
            self.model.cfg.rope_neox = False
        self.assertNotEqual(ids, STORIES_GREEDY_30[:12])


class CheckLogitsPlumbingTest(TmpDirCase):
    def run_check(self, fault, model_path, n=12):
        env = dict(os.environ, MOCK_ENGINE_FAULT=fault)
        return subprocess.run(
            [sys.executable, os.path.join(HERE, "check_logits.py"), "--primekv",
             os.path.join(HERE, "mock_engine.py"), "--model", model_path, "--n-tokens", str(n),
             "--seed", "3"], capture_output=True, text=True, env=env, timeout=120)

    def test_pass_and_fail(self):
        p = self.path("m.gguf")
        random_model(p, arch="qwen3", n_layers=1, d_model=16, n_heads=2, n_kv_heads=1,
                     head_dim=8, d_ff=24, vocab=40)
        r = self.run_check("", p)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("PASS m.gguf", r.stdout)
        r = self.run_check("perturb:7", p)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("first at pos 7", r.stdout)
        for fault in ("short", "nan", "fail"):
            r = self.run_check(fault, p)
            self.assertEqual(r.returncode, 1, fault + r.stdout + r.stderr)
            self.assertIn("FAIL", r.stdout)

    def test_random_tokens_start_with_bos(self):
        import check_logits
        p = self.path("m.gguf")
        random_model(p, n_layers=1, d_model=16, n_heads=2, n_kv_heads=1, head_dim=8, d_ff=24,
                     vocab=40)
        m = rf.Model(p)
        a = check_logits.random_tokens(m, 50, 0)
        self.assertEqual(a[0], 1)
        self.assertEqual(a, check_logits.random_tokens(m, 50, 0))
        self.assertNotEqual(a, check_logits.random_tokens(m, 50, 1))
        self.assertTrue(all(0 <= t < 40 for t in a))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--shared-dir":
        SHARED_DIR = sys.argv[2]
        del sys.argv[1:3]
    unittest.main()
