"""The watch on a job of several ranks: which rank's local numbers count toward a whole tensor's,
block's or head's statistic, and the one collective a watched step costs.

Every statistic the watch keeps is a sum or a maximum over coordinates (sums of squares,
counts, sums of entropies, largest values), so a whole tensor's is its shards' summed: each rank
measures what it holds (a DTensor's local shard, a stage's own blocks, its own heads, its own
batch) and the statistic is finished (square roots, ratios, means) only after the ranks' parts
are put together. What each rank holds decides its weight, 1 or 0, on a sum:

    a DTensor parameter (FSDP2, TP)   its shard, on every mesh dimension it is Shard on;
                                      on a dimension it is Replicate on, coordinate 0 alone counts
    a plain parameter                 the lowest rank that holds one of that name (DDP's replicas,
                                      TP's unsharded norms); a pipeline stage's own are its alone
    copies of a DTensor               a DTensor's mesh may be one of several copies (FSDP2 over the
                                      dp ranks of each tp rank shards a norm weight TP left whole):
                                      the copy whose mesh has the lowest rank alone counts
    activations, log Z                every rank's batch counts, except on a model-parallel mesh
                                      dimension (tp), where the ranks see the same activations:
                                      coordinate 0 alone (sequence_parallel=True: all of them)
    attention heads under TP          each tp rank's own heads, labelled by their global index

Maxima need no weight (a replica's maximum is the same). The parts travel in one all_gather of
a fixed-size float64 vector per watched step, over a process group of the watch's own, issued
without waiting (async_op): the rank that sends waits for it on its sender thread, the others
at their next watched step. The layout of each rank's vector (which key, which labels) is
exchanged once, at the first watched step.
"""
import torch
import torch.distributed as dist

MODEL_PARALLEL_DIMS = ("tp",)   # mesh dimensions whose ranks see the same batch (torchtitan's names)


def dtensor_type():
    """torch's DTensor class, or None (torch < 2.4 names it torch.distributed._tensor)."""
    for module in ("torch.distributed.tensor", "torch.distributed._tensor"):
        try:
            return __import__(module, fromlist=["DTensor"]).DTensor
        except (ImportError, AttributeError):
            continue
    return None


_DTENSOR = dtensor_type()


def is_dtensor(t):
    return _DTENSOR is not None and isinstance(t, _DTENSOR)


def local(t, like=None):
    """The part of `t` this rank holds: a DTensor's local shard, a plain tensor itself. A
    gradient laid out otherwise than its parameter `like` (TP's embedding gradient comes back
    Partial: pending a reduction, its local part is no shard of the whole) is laid out as the
    parameter first, as the optimizer's step will do anyway."""
    if not is_dtensor(t):
        return t
    if like is not None and is_dtensor(like) and tuple(t.placements) != tuple(like.placements):
        t = t.redistribute(like.device_mesh, like.placements)
    elif any(p.is_partial() for p in t.placements):
        from torch.distributed.tensor import Replicate
        t = t.redistribute(t.device_mesh, [Replicate() if p.is_partial() else p for p in t.placements])
    return t.to_local()


def _mesh_of(model):
    for p in model.parameters():
        if is_dtensor(p):
            return p.device_mesh
    return None


def _model_dims(mesh, model, names):
    """The mesh dimensions (indices) whose ranks see the same batch."""
    if mesh is None:
        return []
    dim_names = getattr(mesh, "mesh_dim_names", None)
    if dim_names:
        return [i for i, n in enumerate(dim_names) if n in names]
    if mesh.ndim > 1:
        raise ValueError("hlat.torch.watch: the parameters' device mesh has several unnamed dimensions; name them "
                         "(init_device_mesh(..., mesh_dim_names=(\"dp\", \"tp\"))) or pass mesh= with names, so the "
                         "watch knows which ranks see the same batch (tp) and which see their own (dp)")
    # One unnamed dimension: FSDP2 shards every parameter on dimension 0; TP also splits along
    # dimension 1 (rowwise) or leaves some replicated.
    from torch.distributed.tensor import Shard
    for p in model.parameters():
        if is_dtensor(p) and any(pl != Shard(0) for pl in p.placements):
            return [0]
    return []


