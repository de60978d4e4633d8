"""Lightning's Trainer: one object, its logger and its callback:

    from hlat.lightning import HlatLogger
    hl = HlatLogger("my-run", url=URL, token=TOKEN, watch=True)
    trainer = lightning.Trainer(logger=hl, callbacks=[hl], log_every_n_steps=1)

As the logger it sends what the LightningModule logs (self.log) and its hyperparameters (the
run's config) at the Trainer's global step; as the callback it starts the watch of the model's
internals (watch=True) when training starts, and on a halt (a detector's with the halt policy,
or the page's button) saves the Trainer's own checkpoint (hlat-halt-step=N.ckpt in the logger's
folder, or checkpoint_dir=) and sets trainer.should_stop, so training ends at that step. The run
ends "halted", "finished", or "crashed" when an exception leaves fit(). Given as the logger only
it logs, and says once that halts and the watch need it among the callbacks too.
"""
import logging
import os

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers.logger import Logger

from .client import init

_log = logging.getLogger("hlat")


class HlatLogger(Logger, Callback):
    """See the module's doc. name: the run's name; watch: measure the model's internals (every
    `watch_every` optimizer steps) of watch_module (default: the LightningModule's `model`
    attribute when it is a module, else the LightningModule itself: the module whose forward
    training_step calls); checkpoint_dir: where a halt's checkpoint goes; the other keyword
    arguments go to hlat.init (url, token, precision, detectors, resume, mode, ...)."""

    def __init__(self, name, watch=False, watch_every=1, watch_module=None, checkpoint_dir=None, **init_options):
        Logger.__init__(self)
        self._name, self.watch_model, self.watch_every, self.watch_module = name, watch, watch_every, watch_module
        self.checkpoint_dir, self.init_options = checkpoint_dir, init_options
        self.run = self.watch = None
        self.halted, self._as_callback, self._said = False, False, False
        self._config = dict(init_options.pop("config", {}) or {})

    # -- the logger ------------------------------------------------------------------------

    @property
    def name(self):
        return self._name

    @property
    def version(self):
        return 0

    def _start(self):
        if self.run is None:
            self.run = init(self._name, config=self._config, **self.init_options)
        return self.run

    def log_hyperparams(self, params, *args, **kwargs):
        params = vars(params) if hasattr(params, "__dict__") and not isinstance(params, dict) else dict(params or {})
        if self.run is None:
            self._config.setdefault("hparams", {}).update({k: _plain(v) for k, v in params.items()})
        # else: a run's config is fixed at its start (as W&B's), the hyperparameters came before

    def log_metrics(self, metrics, step=None):
        run = self._start()
        if not self._as_callback and not self._said:
            self._said = True
            _log.warning("hlat: HlatLogger is the Trainer's logger but not among its callbacks: it logs, but a halt "
                         "cannot stop training and the watch is off; pass it as both: "
                         "Trainer(logger=hl, callbacks=[hl])")
        numbers = {k: float(v) for k, v in metrics.items() if _number(v)}
        if numbers:
            run.record(numbers, step=int(step or 0))  # never raises: the halt is on_train_batch_end's

    def finalize(self, status):
        if self.watch is not None:
            self.watch.close()
            self.watch = None
        if self.run is not None:
            self.run.finish(status="halted" if self.halted else "crashed" if status == "failed" else None)

    # -- the callback ----------------------------------------------------------------------

    def setup(self, trainer, pl_module, stage):
        self._as_callback = True

    def on_train_start(self, trainer, pl_module):
        run = self._start()
        if self.watch_model and self.watch is None and trainer.optimizers:
            import hlat.torch
            # Lightning's global step counts optimizer steps done: the watch numbers the next one
            # as the step its logs will carry.
            # The network whose forward training_step calls: the module's own `model` when it keeps
            # one there (self.model = LlamaForCausalLM(...)), else the LightningModule.
            model = self.watch_module or getattr(pl_module, "model", None)
            if not isinstance(model, torch.nn.Module):
                model = pl_module
            self.watch = hlat.torch.watch(run, model, trainer.optimizers[0], every=self.watch_every,
                                          step=trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.run is None or self.halted or not self.run.should_stop(trainer.global_step):
            return
        self.halted = True
        folder = self.checkpoint_dir or trainer.default_root_dir
        path = os.path.join(folder, f"hlat-halt-step={trainer.global_step}.ckpt")
        trainer.save_checkpoint(path)
        self.run.event("checkpoint", path, trainer.global_step)
        trainer.should_stop = True


def _number(v):
    try:
        float(v)
        return not isinstance(v, bool)
    except (TypeError, ValueError, RuntimeError):
        return False


def _plain(v):
    return v if isinstance(v, (int, float, str, bool, type(None), list, dict)) else str(v)
