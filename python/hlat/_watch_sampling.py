"""Which coordinates of a large tensor stand for it in the watch's optimizer statistics
(_watch_optimizer): its weight and update norms and Adam's epsilon share come from a fixed
sample, copied before optimizer.step() and read again after, because a pass over every weight
twice a watched step would cost more than the rest of the watch."""
import torch

TENSOR_SAMPLE = 1 << 15          # a larger tensor's weight and update norms and epsilon share come from this many
                                 # coordinates
                                 # (under ATen's grain size: each op on a sample runs inline, no thread wake-up)
RUN = 64                         # ... in runs of this many neighbours (memory read in whole cache lines)


def _sample_index(t, cap=TENSOR_SAMPLE):
    """Which runs of RUN coordinates stand for a tensor of more than `cap`: cap / RUN of them
    drawn at random once (a fixed seed; evenly strided runs would alias with the rows of a
    matrix and see the same columns only), sorted; None: all of it."""
    n = t.numel()
    if cap is None or n <= cap:
        return None
    g = torch.Generator().manual_seed(n)
    runs = n // RUN
    return torch.randperm(runs, generator=g)[: cap // RUN].sort().values.to(t.device)


def _sample(t, index, copy=True):
    """The coordinates of `t` that `index` names (all of them for None), as a new 1-d or 2-d
    tensor (copy=False: all of them may come as a view of `t`)."""
    flat = t.reshape(-1)
    if index is None:
        return flat.clone() if copy else flat
    return flat[: flat.numel() // RUN * RUN].view(-1, RUN).index_select(0, index)


def _scaled(norms, factors):
    """Sample norms scaled to the whole tensor's (a factor of 1: the norm is the whole's)."""
    return [n * f if f != 1.0 else n for n, f in zip(norms, factors)]
