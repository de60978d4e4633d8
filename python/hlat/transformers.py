"""Hugging Face transformers' Trainer, in one line:

    from hlat.transformers import HlatCallback
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[HlatCallback("my-run", url=URL, token=TOKEN, watch=True)])

The run starts when training does, with the TrainingArguments as its config; what the Trainer
logs (loss, grad_norm, learning_rate, epoch, eval metrics: set logging_steps=1 for the detectors
to see every step) is sent at the Trainer's global step; watch=True measures the model's internals
(hlat.torch.watch) at every optimizer step. A halt (a detector's with the halt policy, or the
page's button) stops training at the next step end with the Trainer's own checkpoint saved
(should_save, then should_training_stop); the run ends "halted", "finished", or "crashed" when an
exception leaves the training. Imported only by who uses it: the client's core needs nothing
of transformers.
"""
import os

from transformers import TrainerCallback

from .client import init


class HlatCallback(TrainerCallback):
    """A TrainerCallback that streams a Trainer's run into hlat (see the module's doc).

    name: the run's name (default: TrainingArguments.run_name, else the output folder's name);
    watch: measure the model's internals (every `watch_every` optimizer steps); the other keyword
    arguments go to hlat.init (url, token, precision, detectors, resume, mode, ...)."""

    def __init__(self, name=None, watch=False, watch_every=1, **init_options):
        self.name, self.watch_model, self.watch_every, self.init_options = name, watch, watch_every, init_options
        self.run = self.watch = None
        self.halted = False

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self.run is None:
            name = self.name or args.run_name or os.path.basename(os.path.normpath(args.output_dir))
            config = dict(self.init_options.pop("config", {}) or {})
            config.setdefault("training_args", args.to_sanitized_dict())
            self.run = init(name, config=config, **self.init_options)
        if self.watch_model and self.watch is None and model is not None and optimizer is not None:
            import hlat.torch
            # The Trainer counts a step once its optimizer has stepped: the watch numbers that
            # optimizer step as the global step the logs will carry.
            self.watch = hlat.torch.watch(self.run, model, optimizer, every=self.watch_every,
                                          step=state.global_step + 1)

    def on_log(self, args, state, control, logs=None, **kwargs):
        numbers = {k: v for k, v in (logs or {}).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self.run is not None and numbers:
            self.run.record(numbers, step=state.global_step)   # never raises: the halt is on_step_end's

    def on_step_end(self, args, state, control, **kwargs):
        if self.run is not None and not self.halted and self.run.should_stop(state.global_step):
            self.halted = True
            control.should_save = True           # the Trainer's own checkpoint, then the stop
            control.should_training_stop = True
        return control

    def on_save(self, args, state, control, **kwargs):
        if self.run is not None:
            folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            self.run.event("checkpoint", folder, state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if self.watch is not None:
            self.watch.close()
            self.watch = None
        if self.run is not None:
            self.run.finish(status="halted" if self.halted else None)
