"""The module's classes over the C API; _lib.py declares the C functions."""

import os
import weakref
from contextlib import suppress

import numpy as np

from . import _lib
from ._lib import C, PrimeKVError, check, raw_lib

__all__ = ["Model", "Session", "PrimeKVError", "presses", "score", "version", "api_version"]


def version():
    """The engine's version string."""
    return raw_lib().pk_version().decode()


def api_version():
    """The C API's version (PK_API_VERSION)."""
    return raw_lib().pk_api_version()


def presses():
    """Names of every press in the registry, in display order."""
    lib = raw_lib()
    return [lib.pk_press_name(i).decode() for i in range(lib.pk_press_count())]


def _tokens(tokens, what="tokens"):
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{what} must be integers, got {arr.dtype}")
    if arr.size and (arr.min() < -(2**31) or arr.max() >= 2**31):
        raise ValueError(f"{what}: an id does not fit 32 bits")
    return np.ascontiguousarray(arr, dtype=np.int32)


class _Handle:
    """A C handle: freed by close(), `with` or garbage collection; unusable once closed."""

    _what = "handle"
    _free = ""
    _h = None

    def _handle(self):
        if self._h is None:
            raise PrimeKVError(f"the {self._what} is closed")
        return self._h

    def close(self):
        if self._h is not None:
            getattr(self._lib, self._free)(self._h)
            self._h = None

    def __del__(self):
        with suppress(PrimeKVError):
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Model(_Handle):
    """A GGUF model. Share one between sessions (and threads); close() or `with` frees it."""

    _what = "model"
    _free = "pk_model_free"

    def __init__(self, path):
        self._lib = raw_lib()
        self._sessions = weakref.WeakSet()
        h = _lib.pk_model_p()
        check(self._lib.pk_model_load(os.fsencode(path), _lib.byref(h)))
        self._h = h
        info = C.pk_model_info()
        check(self._lib.pk_model_get_info(h, _lib.byref(info)))
        self.info = {
            "arch": info.arch.decode(),
            "n_layers": info.n_layers,
            "d_model": info.d_model,
            "n_heads": info.n_heads,
            "n_kv_heads": info.n_kv_heads,
            "head_dim": info.head_dim,
            "vocab_size": info.vocab_size,
            "context_length": info.context_length,
            "bos": info.bos,
            "eos": info.eos,
        }

    def close(self):
        """Frees the model; its sessions must be closed first (they run on it)."""
        open_sessions = [x for x in self._sessions if x._h is not None]
        if open_sessions:
            raise PrimeKVError(f"close the model's {len(open_sessions)} open session(s) first")
        super().close()

    def tokenize(self, text, add_bos=True):
        """Token ids of `text`, as `primekv generate -p` encodes a prompt."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        n = _lib.c_size_t()
        cap = len(data) + 8
        while True:
            buf = (_lib.c_int32 * cap)()
            st = self._lib.pk_tokenize(self._handle(), data, len(data), int(add_bos), buf, cap,
                                       _lib.byref(n))
            if st == _lib.PK_ERR_BUFFER:
                cap = n.value
                continue
            check(st)
            return list(buf[: n.value])

    def detokenize(self, tokens):
        """The text of `tokens` (UTF-8; invalid bytes replaced)."""
        ids = _tokens(tokens)
        n = _lib.c_size_t()
        cap = 16 * len(ids) + 16
        while True:
            buf = _lib.create_string_buffer(cap)
            st = self._lib.pk_detokenize(self._handle(), _lib.int_ptr(ids), len(ids), buf, cap,
                                         _lib.byref(n))
            if st == _lib.PK_ERR_BUFFER:
                cap = n.value
                continue
            check(st)
            return buf.raw[: n.value].decode("utf-8", errors="replace")

    def session(self, **options):
        """A new Session on this model (see Session)."""
        return Session(self, **options)


class Session(_Handle):
    """One conversation over one KV cache.

    press/ratio: the press spec ("primekv", "snapkv:window=32", ...) and the fraction of the
    cache a compression removes. mode: when the session compresses by itself ("context": after
    feed_context; "multiturn": also after each end_turn back to that budget; "chunked";
    "decode"). threads: forward-pass threads of this session (0 = all cores).
    """

    _what = "session"
    _free = "pk_session_free"

    def __init__(self, model, press="none", ratio=0.0, mode="context", chunk=512, interval=512,
                 threads=0, ctx_size=0, kv_q8=False, _handle=None):
        self._lib = raw_lib()
        self.model = model  # keeps the model alive while the session is
        if _handle is not None:
            self._h = _handle
            model._sessions.add(self)
            return
        opts = _session_options(chunk, interval, threads, ctx_size, kv_q8)
        opts.press = press.encode()
        opts.ratio = float(ratio)
        opts.mode = mode.encode()
        h = _lib.pk_session_p()
        check(self._lib.pk_session_new(model._handle(), _lib.byref(opts), _lib.byref(h)))
        self._h = h
        model._sessions.add(self)

    @classmethod
    def load(cls, model, path, threads=0, ctx_size=0, kv_q8=False):
        """A session from a file of save() or of `primekv serve --session-dir` (no API keys)."""
        lib = raw_lib()
        opts = _session_options(512, 512, threads, ctx_size, kv_q8)
        h = _lib.pk_session_p()
        check(lib.pk_session_load(model._handle(), os.fsencode(path), _lib.byref(opts),
                                  _lib.byref(h)))
        return cls(model, _handle=h)

    def feed(self, tokens):
        """Runs tokens through the model into the cache (no compression)."""
        ids = _tokens(tokens)
        check(self._lib.pk_session_feed(self._handle(), _lib.int_ptr(ids), len(ids)))

    def feed_context(self, tokens):
        """The conversation's context: prefilled and compressed as the session's mode says."""
        ids = _tokens(tokens)
        check(self._lib.pk_session_feed_context(self._handle(), _lib.int_ptr(ids), len(ids)))

    def compress(self, ratio=None):
        """Compresses the whole cache now (by the session's ratio when none is given)."""
        r = -1.0 if ratio is None else float(ratio)
        check(self._lib.pk_session_compress(self._handle(), r))

    def generate(self, max_tokens=128, temperature=0.0, top_k=0, top_p=1.0, seed=0,
                 feed_last=False):
        """Generated token ids (greedy by default). Without feed_last the last one is not in the
        cache: feed it, or pass feed_last=True, before generating again."""
        if not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError("max_tokens must be an int >= 0")
        g = raw_lib().pk_generate_options_default()
        g.max_tokens = max_tokens
        g.temperature = float(temperature)
        g.top_k = int(top_k)
        g.top_p = float(top_p)
        g.seed = int(seed)
        g.feed_last = int(bool(feed_last))
        buf = (_lib.c_int32 * max(1, max_tokens))()
        n = _lib.c_size_t()
        check(self._lib.pk_session_generate(self._handle(), _lib.byref(g), buf, max_tokens,
                                            _lib.byref(n)))
        return list(buf[: n.value])

    def end_turn(self):
        """After a turn: a "multiturn" session over its budget compresses back to it."""
        check(self._lib.pk_session_end_turn(self._handle()))

    @property
    def tokens(self):
        n = _lib.c_size_t()
        check(self._lib.pk_session_n_tokens(self._handle(), _lib.byref(n)))
        buf = (_lib.c_int32 * max(1, n.value))()
        check(self._lib.pk_session_tokens(self._handle(), buf, n.value, _lib.byref(n)))
        return list(buf[: n.value])

    def kv_bytes(self):
        """Bytes the KV cache holds now."""
        n = _lib.c_size_t()
        check(self._lib.pk_session_kv_bytes(self._handle(), _lib.byref(n)))
        return n.value

    def kv_entries(self):
        """Entries the cache keeps, summed over layers and KV heads."""
        n = _lib.c_int64()
        check(self._lib.pk_session_kv_entries(self._handle(), _lib.byref(n)))
        return n.value

    def timings(self):
        t = C.pk_timings()
        check(self._lib.pk_session_get_timings(self._handle(), _lib.byref(t)))
        return {name: getattr(t, name) for name, _ in C.pk_timings._fields_}

    def save(self, directory, session_id):
        """Writes directory/<session_id>.pkvs, which `primekv serve --session-dir` continues."""
        check(self._lib.pk_session_save(self._handle(), os.fsencode(directory),
                                        session_id.encode()))


def _session_options(chunk, interval, threads, ctx_size, kv_q8):
    o = raw_lib().pk_session_options_default()
    for name, v in (("chunk", chunk), ("interval", interval), ("n_threads", threads),
                    ("ctx_size", ctx_size)):
        if not isinstance(v, int):
            raise TypeError(f"{name} must be an int")
        setattr(o, name, v)
    o.kv_q8 = int(bool(kv_q8))
    return o


def _floats(x, name, ndim):
    """x (numpy or torch, any floating dtype) as a C-contiguous float32 array of `ndim` dims."""
    if x is None:
        return None
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor, without importing torch
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, got {x.dtype}")
        x = x.detach().cpu().float().numpy()
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(f"{name} must be floating point, got {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.float32)


def _ints(x, name, length):
    if x is None:
        return None
    arr = np.asarray(x)
    if arr.shape != (length,) or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be {length} integers, got {arr.dtype} {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.int32)


def _rows(q):
    """(heads, t, d) -> (t, heads * d): one row per token, the engine's query layout."""
    h, t, d = q.shape
    return np.ascontiguousarray(q.transpose(1, 0, 2).reshape(t, h * d))


def score(press, keys, values, queries=None, *, positions=None, window_positions=None, wo=None,
          context_queries=None, context_positions=None, future_queries=None, next_position=None,
          rope_base=10000.0, rope_half=False, layer=0, n_layers=1, **params):
    """Scores of `press` for every cached entry, as the engine scores one layer.

    keys, values: (batch, kv_heads, tokens, head_dim), keys after RoPE (kvpress's shapes; numpy
    arrays or torch tensors). queries: (batch, heads, window, head_dim) after RoPE, the last
    `window` tokens' queries (SnapKV-like presses). wo: W_O (d_model, heads * head_dim), for
    PrimeKV. context_queries: (batch, heads, t, head_dim) before RoPE (ExpectedAttention).
    future_queries: (batch, heads, t, head_dim) after RoPE, the queries to come (oracle).
    params: the press's parameters, e.g. window=32. Returns float32 (batch, kv_heads, tokens).
    """
    if not isinstance(press, str):
        raise TypeError("press must be a str")
    spec = press
    if params:
        spec += (":" if ":" not in press else ",") + ",".join(f"{k}={v}" for k, v in params.items())
    k = _floats(keys, "keys", 4)
    v = _floats(values, "values", 4)
    if k.shape != v.shape:
        raise ValueError(f"keys {k.shape} and values {v.shape} differ in shape")
    b, hkv, n, d = k.shape
    q = _floats(queries, "queries", 4)
    cq = _floats(context_queries, "context_queries", 4)
    fq = _floats(future_queries, "future_queries", 4)
    w = _floats(wo, "wo", 2)
    for name, arr in (("queries", q), ("context_queries", cq), ("future_queries", fq)):
        if arr is not None and (arr.shape[0] != b or arr.shape[3] != d):
            raise ValueError(f"{name} {arr.shape} does not match keys {k.shape}")
    given = [a.shape[1] for a in (q, cq, fq) if a is not None]
    if len(set(given)) > 1:
        raise ValueError(f"the query arrays differ in heads: {given}")
    heads = given[0] if given else w.shape[1] // d if w is not None else hkv
    if heads % hkv != 0:
        raise ValueError(f"query heads {heads} are not a multiple of kv_heads {hkv}")
    if w is not None and w.shape[1] != heads * d:
        raise ValueError(f"wo {w.shape} must be (d_model, heads * head_dim = {heads * d})")
    pos = _ints(positions, "positions", n)
    nxt = n if next_position is None else int(next_position)
    wpos = None
    if q is not None:
        wpos = _ints(window_positions, "window_positions", q.shape[2])
        if wpos is None:
            wpos = np.arange(nxt - q.shape[2], nxt, dtype=np.int32)
    cpos = None
    if cq is not None:
        cpos = _ints(context_positions, "context_positions", cq.shape[2])
        if cpos is None:
            cpos = np.arange(cq.shape[2], dtype=np.int32)
    lib = raw_lib()
    out = np.empty((b, hkv, n), dtype=np.float32)
    for i in range(b):
        x = lib.pk_score_input_default()
        x.n_heads, x.n_kv_heads, x.head_dim, x.n = heads, hkv, d, n
        kb, vb = np.ascontiguousarray(k[i]), np.ascontiguousarray(v[i])
        keep = [kb, vb]
        x.keys, x.values = _lib.float_ptr(kb), _lib.float_ptr(vb)
        if pos is not None:
            x.positions = _lib.int_ptr(pos)
        x.next_position = nxt
        x.rope_base = float(rope_base)
        x.rope_half = int(bool(rope_half))
        x.layer, x.n_layers = int(layer), int(n_layers)
        if q is not None:
            rows = _rows(q[i])
            keep.append(rows)
            x.window_queries, x.window_positions, x.n_window = (
                _lib.float_ptr(rows), _lib.int_ptr(wpos), rows.shape[0])
        if w is not None:
            x.wo, x.d_model = _lib.float_ptr(w), w.shape[0]
        if cq is not None:
            rows = _rows(cq[i])
            keep.append(rows)
            x.context_queries, x.context_positions, x.n_context = (
                _lib.float_ptr(rows), _lib.int_ptr(cpos), rows.shape[0])
        if fq is not None:
            rows = _rows(fq[i])
            keep.append(rows)
            x.future_queries, x.n_future = _lib.float_ptr(rows), rows.shape[0]
        check(lib.pk_score(spec.encode(), _lib.byref(x), _lib.float_ptr(out[i]), hkv * n))
        del keep
    return out

