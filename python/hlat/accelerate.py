"""Hugging Face Accelerate: a GeneralTracker for `Accelerator(log_with=...)`:

    from hlat.accelerate import HlatTracker
    tracker = HlatTracker("my-run", url=URL, token=TOKEN)
    accelerator = Accelerator(log_with=[tracker])
    accelerator.init_trackers("my-project", config=vars(args))   # the run starts, with this config
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    tracker.watch(model, optimizer)                               # the internals (optional)
    for step, batch in enumerate(data):
        ...; accelerator.backward(loss); optimizer.step()
        accelerator.log({"loss": loss.item()}, step=step)
        if tracker.should_stop(step):                             # every process: a halt
            accelerator.save_state(); break
    accelerator.end_training()

Every process has the tracker (main_process_only = False), so a halt reaches all of them at the
same step through should_stop; what the main process logs is the run's, what another logs is
that process's own (rank/<key>, see hlat's run.log_rank). Imported only by who uses it.
"""
from accelerate.tracking import GeneralTracker

from .client import init


class HlatTracker(GeneralTracker):
    """See the module's doc. run_name: the run's name; the keyword arguments go to hlat.init."""

    name = "hlat"
    requires_logging_directory = False
    main_process_only = False

    def __init__(self, run_name, **init_options):
        super().__init__()
        self.run_name, self.init_options = run_name, init_options
        self.run = None
        self._steps = 0

    @property
    def tracker(self):
        return self.run

    def _start(self, config=None):
        if self.run is None:
            merged = {**dict(self.init_options.pop("config", {}) or {}), **dict(config or {})}
            self.run = init(self.run_name, config=merged, **self.init_options)
        return self.run

    def store_init_configuration(self, values):
        self._start(values)

    def log(self, values, step=None, **kwargs):
        run = self._start()
        if step is None:
            step = self._steps
        self._steps = int(step) + 1
        numbers = {k: v for k, v in values.items() if _number(v)}
        if not numbers:
            return
        if run.rank == run.main_rank:
            run.record(numbers, step=step)  # never raises: should_stop is the halt's place
        else:
            run.log_rank(numbers, step=step)

    def watch(self, model, optimizer, **options):
        """hlat.torch.watch of the model and the optimizer (Accelerate's wrapper of it, unwrapped)."""
        import hlat.torch
        return hlat.torch.watch(self._start(), getattr(model, "module", model),
                                getattr(optimizer, "optimizer", optimizer), **options)

    def should_stop(self, step):
        """True once a halt is requested; on every process at the same step (a collective)."""
        return self._start().should_stop(step)

    def finish(self):
        if self.run is not None:
            self.run.finish()


def _number(v):
    if isinstance(v, bool):
        return False
    try:
        float(v)
        return True
    except (TypeError, ValueError, RuntimeError):
        return False
