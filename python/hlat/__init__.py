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
`hlat.torch`.
"""
from ._http import BadReply, RunExists, ServerError
from .client import DisabledRun, HaltRequested, Run, init

__all__ = ["BadReply", "DisabledRun", "HaltRequested", "Run", "RunExists", "ServerError", "init"]
__version__ = "0.2.0"
