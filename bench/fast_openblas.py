"""Gives Debian's PyTorch its fastest OpenBLAS kernels on this CPU.

Debian's PyTorch does its float32 matmuls with OpenBLAS 0.3.21, which does not
recognise recent Xeons and falls back to its SSE3 "Prescott" kernels there
(2.2 s against 0.8 s a training step on config S, same losses). Call
ensure_fast_openblas() before importing torch: it re-runs the script with
OPENBLAS_CORETYPE=SkylakeX when the CPU has AVX-512 and OpenBLAS named no
better core, and says so on stderr.
"""
import ctypes
import os
import sys


def ensure_fast_openblas():
    if "OPENBLAS_CORETYPE" in os.environ:
        return
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        core = lib.openblas_get_corename().decode()
    except OSError:
        return
    with open("/proc/cpuinfo") as f:
        avx512 = " avx512f " in f.read()
    if core.lower() == "prescott" and avx512:
        print(f"{os.path.basename(sys.argv[0])}: OpenBLAS chose its Prescott kernels on an AVX-512 CPU; "
              "running with OPENBLAS_CORETYPE=SkylakeX", file=sys.stderr)
        os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, OPENBLAS_CORETYPE="SkylakeX"))


