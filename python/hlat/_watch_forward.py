"""hlat.torch.watch's forward hooks: on a watched step, the residual stream after each block
(its RMS and largest magnitude) and the output logits (log Z and the largest logit), and which
block the forward is in for the attention statistics (_watch_attention). One pre-hook on the
model stays registered; when a watched step's forward begins it adds the blocks' and the output
layer's hooks and the attention patches. The patches go when that forward ends, the hooks when
the step does (optimizer.step()), so an unwatched step runs the model as it is."""
import threading

import torch

from ._shards import is_dtensor, local
from ._watch_attention import _active, _patch_attention, _unpatch_attention
from ._watch_model import _first_tensor


def _in_backward():
    """Whether autograd is running a backward on this thread (an activation-checkpoint recompute
    calls the forward's modules again there)."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


class _ForwardHooks:
    """Watch's forward methods (a part of Watch, _watch.py): they fill the watched step's _Step."""

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

    def _remove_forward_hooks(self):
        for h in self._forward_handles:
            h.remove()
        self._forward_handles = []
        self._depth = 0
        self._layer = None
        if _active[0] is self:
            _active[0] = None
            _unpatch_attention()
