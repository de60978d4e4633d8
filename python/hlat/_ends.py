"""Ends the program did not write: a run that was not finish()ed is ended for it, with a true
status, however the process ends short of SIGKILL (which leaves the run to the server's stale
check, and its unsent records to the spool when one was being written).

- an uncaught exception (sys.excepthook; the previous hook still runs after, and prints the
  traceback): "crashed" with the exception's type and message; KeyboardInterrupt (Ctrl-C)
  "stopped", as hlat's own trainer records Ctrl-C and as W&B and MLflow keep a killed run
  apart from a failed one; an uncaught HaltRequested "halted";
- SIGTERM: "crashed", then the process dies of SIGTERM as it would have (exit status -15).
  Installed only when SIGTERM has its default action and init runs on the main thread:
  a handler of the program's own is left alone, and decides;
- a normal interpreter exit without finish() (atexit): "finished", after sending what is
  queued (at most EXIT_FLUSH_S).
"""
import atexit
import os
import signal
import sys
import threading

EXIT_FLUSH_S = 10.0  # a normal exit without finish(): how long it waits for the queue (a server that
                     # answers slowly must not hold the interpreter's exit for finish()'s 30 s)

_live = []              # this process's rank-0 runs not yet finished
_previous_excepthook = None


def watch(run):
    """Ends `run` for the program if it does not (see the module's note)."""
    global _previous_excepthook
    _live.append(run)
    if _previous_excepthook is None:
        _previous_excepthook = sys.excepthook
        sys.excepthook = _on_uncaught
        atexit.register(_on_exit)
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def forget(run):
    """A finished run: off the list; the default SIGTERM action back when no run is left."""
    if run in _live:
        _live.remove(run)
    if not _live and threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def describe(kind, value):
    module = getattr(kind, "__module__", "builtins")
    name = kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
    return f"{name}: {value}" if str(value) else name


def _end_all(status, detail):
    for run in list(_live):
        run._end_dying(status or ("halted" if run._halted else "crashed"), detail or (run._halted or ""))


def _on_uncaught(kind, value, tb):
    from .client import HaltRequested
    try:
        if issubclass(kind, HaltRequested):
            _end_all(None, value.reason)
        elif issubclass(kind, KeyboardInterrupt):
            _end_all("stopped", "KeyboardInterrupt (Ctrl-C)")
        else:
            _end_all("crashed", "uncaught " + describe(kind, value))
    finally:
        (_previous_excepthook or sys.__excepthook__)(kind, value, tb)


def _on_sigterm(signum, frame):
    _end_all("crashed", f"killed by signal {signum} (SIGTERM)")
    signal.signal(signum, signal.SIG_DFL)  # then die of it, as without hlat: whoever waits sees -15
    os.kill(os.getpid(), signum)


def _on_exit():
    for run in list(_live):
        run._end_dying("halted" if run._halted else "finished", run._halted or "", flush_s=EXIT_FLUSH_S)
