"""PyTorch probes for hlat: what a loop adds beyond loss and lr.

    norms = hlat.torch.grad_norms(model)            # before clipping; tensors, no host sync
    run.log({"loss": loss, **norms, **hlat.torch.param_norm(model)}, step=step)
    hlat.torch.check_replicas(run, model, step)     # every N steps, on every DP rank
    hlat.torch.probe_causality(run, model_fn, vocab_size, seq_len)  # before step 1 and every N
    hlat.torch.watch(run, model, optimizer)         # the model's internals, every step (docs/internals.md)

Every probe runs on every rank at the same step (they use collectives); only
rank 0 sends. Norms and hashes are computed on the device and moved to the
host once per call (one stacked tensor), never once per tensor.
"""
import torch
import torch.distributed as dist

from ._watch import Watch, attention_logits  # noqa: F401  (attention_logits: the helper's arithmetic)
from ._shards import is_dtensor, local
from .client import HaltRequested, _dist


def watch(run, model, optimizer, every=1, step=0, **options):
    """Measures the model's internals every `every` steps (docs/internals.md's keys) and sends
    them through `run` at the step they belong to: per block the residual stream's RMS and
    largest value; per layer and head the largest attention logit and the attention entropy;
    the output logits' log Z (mean, max) and largest logit; per parameter tensor (labelled by
    its name in named_parameters, DDP's "module." left out) the gradient norm before clipping,
    the weight norm, the update norm, the update-to-weight ratio and Adam's epsilon share.

    Call it once, after the optimizer is made, on every rank: a collective in a job of several
    ranks, where every rank measures what it holds (FSDP2 and TP shards, its pipeline stage's
    blocks, its heads, its batch) and the parts meet in one all_gather a watched step, sent by
    the run's main rank (docs/external-trainers.md, "Sharded models"). Steps are
    counted by optimizer.step() calls from `step` (set watch.step to follow the loop's numbering).
    Reductions stay on the device; the numbers of a step go to the host in one copy, read by
    the sender thread. Returns the Watch (close() removes its hooks). Options: logits_module
    (the module whose output is the logits), blocks (the residual blocks), attention=False (no
    attention statistics), sdpa_sample (attention logits materialised per
    scaled_dot_product_attention call, at most; default 4M), entropy_sample (a model's own
    softmax of more probabilities than this in one call gives the entropy at every r-th query;
    default 256K; None: all), tensor_sample (a tensor of more coordinates has its weight and
    update norms and epsilon share from a sample of this many; default 32,768; None: all),
    mesh (the DeviceMesh, when the parameters' own does not name its dimensions),
    model_parallel_dims (the mesh dimensions whose ranks see the same batch; default ("tp",)),
    sequence_parallel (the tp ranks hold shares of the sequence: their activations all count),
    heads (the model's attention head count, when its config does not say), pipeline_stage
    (a torch.distributed.pipelining stage: its metadata probe's forward is not counted)."""
    return Watch(run, model, optimizer, every=every, step=step, **options)


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
    """The page's system panel, sampled when called: this process's CPU % since the previous
    call (100 = one core) and resident memory, and with CUDA in use the memory PyTorch holds
    and, where the driver's NVML is there, the GPU's utilisation. Same keys as hlat's own
    trainer:  run.log({..., **system()}, step=step)  with  system = hlat.torch.SystemMetrics().
    hlat.init samples the same on a thread of its own (system_interval, every 10 s by default).
    """

    def __init__(self):
        from ._system import Probe
        self._probe = Probe()

    def __call__(self):
        return self._probe()


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


def _replica_tensors(model, grads):
    """[(kind, [(name, parameter, tensor)])] to hash: gradients, parameters, or both (grads=None)."""
    named = _named(model)
    gradients = [(n, p, p.grad) for n, p in named if p.grad is not None]
    kinds = []
    if grads is True or (grads is None and gradients):
        kinds.append(("gradient", gradients))
    if grads is not True:
        kinds.append(("parameter", [(n, p, p) for n, p in named]))
    return kinds


