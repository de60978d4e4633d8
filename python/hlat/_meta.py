"""What hlat.init records about a run by itself, and the names it accepts for precision and levels."""
import os
import shlex
import socket
import subprocess
import sys

GIT_TIMEOUT_S = 2.0  # a slow or hung git (a network file system) must not hold the start of training


def _git(*args):
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):  # no git, or it took too long
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state():
    """{"git_revision": SHA, "git_dirty": bool} of the working folder's repository, {} outside one."""
    revision = _git("rev-parse", "HEAD")
    if not revision:
        return {}
    state = {"git_revision": revision}
    changes = _git("status", "--porcelain", "--untracked-files=no")
    if changes is not None:
        state["git_dirty"] = bool(changes)
    return state


def captured():
    """Where and how the run was started: git revision, command line, host, versions, pid."""
    meta = {"command": shlex.join(sys.argv) if sys.argv and sys.argv[0] else sys.executable,
            "host": socket.gethostname(), "pid": os.getpid(),
            "python": sys.version.split()[0]}
    torch = sys.modules.get("torch")  # only when the program imported it: never import it here
    if torch is not None and hasattr(torch, "__version__"):
        meta["torch"] = str(torch.__version__)
        if torch.cuda.is_available():
            meta["cuda"] = str(torch.version.cuda)
    meta.update(git_state())
    return meta


# hlat's precision settings (docs/precision.md) and the names other tools give them.
PRECISIONS = {
    "fp32": ("fp32", "float32", "float", "32", "32-true", "full", "f32"),
    "bf16": ("bf16", "bfloat16", "bf16-true", "true-bf16", "pure-bf16"),
    "bf16_sr": ("bf16_sr", "bf16-sr", "bf16-stochastic-rounding"),
    "bf16_kahan": ("bf16_kahan", "bf16-kahan"),
    # fp32 master weights and moments, bf16 matmuls: PyTorch autocast, Lightning's "bf16-mixed"
    "mixed": ("mixed", "bf16-mixed", "mixed-bf16", "amp-bf16", "amp"),
}
_ALIASES = {alias: mode for mode, aliases in PRECISIONS.items() for alias in aliases}


def precision_name(precision):
    """hlat's name for `precision` (a string such as "float32" or "bf16-mixed", or a torch.dtype),
    "" for None; ValueError naming the accepted ones for anything else."""
    if precision is None or precision == "":
        return ""
    text = str(precision).strip().lower()
    text = text[len("torch."):] if text.startswith("torch.") else text
    mode = _ALIASES.get(text.replace("_", "-")) or _ALIASES.get(text)
    if mode is None:
        accepted = ", ".join(f"{m} (or {'/'.join(a[1:4])})" if len(a) > 1 else m for m, a in PRECISIONS.items())
        raise ValueError(f"hlat.init: precision {precision!r} is not one hlat knows: {accepted}. hlat compares "
                         "these settings by name; leave precision out for another (the page then shows '-')")
    return mode


LEVELS = {"info": "info", "warn": "warning", "warning": "warning", "error": "critical", "critical": "critical"}


def level_name(level):
    """"info", "warning" or "critical" for the names W&B and logging use; ValueError otherwise."""
    name = LEVELS.get(str(getattr(level, "name", level)).strip().lower())  # wandb.AlertLevel.WARN has .name
    if name is None:
        raise ValueError(f"alert level {level!r}: use info, warning (warn) or critical (error)")
    return name
