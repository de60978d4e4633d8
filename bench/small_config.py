"""The model a bench's --small mode trains: the bench's whole path in seconds,
its figures meaningless (the test suite's check that the bench still runs,
tests/bench_small.py).

shrink() cuts a config's model to 2 layers of width 64, its batch to 4 x 64
tokens and its threads to one. The vocabulary and the heads stay the
config's, so the token files a bench draws below the vocabulary, and the
layouts that split the heads (bench/scaling's tensor parallelism), stay valid.
"""
import atexit
import json
import os
import shutil
import tempfile

# One thread: the test suite runs two tests at a time on as few as 2 cores, where
# two threads each would wait on each other at every parallel region.
SMALL_THREADS = 1
SMALL_MODEL = {"dim": 64, "n_layers": 2, "hidden_dim": 192, "max_seq_len": 64}
SMALL_RUN = {"batch_size": 4, "seq_len": 64, "threads": SMALL_THREADS}


def shrink(cfg):
    """cfg (a config as a dict) with the small model and batch, in place; returns it."""
    cfg["model"].update(SMALL_MODEL)
    cfg["run"].update(SMALL_RUN)
    return cfg


def small_config(path):
    """A shrunk copy of the config file at path, under the same file name (the
    bench's report names it alike), in a folder removed when the bench exits."""
    folder = tempfile.mkdtemp(prefix="hlat_small_")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    out = os.path.join(folder, os.path.basename(path))
    with open(path) as f:
        cfg = shrink(json.load(f))
    with open(out, "w") as f:
        json.dump(cfg, f)
    return out