def _shard_key(p):
    """Which part of a parameter a rank holds: the same key on two ranks means the same bits are
    due. A DTensor's coordinates on the mesh dimensions it is sharded on (FSDP2's dp, TP's tp;
    none on those it is replicated on); a plain tensor's: the whole."""
    if not is_dtensor(p):
        return ()
    coordinate = p.device_mesh.get_coordinate() or []
    return tuple((d, coordinate[d]) for d, pl in enumerate(p.placements) if not pl.is_replicate())


def check_replicas(run, model, step, grads=None, group_key=0):
    """Replica check, a collective: every rank hashes its reduced gradients and its parameters
    (a DTensor's local shard: FSDP2, TP); the main rank compares, tensor by tensor, each rank with
    the lowest rank that holds the same part of the same tensor (a plain tensor: DDP's replicas,
    TP's unsharded norms; a DTensor: the ranks with the same shard, e.g. HSDP's replicas or a norm
    weight TP replicates; group_key tells apart hand-made TP shards of plain tensors) and logs
    replica_mismatch (ranks that differ) with an event naming, for each, the first tensor that
    differs. A tensor no other rank holds the same part of (FSDP2's shards) has nothing to be
    compared with.

    Call it between backward and gradient clipping. Under global-norm clipping one tensor's
    wrong gradient changes the clip factor of all, so after the step every parameter differs
    and the parameters name the wrong tensor; the gradients, before clipping, name the right
    one. grads=None (the default) hashes both when gradients are there (the gradients name the
    tensor; the parameters show a difference left by any earlier step, which a check of this
    step's gradients cannot), parameters alone when they are not (after zero_grad());
    grads=True gradients only, grads=False parameters only.
    """
    if getattr(run, "disabled", False):
        return 0
    d = _dist()
    kinds = _replica_tensors(model, grads)
    flat = tensor_hashes([local(t, like=p) for _, named in kinds for _, p, t in named]).cpu().tolist()
    mine, at = [], 0
    for kind, named in kinds:
        mine.extend((kind, n, _shard_key(p), group_key, h) for (n, p, _), h in zip(named, flat[at:at + len(named)]))
        at += len(named)
    rows = [mine]
    if d is not None:
        rows = [None] * d.get_world_size()
        d.all_gather_object(rows, mine)
    if run.rank != getattr(run, "main_rank", 0):
        return 0
    bad = _replica_report(rows)
    # The event first: a batch cut between the two still gives the detector the
    # ranks and tensor with (or before) the value.
    if bad:
        run.event("replica_mismatch", "; ".join(bad), step)
    run.record({"replica_mismatch": float(len(bad))}, step=step)
    return len(bad)


def _replica_report(rows):
    """'rank 1 differs from rank 0 in 1 gradient tensor(s), first "h.1.mlp.c_fc.weight"' for each
    rank with a tensor whose hash is not its reference rank's."""
    reference = {}                 # (kind, name, shard, group) -> (rank, hash)
    differing = {}                 # (rank, reference rank) -> {kind: [names]}
    for rank, entries in enumerate(rows):
        for kind, name, shard, group, h in entries:
            ref_rank, ref_hash = reference.setdefault((kind, name, tuple(map(tuple, shard)), group), (rank, h))
            if ref_rank != rank and h != ref_hash:
                differing.setdefault((rank, ref_rank), {}).setdefault(kind, []).append(name)
    bad = []
    for (rank, ref_rank), by_kind in sorted(differing.items()):
        parts = [f"{len(names)} {kind} tensor(s), first \"{names[0]}\"" for kind, names in by_kind.items()]
        bad.append(f"rank {rank} differs from rank {ref_rank} in " + " and ".join(parts))
    return bad


