"""The module's classes over the C API; _lib.py declares the C functions."""

import os
import threading
import weakref
from contextlib import contextmanager, suppress

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


_INT32 = (-(2**31), 2**31 - 1)


def _int(name, v, lo=_INT32[0], hi=_INT32[1]):
    """v as a Python int in [lo, hi]: ctypes would wrap a larger one at 32 bits silently."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    v = int(v)
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {v}")
    return v


def _bool(name, v):
    if not isinstance(v, (bool, np.bool_)) and not (isinstance(v, (int, np.integer)) and v in (0, 1)):
        raise TypeError(f"{name} must be a bool, got {v!r}")
    return bool(v)


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
    """A C handle: freed by close(), `with` or garbage collection; unusable once closed.

    Every call on the handle runs inside _use(), which counts the calls in flight: close()
    refuses while another thread is inside one, instead of freeing what that call is using."""

    _what = "handle"
    _free = ""
    _h = None
    _calls = 0

    def _init_handle(self):
        self._lib = raw_lib()
        self._lock = threading.Lock()

    @contextmanager
    def _use(self):
        with self._lock:
            if self._h is None:
                raise PrimeKVError(f"the {self._what} is closed")
            self._calls += 1
            h = self._h
        try:
            yield h
        finally:
            with self._lock:
                self._calls -= 1

    def close(self):
        lock = self.__dict__.get("_lock")
        if lock is None:  # __init__ failed before the handle existed
            return
        with lock:
            if self._calls:
                raise PrimeKVError(f"the {self._what} is in use by a call on another thread: close it "
                                   "after that call returns")
            h, self._h = self._h, None
        if h is not None:
            getattr(self._lib, self._free)(h)

    def __del__(self):
        with suppress(PrimeKVError):
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _c_string(value, what):
    """`value` (a str) as the NUL-terminated bytes the C API reads. C stops at the first NUL, so
    a string holding one would arrive cut short (press="knorm\\0junk" would run knorm)."""
    return _no_nul(value.encode(), what)


def _c_path(path, what):
    """A path (str, bytes or os.PathLike) as the C API reads it; see _c_string."""
    return _no_nul(os.fsencode(path), what)


def _no_nul(data, what):
    if b"\0" in data:
        raise ValueError(f"{what} holds a NUL character, which C would read as its end")
    return data


class Model(_Handle):
    """A GGUF model. Share one between sessions (and threads); close() or `with` frees it."""

    _what = "model"
    _free = "pk_model_free"

    def __init__(self, path):
        self._init_handle()
        self._sessions = weakref.WeakSet()
        h = _lib.pk_model_p()
        check(self._lib.pk_model_load(_c_path(path, "path"), _lib.byref(h)))
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
        if self.__dict__.get("_sessions") is not None:
            open_sessions = [x for x in self._sessions if x._h is not None]
            if open_sessions:
                raise PrimeKVError(f"close the model's {len(open_sessions)} open session(s) first")
        super().close()

    def tokenize(self, text, add_bos=True):
        """Token ids of `text`, as `primekv generate -p` encodes a prompt."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        n = _lib.c_size_t()
        cap = len(data) + 8
        with self._use() as h:
            while True:
                buf = np.empty(cap, dtype=np.int32)
                st = self._lib.pk_tokenize(h, data, len(data), int(add_bos), _lib.int_ptr(buf), cap,
                                           _lib.byref(n))
                if st == _lib.PK_ERR_BUFFER:
                    cap = n.value
                    continue
                check(st)
                return buf[: n.value].tolist()

    def detokenize(self, tokens):
        """The text of `tokens` (UTF-8; invalid bytes replaced)."""
        ids = _tokens(tokens)
        n = _lib.c_size_t()
        cap = 16 * len(ids) + 16
        with self._use() as h:
            while True:
                buf = _lib.create_string_buffer(cap)
                st = self._lib.pk_detokenize(h, _lib.int_ptr(ids), len(ids), buf, cap, _lib.byref(n))
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
        self._init_handle()
        self.model = model  # keeps the model alive while the session is
        self._ctx = ctx_size or model.info["context_length"]
        if _handle is not None:
            self._h = _handle
            model._sessions.add(self)
            return
        opts = _session_options(chunk, interval, threads, ctx_size, kv_q8)
        if not isinstance(press, str) or not isinstance(mode, str):
            raise TypeError("press and mode must be str")
        opts.press = _c_string(press, "press")
        opts.ratio = float(ratio)
        opts.mode = _c_string(mode, "mode")
        h = _lib.pk_session_p()
        with model._use() as mh:
            check(self._lib.pk_session_new(mh, _lib.byref(opts), _lib.byref(h)))
        self._h = h
        model._sessions.add(self)

    @classmethod
    def load(cls, model, path, threads=0, ctx_size=0, kv_q8=False):
        """A session from a file of save() or of `primekv serve --session-dir` (no API keys)."""
        lib = raw_lib()
        opts = _session_options(512, 512, threads, ctx_size, kv_q8)
        h = _lib.pk_session_p()
        with model._use() as mh:
            check(lib.pk_session_load(mh, _c_path(path, "path"), _lib.byref(opts), _lib.byref(h)))
        return cls(model, ctx_size=ctx_size, _handle=h)

    def feed(self, tokens):
        """Runs tokens through the model into the cache (no compression)."""
        ids = _tokens(tokens)
        with self._use() as h:
            check(self._lib.pk_session_feed(h, _lib.int_ptr(ids), len(ids)))

    def feed_context(self, tokens):
        """The conversation's context: prefilled and compressed as the session's mode says."""
        ids = _tokens(tokens)
        with self._use() as h:
            check(self._lib.pk_session_feed_context(h, _lib.int_ptr(ids), len(ids)))

    def compress(self, ratio=None):
        """Compresses the whole cache now (by the session's ratio when none is given)."""
        r = -1.0 if ratio is None else float(ratio)
        with self._use() as h:
            check(self._lib.pk_session_compress(h, r))

    def generate(self, max_tokens=128, temperature=0.0, top_k=0, top_p=1.0, seed=0,
                 feed_last=False):
        """Generated token ids (greedy by default). Without feed_last the last one is not in the
        cache: feed it, or pass feed_last=True, before generating again."""
        g = raw_lib().pk_generate_options_default()
        g.max_tokens = _int("max_tokens", max_tokens, 0)
        g.temperature = float(temperature)
        g.top_k = _int("top_k", top_k, 0)
        g.top_p = float(top_p)
        g.seed = _int("seed", seed, 0, 2**64 - 1)
        g.feed_last = int(_bool("feed_last", feed_last))
        with self._use() as h:
            # No more than the free context can be generated: the buffer is no larger.
            used = _lib.c_size_t()
            check(self._lib.pk_session_n_tokens(h, _lib.byref(used)))
            cap = max(0, min(g.max_tokens, self._ctx - used.value))
            buf = (_lib.c_int32 * max(1, cap))()
            n = _lib.c_size_t()
            check(self._lib.pk_session_generate(h, _lib.byref(g), buf, cap, _lib.byref(n)))
        return list(buf[: n.value])

    def end_turn(self):
        """After a turn: a "multiturn" session over its budget compresses back to it."""
        with self._use() as h:
            check(self._lib.pk_session_end_turn(h))

    @property
    def tokens(self):
        n = _lib.c_size_t()
        with self._use() as h:
            check(self._lib.pk_session_n_tokens(h, _lib.byref(n)))
            buf = (_lib.c_int32 * max(1, n.value))()
            check(self._lib.pk_session_tokens(h, buf, n.value, _lib.byref(n)))
        return list(buf[: n.value])

    def kv_bytes(self):
        """Bytes the KV cache holds now."""
        n = _lib.c_size_t()
        with self._use() as h:
            check(self._lib.pk_session_kv_bytes(h, _lib.byref(n)))
        return n.value

    def kv_entries(self):
        """Entries the cache keeps, summed over layers and KV heads."""
        n = _lib.c_int64()
        with self._use() as h:
            check(self._lib.pk_session_kv_entries(h, _lib.byref(n)))
        return n.value

    def timings(self):
        t = C.pk_timings()
        with self._use() as h:
            check(self._lib.pk_session_get_timings(h, _lib.byref(t)))
        return {name: getattr(t, name) for name, _ in C.pk_timings._fields_}

    def save(self, directory, session_id):
        """Writes directory/<session_id>.pkvs, which `primekv serve --session-dir` continues;
        the directory is created when missing."""
        if not isinstance(session_id, str):
            raise TypeError("session_id must be a str")
        directory = _c_path(directory, "directory")
        session_id = _c_string(session_id, "session_id")
        if not directory:
            raise ValueError("directory is empty (use '.' for the current directory)")
        os.makedirs(directory, exist_ok=True)
        with self._use() as h:
            check(self._lib.pk_session_save(h, directory, session_id))


