"""PyTorch probes for hlat: what a loop adds beyond loss and lr.

    norms = hlat.torch.grad_norms(model)            # before clipping; tensors, no host sync
    run.log({"loss": loss, **norms, **hlat.torch.param_norm(model)}, step=step)
    hlat.torch.check_replicas(run, model, step)     # every N steps, on every DP rank
    hlat.torch.probe_causality(run, model_fn, vocab_size, seq_len)  # before step 1 and every N

Every probe runs on every rank at the same step (they use collectives); only
rank 0 sends. Norms and hashes are computed on the device and moved to the
host once per call (one stacked tensor), never once per tensor.
"""
import torch
import torch.distributed as dist

from .client import HaltRequested, _dist


def _named(model_or_params):
    if isinstance(model_or_params, torch.nn.Module):
        return list(model_or_params.named_parameters())
    return list(model_or_params.items() if isinstance(model_or_params, dict) else model_or_params)


def grad_norms(model, per_tensor=True, prefix="grad_norm"):
    """Pre-clip global L2 norm of the gradients ("grad_norm") and, per tensor, "grad_norm/<name>"."""
    named = [(n, p.grad) for n, p in _named(model) if p.grad is not None]
    if not named:
        return {}
    norms = torch._foreach_norm([g.detach() for _, g in named])
    stacked = torch.stack([n.float() for n in norms])
    out = {prefix: torch.linalg.vector_norm(stacked)}
    if per_tensor:
        for (name, _), i in zip(named, range(len(named))):
            out[f"{prefix}/{name}"] = stacked[i]
    return out


def param_norm(model, key="param_norm"):
    """Global L2 norm of the parameters, as a tensor."""
    params = [p.detach() for _, p in _named(model)]
    return {key: torch.linalg.vector_norm(torch.stack([n.float() for n in torch._foreach_norm(params)]))}


class SystemMetrics:
    """The page's system panel for an external trainer: this process's CPU % since the
    previous call (100 = one core) and resident memory, and with CUDA the GPU's memory
    in use and, where the driver's NVML is there, its utilisation. Same keys as hlat's
    own trainer:  run.log({..., **system()}, step=step)  with  system = hlat.torch.SystemMetrics().
    """

    def __init__(self):
        import resource
        import time
        self._resource, self._time = resource, time
        self._last = (self._cpu(), time.monotonic())

    def _cpu(self):
        u = self._resource.getrusage(self._resource.RUSAGE_SELF)
        return u.ru_utime + u.ru_stime

    def __call__(self):
        cpu, now = self._cpu(), self._time.monotonic()
        (last_cpu, last_now), self._last = self._last, (cpu, now)
        out = {"cpu_pct": 100.0 * (cpu - last_cpu) / (now - last_now) if now > last_now else 0.0}
        try:
            with open("/proc/self/statm") as f:
                out["rss_mb"] = int(f.read().split()[1]) * self._resource.getpagesize() / 2**20
        except (OSError, IndexError, ValueError):
            pass
        if torch.cuda.is_available():
            out["gpu_mem_mb"] = torch.cuda.memory_allocated() / 2**20
            try:
                out["gpu_util_pct"] = float(torch.cuda.utilization())
            except Exception:  # no NVML (pynvml) in this environment: memory only
                pass
        return out


def tensor_hashes(tensors):
    """One int64 per tensor over its exact bits and their positions: any change of any bit shows."""
    out = []
    for t in tensors:
        flat = t.detach().contiguous().reshape(-1)
        bits = flat.view(torch.int32 if flat.element_size() == 4 else
                         torch.int16 if flat.element_size() == 2 else torch.int64 if flat.element_size() == 8
                         else torch.uint8).to(torch.int64)
        weights = torch.arange(1, 2 * bits.numel(), 2, device=bits.device, dtype=torch.int64)
        out.append(((bits + 0x9E3779B9) * weights).sum())
    return torch.stack(out) if out else torch.zeros(0, dtype=torch.int64)


