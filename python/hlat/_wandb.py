"""W&B's habits: `import hlat as wandb` runs a script written against wandb's API.

hlat.init takes wandb.init's keywords (project, name, config, mode, resume, id, and the ones
that mean nothing here: said once each on the `hlat` logger, never an error); the module keeps
the current run, so hlat.log, hlat.config, hlat.summary, hlat.define_metric, hlat.watch,
hlat.alert and hlat.finish(exit_code=) work as wandb's do. $WANDB_MODE is read when $HLAT_MODE is
not set (offline keeps the records in the spool, for `python3 -m hlat sync`).
"""
import logging
import time

_log = logging.getLogger("hlat")
_said = set()
current = [None]   # the run hlat.log and the others act on: the last hlat.init's

# wandb.init's keywords that hlat keeps nowhere (accepted, said once).
IGNORED_INIT = ("entity", "group", "job_type", "tags", "notes", "reinit", "settings", "anonymous", "save_code",
                "sync_tensorboard", "monitor_gym", "allow_val_change", "magic", "force", "fork_from", "resume_from")
MODES = {"run": "online", "dryrun": "offline"}  # wandb's older names


def say_once(what, message):
    if what not in _said:
        _said.add(what)
        _log.warning("hlat: %s", message)


def init_arguments(name, options, meta):
    """wandb.init's keywords as hlat.init's: returns (name, meta); `options` loses the W&B-only
    ones (project goes into meta, id names the run when name does not)."""
    project = options.pop("project", None)
    run_id = options.pop("id", None)
    for key in IGNORED_INIT:
        if key in options:
            options.pop(key)
            say_once(("init", key), f"wandb.init's {key}= has no meaning in hlat and is left out")
    meta = dict(meta or {})
    if project:
        meta.setdefault("project", project)
    name = name or run_id or f"{project or 'run'}-{time.strftime('%Y%m%d-%H%M%S')}"
    return name, meta


def mode_of(mode, environ):
    mode = (mode or environ.get("HLAT_MODE") or environ.get("WANDB_MODE") or "online").strip().lower()
    return MODES.get(mode, mode)


def resume_of(resume):
    """wandb's resume values: "must" and "auto" as "allow" (hlat has no run ids to insist on)."""
    return "allow" if resume in ("must", "auto") else resume


class Config(dict):
    """wandb.config: a dict read and set by attribute too. The run's config is sent at its start;
    a later change is kept here and said once (it is not the stored config)."""

    def __init__(self, values=None, started=True):
        super().__init__(values or {})
        object.__setattr__(self, "_started", started)

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key, value):
        self[key] = value

    def __setitem__(self, key, value):
        if self._started:
            say_once("config", "wandb.config changed after init: hlat stores the config a run starts with; "
                               "pass it to init(config=...)")
        super().__setitem__(key, value)

    def update(self, values=None, allow_val_change=None, **more):
        for key, value in {**dict(values or {}), **more}.items():
            self[key] = value

    def setdefaults(self, values):
        for key, value in dict(values).items():
            self.setdefault(key, value)


class Summary(dict):
    """wandb.summary: the run's final numbers, sent as a `summary` event when the run finishes."""


def attach(run, config):
    """Gives a run W&B's attributes and makes it the current one."""
    run.id = run.name
    run.config = Config(config, started=True)
    run.summary = Summary()
    current[0] = run
    return run


def the_run(what):
    run = current[0]
    if run is None:
        raise RuntimeError(f"hlat.{what}: call hlat.init() first (as wandb.init() before wandb.{what})")
    return run


def log(data, step=None, commit=None, sync=None):
    the_run("log").log(data, step=step, commit=commit)


def define_metric(name, *args, **kwargs):
    say_once("define_metric", "wandb.define_metric has no meaning in hlat (every key is a series by step) and is "
                              "left out")


def watch(models, optimizer=None, criterion=None, log=None, log_freq=1, **options):
    """wandb.watch: hlat's internals watch (hlat.torch.watch) when the optimizer is given, every
    log_freq steps; W&B's own watch takes no optimizer, and without one hlat says so once."""
    run = the_run("watch")
    if optimizer is None:
        say_once("watch", "hlat.watch(model) needs the optimizer for the update statistics: "
                          "hlat.watch(model, optimizer=opt); left out")
        return None
    import hlat.torch
    model = models[0] if isinstance(models, (list, tuple)) else models
    return hlat.torch.watch(run, model, optimizer, every=max(1, int(log_freq or 1)), **options)


def alert(title, text="", level="warning", wait_duration=None):
    run = the_run("alert")
    run.alert(title, text, level=getattr(level, "value", level))


def finish(exit_code=None, quiet=None):
    run = current[0]
    if run is not None:
        run.finish(exit_code=exit_code)
        current[0] = None
