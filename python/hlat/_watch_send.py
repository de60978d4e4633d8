"""A watched step's statistics on their way to the run. On the training thread, the step's end
lays them out as entries (key, kind, labels, parts) and packs every number into one float64
vector on the device: gathered from every rank in a job of several, else moved to the host
without a wait (pinned memory on CUDA), and queued. On the sender thread, _Values waits for the
copy and finishes the vector into the step's keys."""
import math

import torch

from ._records import Deferred

PARTS = {"norm": 1, "ratio": 2, "share": 2, "rms": 2, "per_row": 2, "mean": 2, "max": 1, "scalar_max": 1}
MAXIMA = ("max", "scalar_max")


def _stack(values, device):
    """0-d tensors (or numbers) as one float64 1-d tensor on `device`."""
    if not values:
        return torch.zeros(0, dtype=torch.float64, device=device)
    try:  # 0-d tensors of one device: one op
        return torch.stack(list(values)).reshape(-1).to(device=device, dtype=torch.float64)
    except (RuntimeError, TypeError):
        return torch.stack([torch.as_tensor(v).reshape(()).to(device=device, dtype=torch.float64) for v in values])


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


class _StepSending:
    """Watch's end of a watched step (a part of Watch, _watch.py): called by the optimizer's
    post-hook (_watch_optimizer) with the step's _Step complete."""

    def _finish_step(self):
        """The step's statistics as entries, in a fixed order (a job's ranks exchange this layout at
        the first watched step and keep it), and sent."""
        cur = self._cur
        device = self._device()
        zero = torch.zeros((), device=device)
        n = len(self.params)
        before, after, update = self._weight_and_update_norms()
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
        if cur.lost is not None:  # parameters held in bf16 or fp16: the precision-stall detector's input
            held, lost, moving = cur.lost
            weight = tensor_w[torch.tensor(held, device=device)] if isinstance(tensor_w, torch.Tensor) else tensor_w
            entries.append(("lost_update_share", "share", [self.labels[k] for k in held], [lost, moving], weight))
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
            fill, device = float("nan") if kind in MAXIMA else 0.0, self._device()
            out[key] = (key, kind, labels, [torch.full((len(labels),), fill, dtype=torch.float64, device=device)
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
