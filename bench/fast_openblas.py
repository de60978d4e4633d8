"""Gives Debian's PyTorch its fastest BLAS, and refuses to measure it on a slow one.

The benches' reference now runs on scripts/python, the venv with PyPI's torch,
which does its float32 GEMMs in MKL linked into libtorch_cpu.so, never through
libblas.so.3: there ensure_fast_openblas() does nothing and blas_in_use() names
MKL. What follows is for Debian's python3-torch, which set-up no longer installs.

Debian's PyTorch does its float32 matmuls through libblas.so.3, whichever
BLAS the alternatives system points that at: OpenBLAS (libopenblas0-pthread,
which scripts/setup.sh installs) or, on a machine that skipped recommends,
the reference BLAS of libblas3, 10-15x slower, which would make every
"x times PyTorch" ratio meaningless. And OpenBLAS 0.3.21 picks its kernels
by CPU model: it runs recent Xeons on its SSE3 "Prescott" kernels and AMD
CPUs with AVX-512 on its AVX2 "Haswell" ones.

ensure_fast_openblas(), called before importing torch, measures a float32
GEMM with OpenBLAS's own choice and with OPENBLAS_CORETYPE=SkylakeX (on a CPU
with AVX-512) and re-runs the script with the faster, saying so on stderr.
After importing torch, blas_in_use() names the library it actually loaded
(from the process's memory maps) and the OpenBLAS core type, and
refuse_reference_blas() exits with REFERENCE_BLAS_EXIT and a message naming
the library when it is the reference BLAS.
"""
import ctypes
import importlib.util
import os
import subprocess
import sys

REFERENCE_BLAS_EXIT = 3

# Times a 512-cube float32 GEMM through numpy (the same libblas.so.3 as torch).
_PROBE = """
import time, numpy as np
a = np.random.default_rng(0).standard_normal((512, 512), dtype=np.float32)
a @ a
best = 1e9
for _ in range(5):
    t = time.perf_counter(); a @ a; best = min(best, time.perf_counter() - t)
print(best)
"""


def _gemm_seconds(env):
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def _has_avx512():
    with open("/proc/cpuinfo") as f:
        return " avx512f " in f.read()


def openblas_core():
    """The kernels OpenBLAS chose (or was told to use), "" when it is not loaded."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return ""


def _torch_is_debians():
    spec = importlib.util.find_spec("torch")
    return spec is not None and spec.origin.startswith("/usr/lib/python3/dist-packages/")


def ensure_fast_openblas():
    """Re-runs this script with the faster of OpenBLAS's current kernels (its
    own choice, or OPENBLAS_CORETYPE as the environment set it) and SkylakeX's,
    on a CPU with AVX-512; says which on stderr. Only for Debian's torch: any
    other does not do its GEMMs in the system's OpenBLAS."""
    if os.environ.get("HLAT_BLAS_CHOSEN") or not _torch_is_debians():
        return
    os.environ["HLAT_BLAS_CHOSEN"] = "1"
    core = openblas_core()
    if not core or core.lower() == "skylakex" or not _has_avx512():
        return
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    current = _gemm_seconds(env)
    skylakex = _gemm_seconds(dict(env, OPENBLAS_CORETYPE="SkylakeX"))
    name = os.path.basename(sys.argv[0])
    how = f"OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']}" if "OPENBLAS_CORETYPE" in os.environ else "its choice"
    if skylakex < current:
        print(f"{name}: OpenBLAS runs its {core} kernels here ({how}); SkylakeX's are faster "
              f"({skylakex * 1e3:.1f} against {current * 1e3:.1f} ms a 512-cube GEMM): running with "
              "OPENBLAS_CORETYPE=SkylakeX", file=sys.stderr)
        os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, OPENBLAS_CORETYPE="SkylakeX"))
    print(f"{name}: OpenBLAS's {core} kernels ({how}) are the faster here ({current * 1e3:.1f} against "
          f"{skylakex * 1e3:.1f} ms with SkylakeX's)", file=sys.stderr)


def blas_in_use():
    """{"library": the BLAS torch's libblas.so.3 resolved to in this process,
    "coretype": OpenBLAS's kernels or ""}, from the process's memory maps; for a
    torch built with MKL linked in (PyPI's), "MKL (in libtorch_cpu.so)"."""
    mapped = set()
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6 and os.path.basename(fields[-1]).startswith(("libblas", "libopenblas", "libmkl")):
                mapped.add(os.path.realpath(fields[-1]))
    # torch needs libblas.so.3: which file that is decides where its GEMMs run.
    blas = sorted(p for p in mapped if os.path.basename(p).startswith("libblas"))
    library = blas[0] if blas else (sorted(mapped)[0] if mapped else "none")
    torch = sys.modules.get("torch")
    if not blas and torch is not None and "BLAS_INFO=mkl" in torch.__config__.show():
        library = "MKL (in libtorch_cpu.so)"
    return {"library": library, "coretype": openblas_core() if "openblas" in library else ""}


def is_reference_blas(info):
    # Debian's reference BLAS (libblas3) lives in .../blas/; OpenBLAS's libblas.so.3 in .../openblas-*/.
    return os.path.basename(os.path.dirname(info["library"])) == "blas"


def refuse_reference_blas(info):
    if is_reference_blas(info):
        print(f"{os.path.basename(sys.argv[0])}: torch runs on the reference BLAS ({info['library']}), 10-15x "
              "slower than OpenBLAS: no ratio against it means anything. Install libopenblas0-pthread "
              "(scripts/setup.sh does) and run again.", file=sys.stderr)
        sys.exit(REFERENCE_BLAS_EXIT)


def run_reference(command, env=None):
    """Runs a PyTorch reference script and returns its stdout; when it fails
    (the reference BLAS included) prints its stderr and exits with its code."""
    out = subprocess.run(command, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        print(f"{os.path.basename(sys.argv[0])}: the PyTorch reference failed (exit {out.returncode}); "
              "no ratio reported", file=sys.stderr)
        sys.exit(out.returncode)
    return out.stdout
