"""hlat for Python: stream any training loop into hlat.

    import hlat
    run = hlat.init("my-run", url="http://127.0.0.1:8080", token=TOKEN, config=cfg)
    for step in range(steps):
        ...
        run.log({"loss": loss, "grad_norm": norm, "lr": lr}, step=step)  # raises hlat.HaltRequested
    run.finish()

`log` never waits on the network: values are queued and a background thread
sends them in batches to `hlat serve`, whose detectors answer with the run's
state, or keeps them in a spool file while it does not answer
(HLAT_MODE=offline: always; `python3 -m hlat sync` uploads it). A halt (a
detector with the halt policy, or a person on the page) raises HaltRequested
at the next `log` in a single process; a job of several ranks checks
`run.should_stop(step)` on every rank instead.
`run.log(values, step=step, batch=ids)` also names what the step trained on (a
string or a list of strings: a hash of the token ids, "shard3:offset12345");
a detector whose policy is rewind_skip then halts with a plan,
`HaltRequested.rewind` (and `run.rewind_plan()`): reload the newest checkpoint
at or before `restart_at_or_before`, skip the batches `skip_batch_ids`, go on
(docs/external-trainers.md, "Batch ids and rewind-and-skip").
A run the script does not finish() is ended for it: "crashed" by an uncaught
exception or SIGTERM, "stopped" by Ctrl-C, "finished" at a normal exit
(docs/external-trainers.md, "How a run ends").
PyTorch probes (gradient norms, replica hashes, TP drift, causality) are in
`hlat.torch`; trainers' adapters in `hlat.transformers`, `hlat.lightning` and
`hlat.accelerate`.
W&B's habits: `import hlat as wandb` runs a wandb script: hlat.init(project=,
name=, config=, mode=), hlat.log(dict) with the step counted, hlat.config,
hlat.summary, hlat.define_metric, hlat.watch(model, optimizer=), hlat.alert,
hlat.finish(exit_code=) act on the current run (docs/trainers/wandb.md).
"""
from ._http import BadReply, RunExists, ServerError
from ._wandb import alert, define_metric, finish, log, watch
from .client import DisabledRun, HaltRequested, Run, init

__all__ = ["BadReply", "DisabledRun", "HaltRequested", "Run", "RunExists", "ServerError", "alert", "config",
           "define_metric", "finish", "init", "log", "run", "summary", "watch"]


def __getattr__(name):
    """hlat.run, hlat.config and hlat.summary: the current run's (as wandb.run, wandb.config)."""
    from . import _wandb
    if name == "run":
        return _wandb.current[0]
    if name in ("config", "summary"):
        run = _wandb.current[0]
        if run is None:
            return _wandb.Config(started=False) if name == "config" else _wandb.Summary()
        return getattr(run, name)
    raise AttributeError(f"module 'hlat' has no attribute {name!r}")
__version__ = "0.2.0"
