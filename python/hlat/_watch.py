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

The parts, one module each (Watch puts them together and owns the state they share):

    _watch_model       finding the blocks, the output layer, heads and vocabulary in a model
    _watch_forward     the forward hooks: residual stream, logits
    _watch_attention   attention logits and entropy; the softmax / scaled_dot_product_attention patches
    _watch_optimizer   gradient, weight and update norms, Adam's epsilon share: the optimizer's hooks
    _watch_sampling    the fixed sample of a large tensor's coordinates those norms come from
    _watch_clip        the clip_grad_norm_ wrapper that reuses the watch's gradient norms
    _watch_send        the step's numbers packed, gathered across ranks, sent and finished
"""
import logging

import torch

from ._shards import MODEL_PARALLEL_DIMS, Job, local
from ._watch_attention import ENTROPY_SAMPLE, SDPA_SAMPLE_ELEMENTS, _AttentionHooks
from ._watch_attention import attention_logits  # noqa: F401  (hlat.torch's, imported from here)
from ._watch_clip import _install_clip_wrapper, _live
from ._watch_forward import _ForwardHooks
from ._watch_model import _find_blocks, _find_logits_module, _global_heads, _label, _vocab_size
from ._watch_optimizer import _OptimizerHooks
from ._watch_sampling import TENSOR_SAMPLE
from ._watch_send import _StepSending

_log = logging.getLogger("hlat")


# The watch's code that runs inside a model's forward on a watched step runs eagerly in a
# compiled model: TorchDynamo breaks the graph at each and calls it, rather than tracing its
# Python (which guards on the step's dicts and recompiled the model until torch's recompile
# limit: +100 % a watched step of a compiled 0.25B LLaMA on an H200, bench/watch_cuda). Done when
# the first watch is made, not at import: torch.compiler.disable imports TorchDynamo (1.3 s).
_EAGER = ("_model_pre_watched", "_model_post", "_block_pre", "_block_post", "_logits_post", "_softmax_seen",
          "_sdpa_seen", "_attention")


def _run_eagerly(cls):
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    if disable is None or cls.__dict__.get("_eager_done"):
        return
    for name in _EAGER:  # defined on Watch's parts: the disabled one is set on Watch itself
        setattr(cls, name, disable(getattr(cls, name)))
    cls._eager_done = True


class _Step:
    """What a watched step has gathered so far, on the device: 0-d or 1-d tensors and counts."""

    def __init__(self):
        self.res_sq, self.res_max, self.res_n = {}, {}, {}     # block -> [tensors], count
        self.att_max, self.att_ent, self.att_rows = {}, {}, {}  # block -> [(heads,) tensors], rows
        self.lz_sum, self.lz_max, self.logit_max, self.lz_rows = [], [], [], 0
        self.grad_norms = None
        self.before_norms = None
        self.lost = None          # _lost_counts(): tensors held in bf16 or fp16, their lost and moving updates


class Watch(_ForwardHooks, _AttentionHooks, _OptimizerHooks, _StepSending):
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

    def _device(self):
        return local(self.params[0][1]).device if self.params else torch.device("cpu")

    def _warn_once(self, what, message):
        if what not in self._warned:
            self._warned.add(what)
            _log.warning(message)

    # -- the end ---------------------------------------------------------------------------

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
