"""System metrics: the page's system panel (cpu_pct, rss_mb, gpu_mem_mb, gpu_util_pct, the keys
hlat's own trainer writes), sampled on a background thread of the run."""
import os
import resource
import sys
import threading
import time

DEFAULT_INTERVAL_S = 10.0


class Probe:
    """One sample per call: this process's CPU % since the previous call (100 = one core, all
    threads), resident memory, and when the program uses CUDA the memory PyTorch holds on the
    current device and, where the driver's NVML answers, the GPU's utilisation."""

    def __init__(self):
        self._last = (self._cpu(), time.monotonic())
        self._utilisation = True  # until torch.cuda.utilization() fails once (no pynvml)

    @staticmethod
    def _cpu():
        u = resource.getrusage(resource.RUSAGE_SELF)
        return u.ru_utime + u.ru_stime

    def __call__(self):
        cpu, now = self._cpu(), time.monotonic()
        (last_cpu, last_now), self._last = self._last, (cpu, now)
        out = {"cpu_pct": 100.0 * (cpu - last_cpu) / (now - last_now) if now > last_now else 0.0}
        try:
            with open("/proc/self/statm") as f:
                out["rss_mb"] = int(f.read().split()[1]) * resource.getpagesize() / 2**20
        except (OSError, IndexError, ValueError):  # not Linux: CPU only
            pass
        out.update(self._gpu())
        return out

    def _gpu(self):
        torch = sys.modules.get("torch")  # never imported here, and CUDA never initialised from here
        if torch is None or not hasattr(torch, "cuda") or not torch.cuda.is_initialized():
            return {}
        out = {"gpu_mem_mb": torch.cuda.memory_allocated() / 2**20}
        if self._utilisation:
            try:
                out["gpu_util_pct"] = float(torch.cuda.utilization())
            except Exception:  # no NVML (pynvml) here: memory only, and not asked again
                self._utilisation = False
        return out


def interval_from(option):
    """The sampling period in seconds: init's system_interval, else $HLAT_SYSTEM_INTERVAL, else
    10; 0 turns sampling off."""
    value = option if option is not None else os.environ.get("HLAT_SYSTEM_INTERVAL", DEFAULT_INTERVAL_S)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"hlat: system_interval (or HLAT_SYSTEM_INTERVAL) {value!r} is not a number of seconds")
    if seconds < 0:
        raise ValueError(f"hlat: system_interval {seconds} is negative (0 turns system metrics off)")
    return seconds


class Sampler:
    """Every `interval` s, record(values, step) with a sample at the run's current step."""

    def __init__(self, interval, record, current_step):
        self.interval, self.record, self.current_step = interval, record, current_step
        self.probe = Probe()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="hlat-system", daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.stopped.wait(self.interval):
            try:
                self.record(self.probe(), self.current_step())
            except Exception as e:  # monitoring must never stop training; said once, then off
                print(f"hlat: system metrics stopped: {e}", file=sys.stderr)
                return

    def stop(self):
        self.stopped.set()
