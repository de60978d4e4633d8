"""A small LLaMA laid out as torchtitan's (tok_embeddings, layers as a ModuleDict keyed "0".., norm,
output; attention wq/wk/wv/wo with grouped-query heads through F.scaled_dot_product_attention;
SwiGLU w1/w2/w3), and the ways torchtitan parallelises it: FSDP2, TP (its plan, without sequence
parallelism), FSDP2 x TP and pipeline stages made by deleting the layers a stage does not hold.
For the watch's tests on several ranks (test_watch_distributed.py)."""
import math

import torch
import torch.nn.functional as F
from torch import nn

CONFIG = dict(vocab=96, dim=64, heads=4, kv_heads=2, layers=4, hidden=128, seq=32)


def rope(T, head_dim, theta=10000.0):
    inv = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    angles = torch.cat((angles, angles), -1)
    return angles.cos().float(), angles.sin().float()


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.head_dim = c["dim"] // c["heads"]
        self.wq = nn.Linear(c["dim"], c["heads"] * self.head_dim, bias=False)
        self.wk = nn.Linear(c["dim"], c["kv_heads"] * self.head_dim, bias=False)
        self.wv = nn.Linear(c["dim"], c["kv_heads"] * self.head_dim, bias=False)
        self.wo = nn.Linear(c["heads"] * self.head_dim, c["dim"], bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        # -1 heads: under TP a rank holds heads / tp of them (and kv_heads / tp)
        q, k, v = (w(x).view(B, T, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        cos, sin = rope(T, self.head_dim)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w1 = nn.Linear(c["dim"], c["hidden"], bias=False)
        self.w2 = nn.Linear(c["hidden"], c["dim"], bias=False)
        self.w3 = nn.Linear(c["dim"], c["hidden"], bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention_norm, self.ffn_norm = nn.RMSNorm(c["dim"], eps=1e-5), nn.RMSNorm(c["dim"], eps=1e-5)
        self.attention, self.feed_forward = Attention(c), FeedForward(c)

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, c=CONFIG, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.n_heads = c["heads"]
        self.tok_embeddings = nn.Embedding(c["vocab"], c["dim"])
        self.layers = nn.ModuleDict({str(i): Block(c) for i in range(c["layers"])})
        self.norm = nn.RMSNorm(c["dim"], eps=1e-5)
        self.output = nn.Linear(c["dim"], c["vocab"], bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * c["layers"]) if name.endswith(("wo.weight", "w2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, tokens):
        # A pipeline stage lacks what another holds (torchtitan's way): None here.
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for block in self.layers.values():
            h = block(h)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def tensor_parallel(model, mesh):
    """torchtitan's TP plan (no sequence parallelism): embeddings rowwise, every projection
    colwise in and rowwise out, the output colwise gathered (the logits whole on each rank)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    parallelize_module(model, mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
        "output": ColwiseParallel(output_layouts=Replicate()),
    })
    for block in model.layers.values():
        parallelize_module(block, mesh, {
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(),
        })


def fully_shard_model(model, mesh):
    from torch.distributed.fsdp import fully_shard
    for block in model.layers.values():
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)


def stage_of(model, stage, stages):
    """The pipeline stage `stage` of `stages`: its contiguous share of the layers (global keys
    kept), the embeddings on the first, the norm and output on the last."""
    n = len(model.layers)
    keep = range(stage * n // stages, (stage + 1) * n // stages)
    for key in list(model.layers.keys()):
        if int(key) not in keep:
            del model.layers[key]
    if stage != 0:
        model.tok_embeddings = None
    if stage != stages - 1:
        model.norm, model.output = None, None
    return model
