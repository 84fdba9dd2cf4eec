#!/usr/bin/python3
"""Test-only GGUF v3 writer, used by test_ref_selfcheck.py to build small models by hand.

Not a general tool: it writes exactly what the self-checks need (scalar, string and array
metadata; F32/F16/BF16/Q8_0/Q4_0 tensors) and quantises with simple round-to-nearest rules.
"""

import struct

import numpy as np

from gguf_read import (GGML_BF16, GGML_F16, GGML_F32, GGML_Q4_0, GGML_Q8_0,
                       T_ARRAY, T_BOOL, T_F32, T_I32, T_STRING, T_U32, _SCALAR_FORMATS)

TYPE_BY_NAME = {"F32": GGML_F32, "F16": GGML_F16, "BF16": GGML_BF16, "Q8_0": GGML_Q8_0,
                "Q4_0": GGML_Q4_0}


class Typed:
    """A metadata value with an explicit GGUF type code (else the type is inferred)."""

    def __init__(self, vtype, value, elem_type=None):
        self.vtype = vtype
        self.value = value
        self.elem_type = elem_type  # for arrays


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _infer_type(v):
    if isinstance(v, bool):
        return T_BOOL
    if isinstance(v, int):
        return T_U32 if v >= 0 else T_I32
    if isinstance(v, float):
        return T_F32
    if isinstance(v, str):
        return T_STRING
    if isinstance(v, (list, tuple)):
        return T_ARRAY
    raise TypeError(f"cannot infer GGUF type of {v!r}")


def _value(vtype, v, elem_type=None):
    if vtype in _SCALAR_FORMATS:
        return struct.pack(_SCALAR_FORMATS[vtype], v)
    if vtype == T_STRING:
        return _str(v)
    if vtype == T_ARRAY:
        if elem_type is None:
            elem_type = _infer_type(v[0]) if len(v) else T_U32
            if elem_type == T_U32 and any(x < 0 for x in v):
                elem_type = T_I32
        body = b"".join(_value(elem_type, x) for x in v)
        return struct.pack("<IQ", elem_type, len(v)) + body
    raise TypeError(vtype)