def _session_options(chunk, interval, threads, ctx_size, kv_q8):
    o = raw_lib().pk_session_options_default()
    for name, v in (("chunk", chunk), ("interval", interval), ("n_threads", threads),
                    ("ctx_size", ctx_size)):
        setattr(o, name, _int(name if name != "n_threads" else "threads", v))
    o.kv_q8 = int(_bool("kv_q8", kv_q8))
    return o


# The largest array score() copies (4 GiB as float32): shapes are checked before any copy, so
# a broadcast view of a huge shape is refused instead of materialised.
_MAX_ELEMENTS = 2**30


def _shape_ok(name, shape, ndim):
    shape = tuple(int(n) for n in shape)
    if len(shape) != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {shape}")
    if min(shape) < 1:
        raise ValueError(f"{name} has an empty dimension: shape {shape}")
    if int(np.prod(shape, dtype=np.float64)) > _MAX_ELEMENTS:
        raise ValueError(f"{name} of shape {shape} is larger than {_MAX_ELEMENTS} elements")


def _floats(x, name, ndim):
    """x (numpy or torch, any floating dtype) as a C-contiguous float32 array of `ndim` dims,
    every value finite in float32 (a float64 beyond float32's range would become inf)."""
    if x is None:
        return None
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor, without importing torch
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, got {x.dtype}")
        _shape_ok(name, x.shape, ndim)
        x = x.detach().cpu().float().numpy()
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(f"{name} must be floating point, got {arr.dtype}")
    _shape_ok(name, arr.shape, ndim)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(out).all():
        raise ValueError(f"{name} holds values that are not finite in float32 (NaN, Inf, or beyond "
                         "float32's range)")
    return out


