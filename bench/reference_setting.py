"""Everything about a process that decides how fast PyTorch's CPU step runs,
so that a ratio against the reference says what it was measured against.

Two machines of one CPU family measured torch's step of config S 2.5x apart
with the same library and OpenBLAS core type (issue 39). What differs between
two such processes, and is recorded here:
- the threads: torch's intra-op and inter-op pools, and OpenBLAS's own pthread
  pool (Debian's libopenblas0-pthread does not use OpenMP: torch.set_num_threads
  does not size it, OPENBLAS_NUM_THREADS does, and by default it starts one
  thread per CPU the process may run on);
- the CPUs the process may run on against the CPU time it may use: a cgroup
  quota (cpu.max, e.g. a container given 2 CPUs' worth on an 8-CPU host) leaves
  the affinity mask, and so OpenBLAS's default pool, at 8 threads that the
  quota then throttles;
- OpenMP's wait policy and the OMP_/GOMP_/OPENBLAS_/MKL_ variables;
- the OpenBLAS kernels (core type) and build, and the CPU (model, L2, L3, the
  AVX-512 and bf16 instructions).

reference_setting(torch) returns them as one JSON-ready dict; reference_env
gives the benches' reference its setting: as many threads as hlat gets, in
torch's pool and in OpenBLAS's (pinned: OpenBLAS's default pool follows the
affinity mask, not the threads asked for nor a cgroup quota), and OpenMP's
passive wait policy (idle threads sleep instead of spinning on cores the other
pool needs). SETTINGS are the alternatives bench/train_vs_pytorch
--reference-sweep times beside it.
"""
import ctypes
import os

_ENV_PREFIXES = ("OMP_", "GOMP_", "KMP_", "OPENBLAS_", "GOTO", "MKL_", "DNNL_", "ONEDNN_")


def reference_env(threads, **overrides):
    """The environment the benches run the PyTorch reference in."""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads))
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


# name -> environment overrides of reference_env: each one thing a machine's
# setting may differ in.
def sweep_settings(threads):
    return {"bench (passive, OpenBLAS pinned)": {},
            "OpenMP active wait": {"OMP_WAIT_POLICY": "ACTIVE"},
            "OpenBLAS pool unpinned": {"OPENBLAS_NUM_THREADS": None},
            # OpenBLAS caps its pool at the CPUs it sees: only where more CPUs are visible than the threads asked.
            f"OpenBLAS pool of {4 * threads} asked": {"OPENBLAS_NUM_THREADS": 4 * threads},
            "no OMP_ variables": {"OMP_WAIT_POLICY": None, "OMP_NUM_THREADS": None}}


def _openblas():
    """OpenBLAS's kernels, pool size and build, {} when this process has not
    loaded it (PyPI's torch has MKL linked in; its numpy's OpenBLAS is another
    library, named libscipy_openblas)."""
    with open("/proc/self/maps") as f:
        loaded = sorted({line.split()[-1] for line in f if "/libopenblas" in line})
    if not loaded:
        return {}
    lib = ctypes.CDLL(loaded[0])
    info = {}
    for name, key, restype in (("openblas_get_corename", "core", ctypes.c_char_p),
                               ("openblas_get_num_threads", "threads", ctypes.c_int),
                               ("openblas_get_config", "config", ctypes.c_char_p),
                               ("openblas_get_parallel", "parallel", ctypes.c_int)):
        try:
            fn = getattr(lib, name)
        except AttributeError:
            continue
        fn.restype = restype
        value = fn()
        info[key] = value.decode() if isinstance(value, bytes) else value
    # openblas_get_parallel: 0 sequential, 1 its own pthreads, 2 OpenMP.
    if "parallel" in info:
        info["parallel"] = {0: "sequential", 1: "pthreads", 2: "openmp"}.get(info["parallel"], info["parallel"])
    return info


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _cpu():
    fields, flags = {}, set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key in ("model name", "cpu family", "model") and key not in fields:
                fields[key] = value
            if key == "flags" and not flags:
                flags = set(value.split())
    cache = "/sys/devices/system/cpu/cpu0/cache"
    return {"model_name": fields.get("model name"), "family": fields.get("cpu family"), "model": fields.get("model"),
            "l2": _read(f"{cache}/index2/size"), "l3": _read(f"{cache}/index3/size"),
            "avx512f": "avx512f" in flags, "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags}


def _cpus():
    quota = _read("/sys/fs/cgroup/cpu.max")  # "max 100000" or "200000 100000" (2 CPUs' worth)
    cpus_worth = None
    if quota and not quota.startswith("max"):
        limit, period = quota.split()
        cpus_worth = int(limit) / int(period)
    # Whether the CPUs this process runs on are SMT siblings (two threads of one core share its FMA units).
    siblings = _read("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list")
    return {"online": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)), "cgroup_cpu_max": quota,
            "cgroup_cpus_worth": cpus_worth, "cpu0_smt_siblings": siblings}


def reference_setting(torch):
    """The process's setting as torch runs in it (call after torch.set_num_threads)."""
    parallel = [line.strip() for line in torch.__config__.parallel_info().splitlines() if line.strip()]
    return {"torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(),
            "mkldnn": torch.backends.mkldnn.is_available(),
            "parallel_info": parallel,
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)},
            "openblas": _openblas(),
            "cpu": _cpu(),
            "cpus": _cpus()}


def describe(setting):
    """One line for a bench's output."""
    ob, cpus = setting.get("openblas", {}), setting["cpus"]
    env = " ".join(f"{k}={v}" for k, v in setting["env"].items()) or "no OMP_/OPENBLAS_ variables"
    quota = f", cgroup {cpus['cgroup_cpus_worth']:g} CPUs' worth" if cpus["cgroup_cpus_worth"] else ""
    return (f"torch {setting['torch']}, {setting['torch_threads']} intra-op / {setting['torch_interop_threads']} "
            f"inter-op threads; OpenBLAS {ob.get('core', '-')} kernels, {ob.get('threads', '-')} threads "
            f"({ob.get('parallel', '-')}); {cpus['affinity']} of {cpus['online']} CPUs{quota}; "
            f"L2 {setting['cpu']['l2']}; {env}")