def check_replicas(run, model, step, grads=False, group_key=0):
    """Data-parallel replica check: every rank hashes its parameters (or, with grads=True,
    its reduced gradients: call it between backward and clipping); rank 0 compares each rank
    with the first rank of the same group_key (the TP rank, when TP shards differ) and logs
    replica_mismatch (ranks that differ) with an event naming the first tensor. Collective.
    """
    d = _dist()
    named = [(n, p.grad if grads else p) for n, p in _named(model)]
    named = [(n, t) for n, t in named if t is not None]
    hashes = tensor_hashes([t for _, t in named]).cpu().tolist()
    rows = [(group_key, hashes)]
    if d is not None:
        rows = [None] * d.get_world_size()
        d.all_gather_object(rows, (group_key, hashes))
    if run.rank != 0:
        return 0
    what = "gradient" if grads else "parameter"
    reference, bad = {}, []
    for rank, (key, h) in enumerate(rows):
        ref_rank = reference.setdefault(key, rank)
        if ref_rank == rank:
            continue
        differ = [i for i, (a, b) in enumerate(zip(rows[ref_rank][1], h)) if a != b]
        if differ or len(h) != len(rows[ref_rank][1]):
            first = named[differ[0]][0] if differ else "(a different set of tensors)"
            bad.append(f"rank {rank} differs from rank {ref_rank} in {len(differ)} {what} tensor(s), first "
                       f"\"{first}\"")
    # The event first: a batch cut between the two still gives the detector the
    # ranks and tensor with (or before) the value.
    if bad:
        run.event("replica_mismatch", "; ".join(bad), step)
    run.record({"replica_mismatch": float(len(bad))}, step=step)
    return len(bad)


def tp_drift(run, tensors, group, step):
    """Tensor-parallel drift of replicated tensors (norm weights): the largest |w - w_tp0|
    over the group, logged as tp_drift and tp_drift/<name>. Every rank of every TP group calls it."""
    names = list(tensors)
    drifts = []
    src = dist.get_global_rank(group, 0) if hasattr(dist, "get_global_rank") else dist.distributed_c10d._get_global_rank(group, 0)
    for n in names:
        t = tensors[n].detach()
        ref = t.clone()
        dist.broadcast(ref, src=src, group=group)
        drifts.append((t.float() - ref.float()).abs().max())
    stacked = torch.stack(drifts) if drifts else torch.zeros(0)
    if dist.is_initialized():
        dist.all_reduce(stacked, op=dist.ReduceOp.MAX)
    values = {"tp_drift": stacked.max() if len(names) else torch.tensor(0.0)}
    for n, i in zip(names, range(len(names))):
        values[f"tp_drift/{n}"] = stacked[i]
    run.record(values, step=step)
    return values


@torch.no_grad()
def causality_probe(model_fn, vocab_size, seq_len, batch=1, device=None, seed=0):
    """Logits at positions <= T/2 must not change when only tokens after T/2 change.
    Returns (largest change, first position that changed or -1)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab_size, (batch, seq_len), generator=g)
    changed = tokens.clone()
    t = seq_len // 2
    changed[:, t + 1:] = (changed[:, t + 1:] + 1) % vocab_size
    if device is not None:
        tokens, changed = tokens.to(device), changed.to(device)
    before = model_fn(tokens)[:, : t + 1].float()
    after = model_fn(changed)[:, : t + 1].float()
    diff = (before - after).abs().nan_to_num(nan=float("inf"))
    per_position = diff.amax(dim=(0, 2))
    changed_at = torch.nonzero(per_position > 0)
    return float(per_position.max()), int(changed_at[0]) if len(changed_at) else -1


def probe_causality(run, model_fn, vocab_size, seq_len, step=0, batch=1, device=None, tolerance=0.0, timeout=30.0):
    """Runs the causality probe and sends causality_leak (0 when within tolerance); waits for
    hlat's verdict and raises HaltRequested when the information_leak detector halts the run.
    Call it before the first step and every N steps, on every rank (model in eval mode is best)."""
    leak, position = causality_probe(model_fn, vocab_size, seq_len, batch, device)
    value = leak if leak > tolerance else 0.0
    if run.rank == 0:
        run.record({"causality_leak": value, "causality_leak_position": float(position)}, step=step)
        run.flush(timeout)
    if run.should_stop(step):
        raise HaltRequested(run.halt_reason())
    return value
