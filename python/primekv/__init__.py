"""PrimeKV from Python: models, conversations over compressed KV caches, and PrimeKV's scorer
(and every other press that needs no model) on your own arrays.

A thin ctypes layer over the C API (include/primekv.h, libprimekv_c.so): no build step and no
compiled extension tied to one Python version. ctypes releases the GIL for every call into the
library, so prefill and generation of two sessions run at the same time on two Python threads.
See docs/python.md.
"""

from ._api import (
    Model,
    PrimeKVError,
    Session,
    api_version,
    presses,
    score,
    version,
)

__all__ = [
    "Model",
    "PrimeKVError",
    "Session",
    "api_version",
    "presses",
    "score",
    "version",
]
