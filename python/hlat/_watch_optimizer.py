"""hlat.torch.watch's gradient and optimizer statistics, per tensor: the gradient norm (before
clipping: read at clip_grad_norm_ through _watch_clip, at Watch.before_clip(), or else at
optimizer.step()), the weight norm before and after the step, the update's norm and Adam's
epsilon share. The optimizer's step hooks count every step; on a watched one the pre-hook copies
the weights' sample (_watch_sampling) and the post-hook compares, then has the step sent
(_watch_send)."""
import math
import types

import torch

from ._shards import is_dtensor, local
from ._watch_sampling import _sample, _sample_index, _scaled


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


class _OptimizerHooks:
    """Watch's gradient and optimizer methods (a part of Watch, _watch.py)."""

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

    def _weight_and_update_norms(self):
        """Per stepped tensor k: {k: its weight norm before the step}, {k: after}, {k: the update's
        norm}, from the sample copied at the pre-hook and the same coordinates now."""
        params = [local(self.params[i][1].detach()) for i in self._stepped]
        views = [_sample(p, i, copy=False) for p, i in zip(params, self._index)]  # read only
        after_norms = _scaled(torch._foreach_norm(views), self._scale) if params else []
        self._cur.lost = self._lost_counts(views)
        torch._foreach_sub_(self._bufs, views)                     # before - after, at the sampled coordinates
        update = dict(zip(self._stepped, _scaled(torch._foreach_norm(self._bufs), self._scale) if params else []))
        after = dict(zip(self._stepped, after_norms))
        before = dict(zip(self._stepped, self._cur.before_norms))
        return before, after, update

    def _lost_counts(self, views):
        """For the stepped tensors held in bf16 or fp16 (pure low-precision training): their indices
        in self.params, and per tensor (two float64 vectors) the sampled coordinates whose update rounding threw
        away (a gradient that is not zero, a weight unchanged by the step) and those with a
        gradient that is not zero, each scaled to the whole tensor; None when no tensor is held in
        them. A zero gradient stands for a zero update: an Adam coordinate with momentum left but
        no gradient this step is counted in neither, and so is every coordinate of a tensor without
        a gradient this step or in a parameter group whose learning rate is 0 (frozen, not stalled).
        The tensors are chosen by dtype alone, so the list keeps its shape from step to step (a
        job's ranks fix it at the first watched step)."""
        held = [j for j, k in enumerate(self._stepped) if self.params[k][1].dtype in (torch.bfloat16, torch.float16)]
        if not held:
            return None
        device = self._device()
        lost, moving = [], []
        for j in held:
            p = self.params[self._stepped[j]][1]
            group = self._group_of.get(id(p), {})
            if p.grad is None or group.get("lr", 1.0) == 0:
                lost.append(torch.zeros((), device=device))
                moving.append(torch.zeros((), device=device))
                continue
            g = _sample(local(p.grad.detach(), like=p), self._index[j], copy=False)
            nonzero = g != 0
            moving.append(nonzero.sum().to(device))
            lost.append((nonzero & (self._bufs[j] == views[j])).sum().to(device))
        scale = torch.tensor([self._scale[j] ** 2 for j in held], dtype=torch.float64, device=device)
        return ([self._stepped[j] for j in held],
                torch.stack(lost).to(torch.float64) * scale, torch.stack(moving).to(torch.float64) * scale)

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
