"""torch.nn.utils.clip_grad_norm_, wrapped once the first watch is made: on a watched step it has
the watches read their per-tensor gradient norms first (clipping would change them) and then
clips with those norms, so the gradients are read once for both. Off a watched step it only
calls torch's."""
import weakref

import torch

_live = weakref.WeakSet()        # watches whose clip_grad_norm_ wrapper is wanted


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
