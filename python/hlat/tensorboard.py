"""TensorBoard's habits: code that writes through torch.utils.tensorboard's SummaryWriter sends
to hlat by changing its import:

    from hlat.tensorboard import SummaryWriter      # was: from torch.utils.tensorboard import ...
    writer = SummaryWriter("runs/exp1")             # the run "exp1" (HLAT_URL, HLAT_TOKEN), or run=
    writer.add_scalar("train/loss", loss, step)
    writer.close()

add_scalar and add_scalars are sent (add_scalars' values as MAIN/TAG, the names TensorBoard
gives its folders), add_hparams' metrics at the last step; the other add_* calls (images,
histograms, graphs, ...) are accepted and said once. A halt raises nothing here: check
`writer.run.should_stop(step)`. Standard library only, as the client's core.
"""
import os

from . import _wandb
from .client import init


class SummaryWriter:
    """See the module's doc. log_dir names the run (its last folder) unless run= or name= is given;
    the other keyword arguments go to hlat.init."""

    def __init__(self, log_dir=None, comment="", purge_step=None, max_queue=10, flush_secs=120, filename_suffix="",
                 run=None, name=None, **init_options):
        self.log_dir = log_dir
        if run is None:
            name = name or (os.path.basename(os.path.normpath(log_dir)) + comment if log_dir else None)
            run = init(name, **init_options)
        self.run = run
        self._step = 0

    def _at(self, step):
        if step is None:
            return self._step
        self._step = int(step)
        return self._step

    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None, new_style=False,
                   double_precision=False):
        self.run.record({tag: scalar_value}, step=self._at(global_step))

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None):
        self.run.record({f"{main_tag}/{tag}": v for tag, v in tag_scalar_dict.items()}, step=self._at(global_step))

    def add_hparams(self, hparam_dict, metric_dict, hparam_domain_discrete=None, run_name=None, global_step=None):
        _wandb.say_once("add_hparams", "SummaryWriter.add_hparams: hlat keeps a run's config from its start "
                                       "(init(config=...)); the metrics are logged, the hyperparameters left out")
        if metric_dict:
            self.run.record(dict(metric_dict), step=self._at(global_step))

    def flush(self):
        self.run.flush()

    def close(self):
        self.run.finish()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __getattr__(self, name):
        """add_image, add_histogram, add_graph, add_text, ...: accepted, said once, left out."""
        if name.startswith("add_"):
            def ignored(*args, **kwargs):
                _wandb.say_once(name, f"SummaryWriter.{name} has no counterpart in hlat and is left out")
            return ignored
        raise AttributeError(name)
