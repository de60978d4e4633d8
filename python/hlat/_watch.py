"""hlat.torch.watch: a model's internals every `every` steps, measured on the device and sent
through the run's queue (docs/internals.md has the keys; docs/external-trainers.md the call).

One watched step, as the hooks see it:

    model forward (training mode, grad on)   residual stream per block, output logits, attention
                                             logits (softmax / scaled_dot_product_attention patched
                                             for the forward's length only)
    loss.backward()
    clip_grad_norm_ (or watch.before_clip()) per-tensor gradient norms, before clipping (the
                                             wrapped clip_grad_norm_ clips with them)
    optimizer.step(): pre-hook               weights copied (a tensor of more than 32,768 coordinates:
                                             a fixed random sample of that many), weight norms before
                      post-hook              update norms, weight norms after, Adam's epsilon share
                                             (all four from the copy and the same coordinates after:
                                             no pass over a large tensor's weights);
                                             every number of the step stacked into one tensor,
                                             moved to the host once (non_blocking into pinned
                                             memory on CUDA), and queued: the sender thread
                                             waits for the copy and makes the vectors

Off-step, the forward hooks are not registered and the optimizer's hooks count the step and
return; nothing reads a tensor on the training thread at any step.
"""
import math
import threading
import types
import weakref

import logging

import torch
import torch.nn.functional as F

from ._records import Deferred
from ._shards import MODEL_PARALLEL_DIMS, Job, is_dtensor, local

BLOCK_LISTS = ("h", "layers", "blocks")            # nanoGPT, HF LLaMA / torchtitan, many others
LOGITS_NAMES = ("lm_head", "output", "head", "embed_out")
PREFIXES = ("module.", "_orig_mod.")              # DDP, torch.compile
SDPA_SAMPLE_ELEMENTS = 1 << 22   # attention logits materialised per scaled_dot_product_attention call, at most
ENTROPY_SAMPLE = 1 << 18         # a model's own softmax: the entropy from at most this many probabilities a call
TENSOR_SAMPLE = 1 << 15          # a larger tensor's weight and update norms and epsilon share come from this many
                                 # coordinates
                                 # (under ATen's grain size: each op on a sample runs inline, no thread wake-up)
RUN = 64                         # ... in runs of this many neighbours (memory read in whole cache lines)

_log = logging.getLogger("hlat")
_live = weakref.WeakSet()        # watches whose clip_grad_norm_ wrapper is wanted
_active = [None]                 # the watch inside a watched forward (one at a time), for the patches
_patched = {}                    # (owner, name) -> the original, while patched
_busy = [False]                  # inside a patched softmax (F.softmax calls Tensor.softmax)


def _label(name):
    changed = True
    while changed:
        changed = False
        for prefix in PREFIXES:
            if name.startswith(prefix):
                name, changed = name[len(prefix):], True
    return name


def _find_blocks(model):
    """The residual blocks, {layer index: block}: the first ModuleList (or ModuleDict, torchtitan)
    named h, layers or blocks. A ModuleDict's keys are the indices when they are numbers: a
    pipeline stage of torchtitan's keeps the layers it holds under their global indices."""
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in BLOCK_LISTS and isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict)):
            if isinstance(module, torch.nn.ModuleDict):
                keys = list(module.keys())
                numbered = all(k.isdigit() for k in keys)
                blocks = {int(k) if numbered else i: m for i, (k, m) in enumerate(module.items())}
            else:
                blocks = dict(enumerate(module))
            if blocks:
                return blocks
    return {}


def _global_heads(model):
    """The model's attention head count from its config (Hugging Face, nanoGPT, torchtitan), or None."""
    for holder in (getattr(model, "config", None), getattr(model, "model_args", None), model):
        for name in ("num_attention_heads", "n_head", "n_heads"):
            value = getattr(holder, name, None) if holder is not None else None
            if isinstance(value, int):
                return value
    return None


