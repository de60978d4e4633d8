"""hlat.torch.watch's attention statistics: per layer and head, the largest pre-softmax logit and
the entropy of the attention rows, taken where the model computes its attention: a softmax
over (batch, heads, queries, keys) inside a block (the model's own attention), a
scaled_dot_product_attention call (whose logits the kernel never shows: computed again here,
sampled), or Watch.attention (a kernel the watch cannot see, called by the user). torch's
softmax and scaled_dot_product_attention are patched only while a watched step's forward runs
(_watch_forward puts the patches in and takes them out): other steps call torch's own."""
import math

import torch
import torch.nn.functional as F

from ._shards import local

SDPA_SAMPLE_ELEMENTS = 1 << 22   # attention logits materialised per scaled_dot_product_attention call, at most
ENTROPY_SAMPLE = 1 << 18         # a model's own softmax: the entropy from at most this many probabilities a call

_active = [None]                 # the watch inside a watched forward (one at a time), for the patches
_patched = {}                    # (owner, name) -> the original, while patched
_busy = [False]                  # inside a patched softmax (F.softmax calls Tensor.softmax)


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


class _AttentionHooks:
    """Watch's attention methods (a part of Watch, _watch.py): they add to the watched step's
    _Step, in the block that _watch_forward's hooks say the forward is in (_layer)."""

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


# -- patches: torch's functions, while one watch's forward runs (_active) ----------------------

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
