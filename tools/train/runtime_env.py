"""Re-executes the current script with allocator/BLAS settings that make CPU PyTorch fast
here: large tensors allocated afresh each step cost page faults that dominate training on
this VM, so freed memory is kept (jemalloc when installed, else glibc tunables), and
OpenBLAS 0.3.21, which does not recognise this CPU, is told which kernels to use."""

import os
import sys

_JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def reexec():
    if os.environ.get("PRIMEKV_TRAIN_ENV") == "1":
        return
    env = dict(os.environ)
    env["PRIMEKV_TRAIN_ENV"] = "1"
    env.setdefault("OPENBLAS_CORETYPE", "SkylakeX")
    if os.path.exists(_JEMALLOC) and "LD_PRELOAD" not in env:
        env["LD_PRELOAD"] = _JEMALLOC
        env.setdefault("MALLOC_CONF", "retain:true,dirty_decay_ms:30000,muzzy_decay_ms:30000")
    else:
        env.setdefault("MALLOC_MMAP_THRESHOLD_", "33554432")
        env.setdefault("MALLOC_TRIM_THRESHOLD_", "100000000000")
        env.setdefault("MALLOC_TOP_PAD_", "536870912")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)
