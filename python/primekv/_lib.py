"""ctypes declarations of include/primekv.h, and where libprimekv_c.so is found."""

import ctypes
import ctypes.util
import os
from ctypes import (POINTER, Structure, byref, c_char_p, c_double, c_float, c_int, c_int32,
                    c_int64, c_size_t, c_uint64, c_void_p, create_string_buffer)

__all__ = ["byref", "c_int32", "c_int64", "c_size_t", "create_string_buffer"]

PK_API_VERSION = 1
PK_OK, PK_ERR_ARGUMENT, PK_ERR_IO, PK_ERR_STATE, PK_ERR_BUFFER, PK_ERR_INTERNAL = range(6)
_STATUS = {1: "argument", 2: "io", 3: "state", 4: "buffer", 5: "internal"}


class PrimeKVError(RuntimeError):
    """A failed call: `kind` is "argument", "io", "state", "buffer" or "internal"."""

    def __init__(self, message, kind="state"):
        super().__init__(message)
        self.kind = kind


class ArgumentError(PrimeKVError, ValueError):
    """A bad argument (shape, dtype, value, press spec): also a ValueError."""

    def __init__(self, message):
        super().__init__(message, "argument")


class C:
    """The C structs."""

    class pk_model_info(Structure):
        _fields_ = [("arch", c_char_p)] + [(n, c_int) for n in (
            "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "vocab_size",
            "context_length")] + [("bos", c_int32), ("eos", c_int32)]

    class pk_session_options(Structure):
        _fields_ = [("press", c_char_p), ("ratio", c_double), ("mode", c_char_p),
                    ("chunk", c_int), ("interval", c_int), ("n_threads", c_int),
                    ("ctx_size", c_int), ("kv_q8", c_int)]

    class pk_generate_options(Structure):
        _fields_ = [("max_tokens", c_int), ("temperature", c_float), ("top_k", c_int),
                    ("top_p", c_float), ("seed", c_uint64), ("feed_last", c_int)]

    class pk_timings(Structure):
        _fields_ = [("prefill_ms", c_double), ("decode_ms", c_double), ("score_ms", c_double),
                    ("prefill_tokens", c_int64), ("decode_tokens", c_int64),
                    ("compressions", c_int)]

    class pk_score_input(Structure):
        _fields_ = [("n_heads", c_int), ("n_kv_heads", c_int), ("head_dim", c_int), ("n", c_int),
                    ("keys", POINTER(c_float)), ("values", POINTER(c_float)),
                    ("positions", POINTER(c_int32)), ("next_position", c_int32),
                    ("rope_base", c_float), ("rope_half", c_int), ("layer", c_int),
                    ("n_layers", c_int), ("window_queries", POINTER(c_float)),
                    ("window_positions", POINTER(c_int32)), ("n_window", c_int),
                    ("wo", POINTER(c_float)), ("d_model", c_int),
                    ("context_queries", POINTER(c_float)),
                    ("context_positions", POINTER(c_int32)), ("n_context", c_int),
                    ("future_queries", POINTER(c_float)), ("n_future", c_int)]


class pk_model_p(c_void_p):
    pass


class pk_session_p(c_void_p):
    pass


def float_ptr(a):
    return a.ctypes.data_as(POINTER(c_float))


def int_ptr(a):
    return a.ctypes.data_as(POINTER(c_int32))