def _first_on(mesh, dims):
    """Whether this rank is coordinate 0 on every one of the mesh's dimensions `dims`."""
    coordinate = mesh.get_coordinate() if mesh is not None else None
    return coordinate is None or all(coordinate[d] == 0 for d in dims)


class Job:
    """The watch's view of the job: this rank's weights and the collective. None of it exists
    in a single process (Job.of returns None)."""

    @staticmethod
    def of(model, labels, mesh=None, model_parallel_dims=MODEL_PARALLEL_DIMS, sequence_parallel=False):
        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return None
        return Job(model, labels, mesh, model_parallel_dims, sequence_parallel)

    def __init__(self, model, labels, mesh, model_parallel_dims, sequence_parallel):
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.group = dist.new_group()     # the watch's own: its collective never waits behind the trainer's
        self.mesh = mesh if mesh is not None else _mesh_of(model)
        dims = _model_dims(self.mesh, model, set(model_parallel_dims))
        self.tp_rank, self.tp_size = 0, 1
        if len(dims) == 1:
            self.tp_rank, self.tp_size = self.mesh.get_coordinate()[dims[0]], self.mesh.size(dims[0])
        self.activation_weight = 1.0 if sequence_parallel or _first_on(self.mesh, dims) else 0.0
        params = [p for _, p in model.named_parameters() if p.requires_grad]
        copies = [self._copy_of(p) for p in params]
        held = [None] * self.world
        dist.all_gather_object(held, list(zip(labels, copies)), group=self.group)  # once: who holds what
        first = {}
        for pairs in held:
            for label, copy in pairs:
                first[label] = min(first.get(label, copy), copy)
        self.tensor_weights = [self._weight(p, copy == first[lab]) for lab, p, copy in zip(labels, params, copies)]
        self.device = torch.device("cpu")
        if dist.get_backend(self.group) == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.layouts = None    # every rank's, after the first watched step
        self.capacity = 0
        self._in_flight = []   # this rank's gathers not yet waited for (it does not send)

    def _copy_of(self, p):
        """Which copy of a parameter this rank holds part of: its DTensor mesh's lowest rank, or
        for a plain tensor this rank."""
        return int(p.device_mesh.mesh.min()) if is_dtensor(p) else self.rank

    def _weight(self, p, first_copy):
        if not first_copy:
            return 0.0
        if not is_dtensor(p):
            return 1.0
        replicated = [d for d, pl in enumerate(p.placements) if pl.is_replicate()]
        return 1.0 if _first_on(p.device_mesh, replicated) else 0.0

    def exchange(self, layout):
        """Once, at the first watched step (a collective): every rank's layout."""
        layouts = [None] * self.world
        dist.all_gather_object(layouts, layout, group=self.group)
        self.layouts = layouts
        self.capacity = max(sum(size for *_, size in lay) for lay in layouts)

    def gather(self, flat):
        """Starts the all_gather of this rank's vector; returns (the world x capacity buffer, the
        work to wait for)."""
        for work in self._in_flight:
            work.wait()       # a step behind: long done
        self._in_flight = []
        mine = torch.zeros(self.capacity, dtype=torch.float64, device=self.device)
        mine[:flat.numel()] = flat.to(self.device)
        out = torch.empty(self.world * self.capacity, dtype=torch.float64, device=self.device)
        work = dist.all_gather_into_tensor(out, mine, group=self.group, async_op=True)
        return out, work

    def keep(self, work):
        self._in_flight.append(work)

    def close(self):
        for work in self._in_flight:
            work.wait()
        self._in_flight = []