def tp_drift(run, tensors, group, step):
    """Tensor-parallel drift of replicated tensors (norm weights): the largest |w - w_tp0|
    over the group, logged as tp_drift and tp_drift/<name>. Every rank of every TP group calls it."""
    names = list(tensors)
    drifts = []
    src = dist.get_global_rank(group, 0) if hasattr(dist, "get_global_rank") else dist.distributed_c10d._get_global_rank(group, 0)
    for n in names:
        t = local(tensors[n].detach())  # a DTensor replicated over the group: its local copy
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


def _logits(out):
    """The logits of a model's output: the tensor itself, or the first item of a tuple or list
    (nanoGPT's forward returns (logits, loss))."""
    if isinstance(out, (tuple, list)):
        out = out[0] if out else None
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"the causality probe needs logits (B, T, V) from the model, or a tuple whose first item "
                        f"they are; it returned {type(out).__name__}")
    return out


def _all_positions(model_fn, tokens):
    """Logits for every position. A model that gives fewer without targets (nanoGPT's forward
    gives the last position only) is asked again with the tokens as targets, as its training
    step does."""
    logits = _logits(model_fn(tokens))
    if logits.dim() == 3 and logits.shape[1] != tokens.shape[1]:
        try:
            logits = _logits(model_fn(tokens, tokens))
        except TypeError:
            pass
    if logits.dim() != 3 or logits.shape[1] != tokens.shape[1]:
        raise ValueError(f"the causality probe needs logits for every one of the {tokens.shape[1]} positions, "
                         f"(batch, positions, vocab); the model gave {tuple(logits.shape)}: pass a function that "
                         "returns them, e.g. lambda x: model(x, x)[0]")
    return logits


@torch.no_grad()
def causality_probe(model_fn, vocab_size, seq_len, batch=1, device=None, seed=0):
    """Logits at positions <= T/2 must not change when only tokens after T/2 change.
    model_fn: a model (nn.Module) or any callable of the tokens (B, T) returning logits
    (B, T, V) or a tuple/list whose first item they are. A module is put in eval mode for the
    probe (dropout would change logits by itself) and on its own device unless `device` says.
    Returns (largest change, first position that changed or -1)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab_size, (batch, seq_len), generator=g)
    changed = tokens.clone()
    t = seq_len // 2
    changed[:, t + 1:] = (changed[:, t + 1:] + 1) % vocab_size
    module = model_fn if isinstance(model_fn, torch.nn.Module) else None
    if device is None and module is not None:
        device = next((p.device for p in module.parameters()), None)
    if device is not None:
        tokens, changed = tokens.to(device), changed.to(device)
    training = module.training if module is not None else False
    if module is not None:
        module.eval()
    try:
        before = _all_positions(model_fn, tokens)[:, : t + 1].float()
        after = _all_positions(model_fn, changed)[:, : t + 1].float()
    finally:
        if module is not None:
            module.train(training)
    diff = (before - after).abs().nan_to_num(nan=float("inf"))
    per_position = diff.amax(dim=(0, 2))
    changed_at = torch.nonzero(per_position > 0)
    return float(per_position.max()), int(changed_at[0]) if len(changed_at) else -1


def probe_causality(run, model_fn, vocab_size, seq_len, step=0, batch=1, device=None, tolerance=0.0, timeout=30.0):
    """Runs the causality probe (model_fn: see causality_probe) and sends causality_leak (0
    when within tolerance); waits for hlat's verdict and raises HaltRequested when the
    information_leak detector halts the run. Call it before the first step and every N steps,
    on every rank (a collective with torch.distributed: should_stop)."""
    if getattr(run, "disabled", False):
        return 0.0
    leak, position = causality_probe(model_fn, vocab_size, seq_len, batch, device)
    value = leak if leak > tolerance else 0.0
    if run.rank == getattr(run, "main_rank", 0):
        run.record({"causality_leak": value, "causality_leak_position": float(position)}, step=step)
        run.flush(timeout)
    if run.should_stop(step):
        raise HaltRequested(run.halt_reason())
    return value