def _vocab_size(model):
    sizes = [m.num_embeddings for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    return max(sizes) if sizes else None


def _find_logits_module(model, vocab):
    """The module whose output is the logits: a Linear named lm_head / output / head / embed_out,
    else the last Linear with `vocab` outputs; None (then the model's own output is read)."""
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    for name, m in linears:
        if name.rsplit(".", 1)[-1] in LOGITS_NAMES and (vocab is None or m.out_features == vocab):
            return m
    matching = [m for _, m in linears if vocab is not None and m.out_features == vocab]
    return matching[-1] if matching else None


def _first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    if isinstance(out, dict) or hasattr(out, "logits"):  # Hugging Face's ModelOutput
        x = out.get("logits") if isinstance(out, dict) else out.logits
        return x if isinstance(x, torch.Tensor) else None
    return None


def attention_logits(query, key, scale=None, is_causal=False, attn_mask=None, max_elements=None):
    """The pre-softmax attention logits (..., heads, queries, keys) of
    F.scaled_dot_product_attention(query, key, ...), float32, -inf where the mask forbids:
    q.k * scale (default 1/sqrt(head_dim)), a causal mask aligned top-left as PyTorch's, a
    boolean mask (True takes part) or a float mask added. Keys with fewer heads than the queries
    (grouped-query attention) are repeated. With max_elements, when the logits of the whole
    batch would be more, only the first sequence's are computed, at every r-th query (r the
    smallest that fits): (heads, queries / r, keys)."""
    q, k = query.detach(), key.detach()
    if q.dim() < 3:
        raise ValueError(f"attention_logits: query of shape {tuple(q.shape)}: (..., heads, queries, head_dim) expected")
    rows = torch.arange(q.shape[-2], device=q.device)
    if max_elements is not None and q.numel() // q.shape[-1] * k.shape[-2] > max_elements:
        q = q[(0,) * (q.dim() - 3)]  # the first sequence
        k = k[(0,) * (k.dim() - 3)]
        stride = max(1, math.ceil(q.shape[-3] * q.shape[-2] * k.shape[-2] / max_elements))
        rows = rows[::stride]
        q = q[..., rows, :]
        if attn_mask is not None:
            attn_mask = attn_mask.detach()
            if attn_mask.dim() > 3:
                attn_mask = attn_mask[(0,) * (attn_mask.dim() - 3)]
            if attn_mask.shape[-2] > 1:
                attn_mask = attn_mask[..., rows, :]
    if k.shape[-3] != q.shape[-3]:  # grouped-query attention
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    s = torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale
    if is_causal:
        allowed = rows[:, None] >= torch.arange(s.shape[-1], device=s.device)[None, :]
        s = s.masked_fill(~allowed, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            s = s.masked_fill(~attn_mask, float("-inf"))
        else:
            s = s + attn_mask.float()
    return s


# The watch's code that runs inside a model's forward on a watched step runs eagerly in a
# compiled model: TorchDynamo breaks the graph at each and calls it, rather than tracing its
# Python (which guards on the step's dicts and recompiled the model until torch's recompile
# limit: +100 % a watched step of a compiled 0.25B LLaMA on an H200, bench/watch_cuda). Done when
# the first watch is made, not at import: torch.compiler.disable imports TorchDynamo (1.3 s).
_EAGER = ("_model_pre_watched", "_model_post", "_block_pre", "_block_post", "_logits_post", "_softmax_seen",
          "_sdpa_seen", "_attention")


def _in_backward():
    """Whether autograd is running a backward on this thread (an activation-checkpoint recompute
    calls the forward's modules again there)."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


def _run_eagerly(cls):
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    if disable is None or cls.__dict__.get("_eager_done"):
        return
    for name in _EAGER:
        setattr(cls, name, disable(cls.__dict__[name]))
    cls._eager_done = True


def _counts_each(moments, steps, beta2s, epss):
    """Per second-moment tensor v (a 1-d float32 sample or whole tensor): its coordinates with
    sqrt(v_hat) < eps, that is 0 < v < (1 - beta2^step) eps^2, and those with v > 0 (two float64
    vectors), tensor by tensor."""
    below, nonzero = [], []
    for v, step, beta2, eps in zip(moments, steps, beta2s, epss):
        limit = (1 - beta2 ** step) * eps * eps  # a float, or a 0-d tensor where the optimizer keeps its step
        n = torch.count_nonzero(v)
        below.append((v < limit).sum() - (v.numel() - n))  # the zeros are below it too
        nonzero.append(n)
    return torch.stack(below).double(), torch.stack(nonzero).double()


def _counts_segmented(moments, steps, beta2s, epss):
    """_counts_each's counts from one vector of all the tensors, in a few kernels and no wait for
    the device (segment_reduce's unsafe=True skips its checks, which read the lengths back)."""
    device = moments[0].device
    sizes = [v.numel() for v in moments]
    lengths = torch.tensor(sizes, device=device)
    flat = torch.cat(moments)
    if flat.numel() == 0:
        zeros = torch.zeros(len(moments), dtype=torch.float64, device=device)
        return zeros, zeros
    if all(not isinstance(t, torch.Tensor) for t in steps):
        limits = [(1 - b ** float(t)) * e * e for t, b, e in zip(steps, beta2s, epss)]
        same = all(x == limits[0] for x in limits)
        limit = limits[0] if same else torch.tensor(limits, device=device)
    else:  # steps on the device (fused or capturable Adam): one stack, no copy to the host
        step = torch.stack([torch.as_tensor(t, device=device).reshape(()).float() for t in steps])
        beta2 = torch.tensor(beta2s, device=device)
        limit = (1 - beta2 ** step) * torch.tensor(epss, device=device).square()
    if isinstance(limit, torch.Tensor):
        limit = limit.float().repeat_interleave(lengths, output_size=flat.numel())
    flags = torch.stack(((flat > 0) & (flat < limit), flat != 0), dim=1).float()
    # Exact in float32 up to 2^24 coordinates a tensor (a sample is 32,768); past it, within 1e-7.
    sums = torch.segment_reduce(flags, "sum", lengths=lengths, axis=0, unsafe=True).double()
    return sums[:, 0], sums[:, 1]


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


def _stack(values, device):
    """0-d tensors (or numbers) as one float64 1-d tensor on `device`."""
    if not values:
        return torch.zeros(0, dtype=torch.float64, device=device)
    try:  # 0-d tensors of one device: one op
        return torch.stack(list(values)).reshape(-1).to(device=device, dtype=torch.float64)
    except (RuntimeError, TypeError):
        return torch.stack([torch.as_tensor(v).reshape(()).to(device=device, dtype=torch.float64) for v in values])


def _scaled(norms, factors):
    """Sample norms scaled to the whole tensor's (a factor of 1: the norm is the whole's)."""
    return [n * f if f != 1.0 else n for n, f in zip(norms, factors)]


def _row_stats(logits, probs, row_max=None):
    """Per row (query) of attention logits s and their softmax p: the largest logit and the
    entropy -sum p log p, as log Z - sum p s with log Z = max s - log max p (no log of every
    probability: 4x cheaper on CPU than xlogy). Masked logits (-inf, p = 0) add nothing.
    row_max: the rows' largest logits when known."""
    s = logits.float()
    p = probs.float()
    if row_max is None:
        row_max = s.amax(-1)
    log_z = row_max - p.amax(-1).log()
    mean_logit = (p * s.clamp(min=-3.0e38)).sum(-1)  # -inf * 0 would be NaN; einsum is 2x slower on CPU
    return row_max, (log_z - mean_logit).clamp(min=0)


def _head_dims(t):
    """Every dimension of (..., heads, queries[, keys]) but the heads'."""
    return tuple(i for i in range(t.dim()) if i != t.dim() - 3)


class _Step:
    """What a watched step has gathered so far, on the device: 0-d or 1-d tensors and counts."""

    def __init__(self):
        self.res_sq, self.res_max, self.res_n = {}, {}, {}     # block -> [tensors], count
        self.att_max, self.att_ent, self.att_rows = {}, {}, {}  # block -> [(heads,) tensors], rows
        self.lz_sum, self.lz_max, self.logit_max, self.lz_rows = [], [], [], 0
        self.grad_norms = None
        self.before_norms = None


class _Values(Deferred):
    """A watched step's numbers, on their way: every rank's vector (one in a single process), the
    layouts that say what each holds, and how to finish them into the step's keys. Ranks' parts
    of one statistic (the same key and label) are summed or, for maxima, the largest kept; then
    norms are square roots, ratios and means divided (see _shards)."""

    def __init__(self, flat, event, layouts, work=None):
        self.flat, self.event, self.layouts, self.work = flat, event, layouts, work

    def resolve(self):
        if self.work is not None:
            self.work.wait()
            if self.flat.device.type != "cpu":
                self.flat = self.flat.cpu()
        if self.event is not None:
            self.event.synchronize()
        flat = self.flat.tolist()
        capacity = len(flat) // len(self.layouts)
        merged = {}   # key -> (kind, {label: [parts]})
        for r, layout in enumerate(self.layouts):
            at = r * capacity
            for key, kind, labels, size in layout:
                _merge(merged, key, kind, labels, flat[at:at + size])
                at += size
        _complete_heads(merged)
        return {key: _finish(kind, values) for key, (kind, values) in merged.items()}


PARTS = {"norm": 1, "ratio": 2, "share": 2, "rms": 2, "per_row": 2, "mean": 2, "max": 1, "scalar_max": 1}
MAXIMA = ("max", "scalar_max")


def _merge(merged, key, kind, labels, part):
    """Adds one rank's `part` of a key (PARTS[kind] blocks of len(labels) numbers) to merged."""
    n = len(labels)
    kind_seen, values = merged.setdefault(key, (kind, {}))
    for j, label in enumerate(labels):
        mine = [part[c * n + j] for c in range(PARTS[kind])]
        have = values.get(label)
        if have is None:
            values[label] = mine
        elif kind in MAXIMA:
            values[label] = [a if math.isnan(a) or a >= b else b for a, b in zip(have, mine)]
        else:
            values[label] = [a + b for a, b in zip(have, mine)]


def _head_of(label):
    """"layers.3.head.5" -> 5."""
    return int(label.rpartition(".head.")[2])


def _block_order(label):
    """"layers.10" after "layers.9"; labels of other forms after, by name."""
    number = label.rpartition(".")[2]
    return (0, int(number), label) if number.isdigit() else (1, 0, label)


def _complete_heads(merged):
    """The attention matrices, layer x head: every layer any rank saw (its residual stream or
    heads) with every head, NaN where none measured it (a stage that saw no attention)."""
    if "attn_logit_max" not in merged:
        return
    heads = {label for key in ("attn_logit_max", "attn_entropy") for label in merged.get(key, (0, {}))[1]}
    count = max(_head_of(label) for label in heads) + 1
    layers = {label.rpartition(".head.")[0] for label in heads}
    layers |= set(merged.get("residual_rms", (0, {}))[1])
    order = sorted(layers, key=_block_order)
    for key in ("attn_logit_max", "attn_entropy"):
        kind, values = merged.get(key, ("max" if key == "attn_logit_max" else "per_row", {}))
        nan = [float("nan")] * PARTS[kind]
        merged[key] = (kind, {f"{b}.head.{h}": values.get(f"{b}.head.{h}", nan) for b in order for h in range(count)})


def _finish(kind, values):
    def one(parts):
        a = parts[0]
        b = parts[1] if len(parts) > 1 else None
        if kind == "norm":
            return math.sqrt(a) if a >= 0 else a
        if kind == "ratio":
            return math.sqrt(a / b) if b > 0 else float("nan")
        if kind == "share":
            return a / b if b > 0 else 0.0
        if kind == "rms":
            return math.sqrt(a / b) if b else float("nan")
        if kind in ("per_row", "mean"):
            return a / b if b else float("nan")
        return a
    if kind in ("mean", "scalar_max"):
        return one(values[None])
    return {label: one(parts) for label, parts in values.items()}


class Watch:
    """See hlat.torch.watch."""

    def __init__(self, run, model, optimizer, every=1, step=0, logits_module=None, blocks=None,
                 attention=True, sdpa_sample=SDPA_SAMPLE_ELEMENTS, entropy_sample=ENTROPY_SAMPLE,
                 tensor_sample=TENSOR_SAMPLE, mesh=None, model_parallel_dims=MODEL_PARALLEL_DIMS,
                 sequence_parallel=False, heads=None, pipeline_stage=None):
        if every < 1:
            raise ValueError(f"hlat.torch.watch: every must be >= 1, not {every}")
        _run_eagerly(Watch)
        # A trainer's wrapper (Accelerate's AcceleratedOptimizer, Lightning's LightningOptimizer)
        # steps the torch optimizer inside it: its hooks are that one's.
        while isinstance(getattr(optimizer, "optimizer", None), torch.optim.Optimizer):
            optimizer = optimizer.optimizer
        self.run, self.model, self.optimizer, self.every = run, model, optimizer, int(every)
        self.attention_on, self.sdpa_sample, self.entropy_sample = attention, sdpa_sample, entropy_sample
        self.tensor_sample = tensor_sample
        self._step = int(step)
        self._key = f"\0watch{id(self)}"
        # Every rank measures what it holds; the run's sending rank puts the parts together.
        self.inert = getattr(run, "disabled", False)
        self.sends = getattr(run, "rank", 0) == getattr(run, "main_rank", 0)
        self._warned = set()
        self._handles, self._forward_handles = [], []
        self._cur = None
        self._layer = None
        self._thread = None
        self._depth = 0
        self._closed = False
        if self.inert:
            return
        self.params = [(_label(n), p) for n, p in model.named_parameters() if p.requires_grad]
        self.labels = [n for n, _ in self.params]
        found = _find_blocks(model) if blocks is None else dict(blocks) if isinstance(blocks, dict) else dict(enumerate(blocks))
        self.blocks = list(found.values())
        self.block_labels = [f"layers.{i}" for i in found]
        self._block_index = {id(b): j for j, b in enumerate(self.blocks)}
        self.heads = heads if heads is not None else _global_heads(model)
        self.job = Job.of(model, self.labels, mesh, model_parallel_dims, sequence_parallel)
        vocab = _vocab_size(model)
        self.logits_module = logits_module if logits_module is not None else _find_logits_module(model, vocab)
        self.vocab = vocab
        self._bufs = self._index = self._scale = None
        in_optimizer = {id(p) for g in optimizer.param_groups for p in g["params"]}
        self._stepped = [i for i, (_, p) in enumerate(self.params) if id(p) in in_optimizer]
        self._position = {k: j for j, k in enumerate(self._stepped)}
        self._group_of = {id(p): g for g in optimizer.param_groups for p in g["params"]}
        self._handles.append(model.register_forward_pre_hook(self._model_pre))
        self._probing = False
        if pipeline_stage is not None:
            self._skip_metadata_probe(pipeline_stage)
        self._hook_optimizer(optimizer)
        _live.add(self)
        _install_clip_wrapper()

    # -- steps -----------------------------------------------------------------------------

    @property
    def step(self):
        """The step the next optimizer.step() is numbered (counted from `step=` of watch());
        set it to follow the loop's own numbering."""
        return self._step

    @step.setter
    def step(self, value):
        self._step = int(value)

    def watched(self):
        return not self.inert and not self._closed and self._step % self.every == 0

    def _begin(self):
        if self._cur is None:
            self._cur = _Step()
        return self._cur

    # -- forward ----------------------------------------------------------------------------

    def _skip_metadata_probe(self, stage):
        """torch.distributed.pipelining's stage runs a forward of placeholder tensors (the
        metadata probe) before its first step's real ones: not the step's."""
        watch = self

        class Probe:
            def __init__(self, info):
                self.probe = bool(getattr(info, "is_metadata_inference", False))

            def __enter__(self):
                watch._probing = self.probe

            def __exit__(self, *exc):
                watch._probing = False

        try:
            self._handles.append(stage.register_forward_context(Probe))
        except (AttributeError, RuntimeError) as e:
            self._warn_once("probe", f"hlat.torch.watch: pipeline_stage given, but its metadata probe cannot be told "
                                     f"apart ({e}): the first watched step's activations include it; pass the "
                                     f"stage's input_args and output_args to skip the probe")

    def _model_pre(self, module, args):
        # Registered for good: off-step it returns here, traced by TorchDynamo into a compiled
        # model as nothing (a watched step breaks the graph in _model_pre_watched).
        if self._probing or not (self.watched() and module.training and torch.is_grad_enabled()):
            return
        self._model_pre_watched()

    def _model_pre_watched(self):
        self._begin()
        if not self._forward_handles:
            for i, block in enumerate(self.blocks):
                self._forward_handles.append(block.register_forward_pre_hook(self._block_pre))
                self._forward_handles.append(block.register_forward_hook(self._block_post))
            if self.logits_module is not None:
                self._forward_handles.append(self.logits_module.register_forward_hook(self._logits_post))
            self._forward_handles.append(self.model.register_forward_hook(self._model_post))
        self._depth += 1
        self._thread = threading.get_ident()
        if self.attention_on and _active[0] is None:
            _active[0] = self
            _patch_attention()

    def _model_post(self, module, args, out):
        if self._depth == 0:
            return
        self._depth -= 1
        if self.logits_module is None:
            x = _first_tensor(out)
            if x is not None and x.dim() >= 2 and (self.vocab is None or x.shape[-1] == self.vocab):
                self._logits(x)
        if self._depth == 0:
            self._layer = None
            if _active[0] is self:
                _active[0] = None
                _unpatch_attention()

    def _in_forward(self):
        return self._depth > 0 and self._cur is not None and threading.get_ident() == self._thread

    def _block_pre(self, module, args):
        if self._in_forward():
            self._layer = self._block_index.get(id(module))

    @torch.no_grad()
    def _block_post(self, module, args, out):
        if not self._in_forward():
            return
        i = self._block_index.get(id(module))
        self._layer = None
        x = _first_tensor(out)
        if x is None or i is None:
            return
        x = local(x.detach())
        cur = self._cur
        cur.res_sq.setdefault(i, []).append(torch.linalg.vector_norm(x, dtype=torch.float32).square())
        lo, hi = torch.aminmax(x)
        cur.res_max.setdefault(i, []).append(torch.maximum(hi.float(), -lo.float()))
        cur.res_n[i] = cur.res_n.get(i, 0) + x.numel()

    def _logits_post(self, module, args, out):
        # In the model's forward, or after it in the step's own code: a chunked loss (torchtitan's
        # ChunkedLossWrapper) calls the output layer on pieces of the last hidden state outside
        # the forward; log Z and the largest logit are sums and maxima, so the pieces add up.
        after_forward = self._cur is not None and self._thread == threading.get_ident() and module.training \
            and torch.is_grad_enabled() and not _in_backward()
        if self._in_forward() or after_forward:
            x = _first_tensor(out)
            if x is not None:
                self._logits(x)

    @torch.no_grad()
    def _logits(self, x):
        """log Z per position as max + log sum exp(x - max), the exponentials in place (two
        passes over the logits and one temporary, where logsumexp makes more); the largest
        logit from the rows' maxima."""
        if is_dtensor(x):
            if any(p.is_shard() for p in x.placements):
                self._warn_once("logits", "hlat.torch.watch: the logits are a DTensor sharded over the vocabulary "
                                "(loss_parallel): log Z and the largest logit are not measured")
                return
            x = x.to_local()
        x = x.detach().float()
        row_max = x.amax(dim=-1, keepdim=True)
        shift = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))  # rows of -inf, inf
        z = (x - shift).exp_().sum(dim=-1).log_().add_(shift.squeeze(-1))
        cur = self._cur
        cur.lz_sum.append(z.sum())
        cur.lz_max.append(z.amax())
        cur.logit_max.append(row_max.amax())
        cur.lz_rows += z.numel()

    # -- attention ---------------------------------------------------------------------------

    def attention(self, query, key, scale=None, is_causal=False, attn_mask=None, layer=None, sample=None):
        """For an attention the watch does not see (flash-attn, a fused kernel): call it with the
        kernel's query and key as (batch, heads, positions, head_dim) before the kernel, inside
        the block's forward (or give layer=). Does nothing off-step (in a compiled model, nothing
        that breaks its graph). sample: at most that many logits are computed (the first
        sequence, every r-th query); default all of them."""
        if self._cur is not None:  # a watched step's forward
            self._attention(query, key, scale, is_causal, attn_mask, layer, sample)

    def _attention(self, query, key, scale, is_causal, attn_mask, layer, sample):
        layer = self._layer if layer is None else layer
        if layer is None or not self._in_forward():
            return
        with torch.no_grad():
            s = attention_logits(local(query), local(key), scale, is_causal, attn_mask, sample)
            self._logit_stats(layer, s, None)

    def _logit_stats(self, layer, logits, probs, sample=None):
        """Per head: the largest logit (over all of them) and the summed entropy of the rows
        (probs: the softmax of the logits when the model computed it); with `sample`, a call of
        more logits than that takes the entropy at every r-th query only."""
        logits = logits.detach()
        dims = _head_dims(logits)
        row_max = logits.amax(dim=-1).float()                # every row's: one pass over the logits
        head_max = row_max.amax(dim=dims[:-1])
        if sample is not None and logits.numel() > sample:
            stride = math.ceil(logits.numel() / sample)
            logits = logits[..., ::stride, :]
            row_max = row_max[..., ::stride]
            probs = None if probs is None else probs[..., ::stride, :]
        if probs is None:
            probs = torch.softmax(logits.float(), dim=-1)
        _, entropy = _row_stats(logits, probs.detach(), row_max)
        cur = self._cur
        cur.att_max.setdefault(layer, []).append(head_max)
        cur.att_ent.setdefault(layer, []).append(entropy.sum(dim=dims[:-1]))
        cur.att_rows[layer] = cur.att_rows.get(layer, 0) + entropy.numel() // logits.shape[-3]

    def _softmax_seen(self, x, dim, out):
        """A softmax over the last dimension of a 4-d (batch, heads, queries, keys) tensor inside
        a block: the model's own attention (nanoGPT's non-flash path, HF's eager attention)."""
        if self._layer is None or not self._in_forward() or not isinstance(x, torch.Tensor) or x.dim() != 4:
            return
        if dim not in (-1, 3):
            return
        with torch.no_grad():
            self._logit_stats(self._layer, x, out, self.entropy_sample)

    def _sdpa_seen(self, args, kwargs):
        if self._layer is None or not self._in_forward():
            return
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")
        given = dict(zip(names, args))
        given.update(kwargs)
        with torch.no_grad():
            s = attention_logits(local(given["query"]), local(given["key"]), given.get("scale"),
                                 bool(given.get("is_causal", False)),
                                 given.get("attn_mask"), self.sdpa_sample)
            self._logit_stats(self._layer, s, None)

    # -- gradients and the optimizer --------------------------------------------------------

    @torch.no_grad()
    def before_clip(self):
        """Reads the per-tensor gradient norms now: call it between backward() and gradient
        clipping when the loop clips with something other than torch.nn.utils.clip_grad_norm_
        (which the watch calls it from, and which then clips with these norms instead of
        computing them again). Otherwise they are read at optimizer.step(), after any
        clipping. Does nothing off-step."""
        if not self.watched():
            return
        self._read_grad_norms()

    def _read_grad_norms(self):
        """The gradient norms into the step; {id(parameter): its norm, the gradient's dtype} for
        a clip_grad_norm_ that follows at once (the gradients unchanged); none in a job of several
        ranks, where a shard's norm is not the tensor's (torch's clip_grad_norm_ then reduces its own)."""
        cur = self._begin()
        grads = [p.grad for _, p in self.params]
        present = [local(p.grad.detach(), like=p) for _, p in self.params if p.grad is not None]
        norms = torch._foreach_norm(present) if present else []
        device = self._device()
        it = iter(norms)
        cur.grad_norms = [next(it).float() if g is not None else torch.zeros((), device=device) for g in grads]
        if self.job is not None:
            return {}
        return {id(p): n for (_, p), n in zip((q for q in self.params if q[1].grad is not None), norms)}

    def _device(self):
        return local(self.params[0][1]).device if self.params else torch.device("cpu")

    def _warn_once(self, what, message):
        if what not in self._warned:
            self._warned.add(what)
            _log.warning(message)

    def _hook_optimizer(self, optimizer):
        if hasattr(optimizer, "register_step_pre_hook"):
            self._handles.append(optimizer.register_step_pre_hook(lambda opt, args, kwargs: self._pre_step()))
            self._handles.append(optimizer.register_step_post_hook(lambda opt, args, kwargs: self._post_step()))
            return
        # torch < 2.0: the instance's step is wrapped, as a bound method (an LR scheduler made
        # later wraps it again and needs __self__ and __func__).
        original = optimizer.step
        watch = self

        def step(opt, *args, **kwargs):
            watch._pre_step()
            out = original(*args, **kwargs)
            watch._post_step()
            return out

        optimizer.step = types.MethodType(step, optimizer)
        self._original_step = original

    @torch.no_grad()
    def _pre_step(self):
        if not self.watched():
            return
        cur = self._begin()
        if cur.grad_norms is None:
            self.before_clip()
        params = [local(self.params[i][1].detach()) for i in self._stepped]
        if self._index is None:
            self._index = [_sample_index(p, self.tensor_sample) for p in params]
        self._bufs = [_sample(p, i) for p, i in zip(params, self._index)]
        # A large tensor's weight norm from its sample, scaled (within ~1% of the whole, see the
        # test): reading 110M weights twice a step would cost more than everything else here.
        self._scale = [math.sqrt(p.numel() / max(b.numel(), 1)) for p, b in zip(params, self._bufs)]
        cur.before_norms = _scaled(torch._foreach_norm(self._bufs), self._scale) if params else []

    @torch.no_grad()
    def _post_step(self):
        try:
            if self.watched() and self._cur is not None and self._cur.before_norms is not None:
                self._finish_step()
        finally:
            self._cur = None
            self._remove_forward_hooks()
            self._step += 1

    def _finish_step(self):
        cur = self._cur
        device = self._device()
        zero = torch.zeros((), device=device)
        n = len(self.params)
        params = [local(self.params[i][1].detach()) for i in self._stepped]
        views = [_sample(p, i, copy=False) for p, i in zip(params, self._index)]  # read only
        after_norms = _scaled(torch._foreach_norm(views), self._scale) if params else []
        torch._foreach_sub_(self._bufs, views)                     # before - after, at the sampled coordinates
        update = dict(zip(self._stepped, _scaled(torch._foreach_norm(self._bufs), self._scale) if params else []))
        after = dict(zip(self._stepped, after_norms))
        before = dict(zip(self._stepped, cur.before_norms))
        entries = []   # (key, kind, labels, [part: a 1-d tensor of len(labels)], weight(s))
        job = self.job
        tensor_w = torch.tensor(job.tensor_weights, dtype=torch.float64, device=device) if job else 1.0
        act_w = job.activation_weight if job else 1.0

        def square(norms):
            return _stack(norms, device).square()

        upd = [update.get(i, zero) for i in range(n)]
        entries.append(("tensor_grad_norm", "norm", self.labels, [square(cur.grad_norms)], tensor_w))
        entries.append(("tensor_param_norm", "norm", self.labels, [square([after.get(i, zero) for i in range(n)])],
                        tensor_w))
        entries.append(("tensor_update_norm", "norm", self.labels, [square(upd)], tensor_w))
        entries.append(("update_ratio", "ratio", self.labels,
                        [square(upd), square([before.get(i, zero) for i in range(n)])], tensor_w))
        eps = self._eps_counts()
        if eps is not None:
            entries.append(("eps_share", "share", self.labels, list(eps), tensor_w))
        blocks = sorted(cur.res_sq)
        if blocks and len(blocks) == len(self.blocks):
            labels = [self.block_labels[i] for i in blocks]
            sums = _stack([torch.stack(cur.res_sq[i]).sum() for i in blocks], device)
            counts = torch.tensor([float(cur.res_n[i]) for i in blocks], dtype=torch.float64, device=device)
            entries.append(("residual_rms", "rms", labels, [sums, counts], act_w))
            entries.append(("residual_max", "max", labels, [_stack([torch.stack(cur.res_max[i]).amax() for i in blocks],
                                                                   device)], 1.0))
        self._add_attention(cur, entries, device, act_w)
        if cur.lz_rows:
            rows = torch.tensor([float(cur.lz_rows)], dtype=torch.float64, device=device)
            entries.append(("logz_mean", "mean", [None], [_stack([torch.stack(cur.lz_sum).sum()], device), rows], act_w))
            entries.append(("logz_max", "scalar_max", [None], [_stack([torch.stack(cur.lz_max).amax()], device)], 1.0))
            entries.append(("logit_max", "scalar_max", [None], [_stack([torch.stack(cur.logit_max).amax()], device)],
                            1.0))
        self._send(entries, device)

    def _send(self, entries, device):
        """One vector of the step's parts (weighted), gathered from every rank in a job, and
        queued where this rank sends; the sender thread finishes it (_Values)."""
        layout = [(key, kind, labels, PARTS[kind] * len(labels)) for key, kind, labels, _, _ in entries]
        if self.job is not None and self.job.layouts is None:
            self.job.exchange(layout)
        by_key = {e[0]: e for e in entries}
        if self.job is not None and layout != self.job.layouts[self.job.rank]:
            by_key = self._as_first_layout(by_key)
            layout = self.job.layouts[self.job.rank]
        pieces = []
        for key, kind, labels, size in layout:
            _, _, _, parts, weight = by_key[key]
            flat = torch.cat([p.reshape(-1).to(torch.float64) for p in parts])
            if kind not in MAXIMA:
                flat = flat * (weight.repeat(PARTS[kind]) if isinstance(weight, torch.Tensor) else weight)
            pieces.append(flat)
        flat = torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.float64, device=device)
        if self.job is not None:
            out, work = self.job.gather(flat)
            if not self.sends:
                self.job.keep(work)
                return
            self.run.record({self._key: _Values(out, None, self.job.layouts, work)}, step=self._step)
            return
        event = None
        if flat.is_cuda:
            host = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)
            host.copy_(flat, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            flat = host
        elif flat.device.type != "cpu":
            flat = flat.cpu()
        self.run.record({self._key: _Values(flat, event, [layout])}, step=self._step)

    def _as_first_layout(self, by_key):
        """This step's entries in the layout exchanged at the first watched step (every rank's
        vector must keep its shape): a statistic not measured this step is NaN (maxima) or 0."""
        out = {}
        for key, kind, labels, size in self.job.layouts[self.job.rank]:
            e = by_key.get(key)
            if e is not None and list(e[2]) == list(labels):
                out[key] = e
                continue
            self._warn_once(("layout", key), f"hlat.torch.watch: {key} changed shape after the first watched step in "
                                             f"a job of several ranks; its first shape is kept")
            fill = float("nan") if kind in MAXIMA else 0.0
            out[key] = (key, kind, labels, [torch.full((len(labels),), fill, dtype=torch.float64)
                                            for _ in range(PARTS[kind])], 0.0)
        return out

    def _add_attention(self, cur, entries, device, act_w):
        """Per layer and head: the largest logit, the summed entropy and its rows. Under TP a rank
        holds heads tp_rank * local .. of each layer: labelled by their global index."""
        layers = sorted(cur.att_max)
        if not layers:
            return
        heads = cur.att_max[layers[0]][0].numel()
        if any(t.numel() != heads for i in layers for t in cur.att_max[i]):
            return  # layers with different head counts: no layer x head matrix
        first, weight = 0, act_w
        job = self.job
        if job is not None and job.tp_size > 1 and (self.heads is None or heads * job.tp_size == self.heads):
            first, weight = job.tp_rank * heads, 1.0   # this rank's own heads
        labels = [f"{self.block_labels[i]}.head.{first + h}" for i in layers for h in range(heads)]
        maxes = torch.cat([torch.stack(cur.att_max[i]).amax(0) for i in layers])
        ents = torch.cat([torch.stack(cur.att_ent[i]).sum(0) for i in layers])
        rows = torch.tensor([float(cur.att_rows.get(i, 0)) for i in layers for _ in range(heads)],
                            dtype=torch.float64, device=device)
        entries.append(("attn_logit_max", "max", labels, [maxes], 1.0))
        entries.append(("attn_entropy", "per_row", labels, [ents, rows], weight))

    def _eps_counts(self, segmented=None):
        """Per tensor (two float64 vectors on the watch's device): Adam coordinates with
        sqrt(v_hat) < eps (v > 0), and those with v > 0 (a sampled tensor's counts scaled to its
        size); None for an optimizer without Adam's second moment. On a GPU the tensors'
        (sampled) second moments are read as one vector and counted per tensor in a few kernels,
        since a few small kernels a tensor cost a GPU step more than the arithmetic
        (bench/watch_cuda); on the CPU, where passes over memory cost and calls do not, tensor by
        tensor. Moments held elsewhere (another GPU, offloaded to the CPU) are sampled there and
        the sample brought over."""
        device = self._device()
        found = [(k, m) for k, (_, p) in enumerate(self.params) for m in [self._second_moment(k, p)] if m is not None]
        if not found:
            return None
        if segmented is None:
            segmented = device.type != "cpu"
        count = _counts_segmented if segmented else _counts_each
        below, nonzero = count(*[[m[i] for _, m in found] for i in range(4)])
        scale = torch.tensor([m[4] for _, m in found], dtype=torch.float64, device=device)
        at = torch.tensor([k for k, _ in found], device=device)
        zeros = torch.zeros(len(self.params), dtype=torch.float64, device=device)
        return zeros.index_copy(0, at, below * scale), zeros.index_copy(0, at, nonzero * scale)

    def _second_moment(self, k, p):
        """Tensor k's Adam second moment as a 1-d float32 tensor on the watch's device (its sample
        for a large one), its step (a number, or a 0-d tensor where the optimizer keeps it on the
        device), beta2, eps, and the sample's scale to the whole; None without Adam's state."""
        s = self.optimizer.state.get(p) if p in self.optimizer.state else None
        group = self._group_of.get(id(p))
        if not s or group is None or "eps" not in group or "betas" not in group:
            return None
        v = s.get("max_exp_avg_sq") if s.get("max_exp_avg_sq") is not None else s.get("exp_avg_sq")
        if v is None:
            return None
        step = s.get("step", 1)
        step = step.to_local() if is_dtensor(step) else step
        if isinstance(step, torch.Tensor) and step.device.type == "cpu":
            step = float(step)
        whole = local(v.detach())
        v = whole
        if self.tensor_sample is not None and v.numel() > self.tensor_sample:
            j = self._position.get(k)
            index = self._index[j] if j is not None and self._index else _sample_index(v, self.tensor_sample)
            v = _sample(v, index.to(v.device))  # the parameter's index, where the moment is
        device = self._device()
        v = v.reshape(-1).to(device=device, dtype=torch.float32, non_blocking=True)
        if isinstance(step, torch.Tensor):
            step = step.to(device, non_blocking=True)
        return v, step, group["betas"][1], group["eps"], whole.numel() / max(v.numel(), 1)

    # -- the end ---------------------------------------------------------------------------

    def _remove_forward_hooks(self):
        for h in self._forward_handles:
            h.remove()
        self._forward_handles = []
        self._depth = 0
        self._layer = None
        if _active[0] is self:
            _active[0] = None
            _unpatch_attention()

    def close(self):
        """Removes every hook and patch; the model and optimizer are as they were."""
        if self._closed:
            return
        self._closed = True
        self._remove_forward_hooks()
        for h in self._handles:
            h.remove()
        self._handles = []
        if getattr(self, "_original_step", None) is not None:
            try:
                del self.optimizer.step  # the class's step again
            except AttributeError:
                pass
            if self.optimizer.step != self._original_step:
                self.optimizer.step = self._original_step
        self._bufs = None
        if self.job is not None:
            self.job.close()
        _live.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


# -- patches ----------------------------------------------------------------------------------

def _install_clip_wrapper():
    """torch.nn.utils.clip_grad_norm_ reads the watched steps' gradient norms before it clips,
    and on those steps clips with them (one pass over the gradients for both)."""
    import torch.nn.utils as utils
    import torch.nn.utils.clip_grad as clip_grad
    original = clip_grad.clip_grad_norm_
    if getattr(original, "_hlat", False):
        return

    def clip_grad_norm_(parameters, max_norm, *args, **kwargs):
        watches = [w for w in list(_live) if w.watched() and (w._cur is None or w._cur.grad_norms is None)]
        if not watches:
            return original(parameters, max_norm, *args, **kwargs)
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        else:
            parameters = list(parameters)  # a generator is read twice
        known = {}
        for w in watches:
            with torch.no_grad():
                known.update(w._read_grad_norms())
        clipped = _clip_with_norms(parameters, max_norm, args, kwargs, known)
        return original(parameters, max_norm, *args, **kwargs) if clipped is None else clipped

    clip_grad_norm_._hlat = True
    clip_grad_norm_.__doc__ = original.__doc__
    clip_grad_norm_.__wrapped__ = original
    for owner in (utils, clip_grad):
        if getattr(owner, "clip_grad_norm_", None) is original:
            owner.clip_grad_norm_ = clip_grad_norm_


@torch.no_grad()
def _clip_with_norms(parameters, max_norm, args, kwargs, known):
    """torch's clip_grad_norm_ (2-norm) with the per-tensor norms the watch has just read (the
    rest computed here): the same total, coefficient and in-place scaling as torch's; None
    where it is not that case (another norm, an argument this does not know, no norm known)."""
    names = ("norm_type", "error_if_nonfinite", "foreach")
    if len(args) > len(names) or set(kwargs) - set(names):
        return None
    given = dict(zip(names, args))
    given.update(kwargs)
    if float(given.get("norm_type", 2.0)) != 2.0:
        return None
    with_grads = [p for p in parameters if p.grad is not None]
    if not with_grads or not any(id(p) in known for p in with_grads):
        return None
    grads = [p.grad.detach() for p in with_grads]
    missing = [g for p, g in zip(with_grads, grads) if id(p) not in known]
    extra = iter(torch._foreach_norm(missing) if missing else [])
    device = grads[0].device
    norms = [(known[id(p)] if id(p) in known else next(extra)).to(device) for p in with_grads]
    total = torch.linalg.vector_norm(torch.stack(norms), 2.0)
    if given.get("error_if_nonfinite", False) and torch.logical_or(total.isnan(), total.isinf()):
        raise RuntimeError(
            "The total norm of order 2.0 for gradients from `parameters` is non-finite, so it cannot be "
            "clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
            "`error_if_nonfinite=False`")
    coef = torch.clamp(float(max_norm) / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.to(g.device))  # always, as torch does (no host sync on a device)
    return total


def _softmax_wrapper(original):
    def softmax(input, *args, **kwargs):
        if _busy[0]:  # F.softmax calls Tensor.softmax: counted once, by the outer
            return original(input, *args, **kwargs)
        _busy[0] = True
        try:
            out = original(input, *args, **kwargs)
        finally:
            _busy[0] = False
        w = _active[0]
        if w is not None:
            dim = args[0] if args else kwargs.get("dim")
            w._softmax_seen(input, dim, out)
        return out
    return softmax


def _sdpa_wrapper(original):
    def scaled_dot_product_attention(*args, **kwargs):
        w = _active[0]
        if w is not None:
            w._sdpa_seen(args, kwargs)
        return original(*args, **kwargs)
    return scaled_dot_product_attention


def _patch_attention():
    targets = [(F, "softmax", _softmax_wrapper), (torch, "softmax", _softmax_wrapper),
               (torch.Tensor, "softmax", _softmax_wrapper)]
    if hasattr(F, "scaled_dot_product_attention"):
        targets.append((F, "scaled_dot_product_attention", _sdpa_wrapper))
    for owner, name, wrap in targets:
        if (owner, name) in _patched:
            continue
        original = getattr(owner, name)
        _patched[(owner, name)] = (original, owner.__dict__.get(name) if isinstance(owner, type) else None)
        setattr(owner, name, wrap(original))


def _unpatch_attention():
    for (owner, name), (original, own) in list(_patched.items()):
        if isinstance(owner, type) and own is None:
            delattr(owner, name)  # inherited again (torch.Tensor.softmax is _TensorBase's)
        else:
            setattr(owner, name, original)
        del _patched[(owner, name)]