def _ints(x, name, length):
    if x is None:
        return None
    arr = np.asarray(x)
    if arr.shape != (length,) or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be {length} integers, got {arr.dtype} {arr.shape}")
    if arr.size and (arr.min() < _INT32[0] or arr.max() > _INT32[1]):
        raise ValueError(f"{name}: a value does not fit 32 bits")
    return np.ascontiguousarray(arr, dtype=np.int32)


def _param(key, value):
    """One `key=value` of a press spec; a value cannot carry a second parameter or press."""
    if not key.isidentifier():
        raise ValueError(f"press parameter name {key!r} is not an identifier")
    text = str(value)
    if not text or any(c in text for c in ",:;= \t\r\n"):
        raise ValueError(f"press parameter {key}={text!r}: a value may not be empty or hold "
                         "',', ':', ';', '=' or whitespace")
    return f"{key}={text}"


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
        spec += (":" if ":" not in press else ",") + ",".join(_param(k, v) for k, v in params.items())
    c_spec = _c_string(spec, "press")
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
    nxt = n if next_position is None else _int("next_position", next_position)
    layer, n_layers = _int("layer", layer), _int("n_layers", n_layers)
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
        x.layer, x.n_layers = layer, n_layers
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
        check(lib.pk_score(c_spec, _lib.byref(x), _lib.float_ptr(out[i]), hkv * n))
        del keep
    return out

