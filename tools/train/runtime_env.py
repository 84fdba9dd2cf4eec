"""Re-executes the current script with allocator/BLAS settings that make CPU PyTorch fast
here: large tensors allocated afresh each step cost page faults that dominate training on
this VM, so freed memory is kept (jemalloc when installed, else glibc tunables), and
OpenBLAS 0.3.21, which does not recognise newer CPUs, is told which kernels to use: the
AVX-512 ones only where the CPU has AVX-512 (on an AVX2-only CPU they stop on SIGILL)."""

import os
import sys

_JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def cpu_flags():
    """The CPU's feature flags from /proc/cpuinfo (empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return []


def _openblas_coretype():
    """SkylakeX where the CPU has AVX-512F, Haswell where it has AVX2 and FMA, else None."""
    flags = cpu_flags()
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags and "fma" in flags:
        return "Haswell"
    return None


def reexec():
    if os.environ.get("PRIMEKV_TRAIN_ENV") == "1":
        return
    env = dict(os.environ)
    env["PRIMEKV_TRAIN_ENV"] = "1"
    coretype = _openblas_coretype()
    if coretype:
        env.setdefault("OPENBLAS_CORETYPE", coretype)
    if os.path.exists(_JEMALLOC) and "LD_PRELOAD" not in env:
        env["LD_PRELOAD"] = _JEMALLOC
        env.setdefault("MALLOC_CONF", "retain:true,dirty_decay_ms:30000,muzzy_decay_ms:30000")
    else:
        env.setdefault("MALLOC_MMAP_THRESHOLD_", "33554432")
        env.setdefault("MALLOC_TRIM_THRESHOLD_", "100000000000")
        env.setdefault("MALLOC_TOP_PAD_", "536870912")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)