def quantize(x, type_name):
    """Returns the raw bytes of flat float array x stored as type_name."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    t = TYPE_BY_NAME[type_name]
    if t == GGML_F32:
        return x.astype("<f4").tobytes()
    if t == GGML_F16:
        return x.astype("<f2").tobytes()
    if t == GGML_BF16:
        bits = x.astype("<f4").view("<u4")
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        return rounded.astype("<u2").tobytes()
    blocks = x.reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1)
    if t == GGML_Q8_0:
        d = (amax / 127.0).astype(np.float16)
        inv = np.where(d != 0, 1.0 / np.where(d != 0, d.astype(np.float64), 1.0), 0.0)
        q = np.clip(np.rint(blocks * inv[:, None]), -127, 127).astype(np.int8)
        out = np.zeros((blocks.shape[0], 34), dtype=np.uint8)
        out[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
        out[:, 2:] = q.view(np.uint8)
        return out.tobytes()
    # Q4_0: the signed extreme maps to nibble 0 (q = -8); the other side clips at q = 7.
    extreme = blocks[np.arange(blocks.shape[0]), np.argmax(np.abs(blocks), axis=1)]
    d = (extreme / -8.0).astype(np.float16)
    dd = d.astype(np.float64)
    inv = np.where(dd != 0, 1.0 / np.where(dd != 0, dd, 1.0), 0.0)
    q = np.clip(np.rint(blocks * inv[:, None]) + 8, 0, 15).astype(np.uint8)
    out = np.zeros((blocks.shape[0], 18), dtype=np.uint8)
    out[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.tobytes()


def write_gguf(path, metadata, tensors, alignment=32, version=3):
    """metadata: {key: value or Typed(gguf_type, value)}; tensors: [(name, array, type_name)].

    Array shapes are numpy order, i.e. reversed(ne); a (out, in) matrix gets ne = [in, out].
    """
    meta = dict(metadata)
    if alignment != 32:
        meta["general.alignment"] = Typed(T_U32, alignment)
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(meta))
    kv = b""
    for key, v in meta.items():
        if isinstance(v, Typed):
            vtype, val, elem = v.vtype, v.value, v.elem_type
        else:
            vtype, val, elem = _infer_type(v), v, None
        kv += _str(key) + struct.pack("<I", vtype) + _value(vtype, val, elem)
    infos = b""
    blobs = []
    offset = 0
    for name, arr, type_name in tensors:
        arr = np.asarray(arr)
        ne = list(reversed(arr.shape))
        raw = quantize(arr, type_name)
        infos += _str(name) + struct.pack("<I", len(ne))
        infos += b"".join(struct.pack("<Q", n) for n in ne)
        infos += struct.pack("<IQ", TYPE_BY_NAME[type_name], offset)
        blobs.append((offset, raw))
        offset += len(raw)
        offset = (offset + alignment - 1) // alignment * alignment
    header = head + kv + infos
    data_start = (len(header) + alignment - 1) // alignment * alignment
    with open(path, "wb") as f:
        f.write(header)
        f.write(b"\0" * (data_start - len(header)))
        for off, raw in blobs:
            f.seek(data_start + off)
            f.write(raw)


def random_model(path, arch="llama", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2,
                 head_dim=16, d_ff=96, vocab=128, type_name="F32", seed=0, rope_base=10000.0,
                 tied=False, extra_meta=None, extra_tensors=()):
    """A random-weight model in the layout ref_forward.py reads. Returns (metadata, tensors)."""
    rng = np.random.default_rng(seed)

    def mat(rows, cols):
        return rng.standard_normal((rows, cols)) / np.sqrt(cols)

    def norm_w(n):
        return 1.0 + 0.1 * rng.standard_normal(n)

    a = arch
    meta = {
        "general.architecture": arch,
        f"{a}.block_count": n_layers,
        f"{a}.embedding_length": d_model,
        f"{a}.feed_forward_length": d_ff,
        f"{a}.attention.head_count": n_heads,
        f"{a}.attention.head_count_kv": n_kv_heads,
        f"{a}.attention.key_length": head_dim,
        f"{a}.attention.value_length": head_dim,
        f"{a}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{a}.rope.freq_base": float(rope_base),
        f"{a}.context_length": 256,
        "tokenizer.ggml.bos_token_id": 1,
    }
    meta.update(extra_meta or {})
    t = {"token_embd.weight": rng.standard_normal((vocab, d_model)),
         "output_norm.weight": norm_w(d_model)}
    if not tied:
        t["output.weight"] = mat(vocab, d_model)
    for L in range(n_layers):
        p = f"blk.{L}."
        t[p + "attn_norm.weight"] = norm_w(d_model)
        t[p + "attn_q.weight"] = mat(n_heads * head_dim, d_model)
        t[p + "attn_k.weight"] = mat(n_kv_heads * head_dim, d_model)
        t[p + "attn_v.weight"] = mat(n_kv_heads * head_dim, d_model)
        t[p + "attn_output.weight"] = mat(d_model, n_heads * head_dim)
        if arch == "qwen2":
            t[p + "attn_q.bias"] = 0.1 * rng.standard_normal(n_heads * head_dim)
            t[p + "attn_k.bias"] = 0.1 * rng.standard_normal(n_kv_heads * head_dim)
            t[p + "attn_v.bias"] = 0.1 * rng.standard_normal(n_kv_heads * head_dim)
        if arch == "qwen3":
            t[p + "attn_q_norm.weight"] = norm_w(head_dim)
            t[p + "attn_k_norm.weight"] = norm_w(head_dim)
        t[p + "ffn_norm.weight"] = norm_w(d_model)
        t[p + "ffn_gate.weight"] = mat(d_ff, d_model)
        t[p + "ffn_up.weight"] = mat(d_ff, d_model)
        t[p + "ffn_down.weight"] = mat(d_model, d_ff)
    for name, arr in extra_tensors:
        t[name] = np.asarray(arr, dtype=np.float64)
    # Norm weights, biases and other vectors stay F32, as converters do.
    write_gguf(path, meta, [(name, arr, type_name if arr.ndim == 2 else "F32")
                            for name, arr in t.items()])
    return meta, t