_P = POINTER
_SIGNATURES = {
    "pk_api_version": (c_int, []),
    "pk_version": (c_char_p, []),
    "pk_last_error": (c_char_p, []),
    "pk_model_load": (c_int, [c_char_p, _P(pk_model_p)]),
    "pk_model_free": (None, [pk_model_p]),
    "pk_model_get_info": (c_int, [pk_model_p, _P(C.pk_model_info)]),
    "pk_tokenize": (c_int, [pk_model_p, c_char_p, c_size_t, c_int, _P(c_int32), c_size_t,
                            _P(c_size_t)]),
    "pk_detokenize": (c_int, [pk_model_p, _P(c_int32), c_size_t, c_char_p, c_size_t,
                              _P(c_size_t)]),
    "pk_press_count": (c_size_t, []),
    "pk_press_name": (c_char_p, [c_size_t]),
    "pk_press_query_free": (c_int, [c_size_t]),
    "pk_session_options_default": (C.pk_session_options, []),
    "pk_generate_options_default": (C.pk_generate_options, []),
    "pk_session_new": (c_int, [pk_model_p, _P(C.pk_session_options), _P(pk_session_p)]),
    "pk_session_free": (None, [pk_session_p]),
    "pk_session_feed": (c_int, [pk_session_p, _P(c_int32), c_size_t]),
    "pk_session_feed_context": (c_int, [pk_session_p, _P(c_int32), c_size_t]),
    "pk_session_compress": (c_int, [pk_session_p, c_double]),
    "pk_session_generate": (c_int, [pk_session_p, _P(C.pk_generate_options), _P(c_int32),
                                    c_size_t, _P(c_size_t)]),
    "pk_session_end_turn": (c_int, [pk_session_p]),
    "pk_session_n_tokens": (c_int, [pk_session_p, _P(c_size_t)]),
    "pk_session_tokens": (c_int, [pk_session_p, _P(c_int32), c_size_t, _P(c_size_t)]),
    "pk_session_kv_bytes": (c_int, [pk_session_p, _P(c_size_t)]),
    "pk_session_kv_entries": (c_int, [pk_session_p, _P(c_int64)]),
    "pk_session_get_timings": (c_int, [pk_session_p, _P(C.pk_timings)]),
    "pk_session_save": (c_int, [pk_session_p, c_char_p, c_char_p]),
    "pk_session_load": (c_int, [pk_model_p, c_char_p, _P(C.pk_session_options),
                                _P(pk_session_p)]),
    "pk_score_input_default": (C.pk_score_input, []),
    "pk_score": (c_int, [c_char_p, _P(C.pk_score_input), _P(c_float), c_size_t]),
}


def _candidates():
    """Where the library may be, first found wins: PRIMEKV_LIB, the path the build or the install
    wrote into _libpath.py (relative to this folder when installed, so a package unpacked
    anywhere finds its own library), a build tree beside these sources, then the system's
    libraries (ld.so.cache: a copy installed by pip beside a library installed elsewhere)."""
    if os.environ.get("PRIMEKV_LIB"):
        yield os.environ["PRIMEKV_LIB"]
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from ._libpath import LIBRARY
        yield os.path.normpath(os.path.join(here, LIBRARY))
    except ImportError:
        pass
    root = os.path.dirname(os.path.dirname(here))
    for preset in ("release", "ci"):
        yield os.path.join(root, "build", preset, "src", "capi", "libprimekv_c.so")
    system = ctypes.util.find_library("primekv_c")
    if system:
        yield system


_loaded = []  # the library, once loaded


def _open_library():
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            return path, ctypes.CDLL(path)  # CDLL, not PyDLL: calls release the GIL
        if os.sep not in path:
            try:
                return path, ctypes.CDLL(path)
            except OSError:
                pass
        tried.append(path)
    raise ImportError("libprimekv_c.so not found (install PrimeKV, or set PRIMEKV_LIB); tried: " +
                      ", ".join(tried + ["the system's libraries"]))


def raw_lib():
    """The loaded library with its signatures declared (loaded on first use)."""
    if _loaded:
        return _loaded[0]
    path, lib = _open_library()
    for name, (res, args) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    if lib.pk_api_version() != PK_API_VERSION:
        raise ImportError(f"{path}: C API version {lib.pk_api_version()}, this module expects "
                          f"{PK_API_VERSION}")
    _loaded.append(lib)
    return lib


def check(status):
    """Raises PrimeKVError with the library's message unless status is PK_OK."""
    if status != PK_OK:
        msg = raw_lib().pk_last_error().decode("utf-8", errors="replace")
        kind = _STATUS.get(status, "internal")
        if kind == "argument":
            raise ArgumentError(msg)
        raise PrimeKVError(msg, kind)
