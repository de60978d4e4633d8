"""PyTorch reference of hlat's LLaMA model, written independently of the C++.

Same architecture and weight names as trainer/model/weights.h: coalesced qkv_proj and
gate_up_proj, RoPE in Hugging Face's rotate-half convention, causal softmax
attention, SwiGLU, RMSNorm, untied lm_head, no biases; with model.qk_norm an
RMSNorm over each query and key head before RoPE (Qwen3's q_norm, k_norm), and
z_loss_term for model.z_loss. Used by the parity test
(float64, as ground truth) and by bench/train_vs_pytorch (float32, for speed).
Run with scripts/python (the venv with PyTorch).
"""
import json
import math
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_DTYPES = {"F32": np.float32, "F64": np.float64, "BF16": None, "I32": np.int32}


def read_safetensors(path):
    """Returns ({name: np.ndarray}, metadata) from a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    metadata = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        raw = data[base + begin : base + end]
        if e["dtype"] == "BF16":
            arr = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=_DTYPES[e["dtype"]])
        out[name] = arr.reshape(e["shape"]).copy()
    return out, metadata


def write_safetensors(path, tensors):
    """Writes {name: np.ndarray} as F32 tensors."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.nh, self.nkv = cfg["n_heads"], cfg["n_kv_heads"]
        self.hd = cfg["dim"] // self.nh
        self.qkv_proj = nn.Linear(cfg["dim"], (self.nh + 2 * self.nkv) * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, cfg["dim"], bias=False)
        self.qk_norm = cfg.get("qk_norm", False)
        # The benches' "best setting" for current PyTorch: its fused causal
        # attention (flash attention on CPU) in place of the explicit softmax.
        self.sdpa = cfg.get("torch_sdpa", False)
        if self.qk_norm:
            self.q_norm = RMSNorm(self.hd, cfg["norm_eps"])
            self.k_norm = RMSNorm(self.hd, cfg["norm_eps"])

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q, k, v = self.qkv_proj(x).split([self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd], dim=-1)
        q = q.view(B, T, self.nh, self.hd).transpose(1, 2)
        k = k.view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = v.view(B, T, self.nkv, self.hd).transpose(1, 2)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.nkv != self.nh:
            k = k.repeat_interleave(self.nh // self.nkv, dim=1)
            v = v.repeat_interleave(self.nh // self.nkv, dim=1)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)
            scores = scores.masked_fill(mask, float("-inf"))
            y = F.softmax(scores, dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.h = cfg["hidden_dim"]
        self.gate_up_proj = nn.Linear(cfg["dim"], 2 * self.h, bias=False)
        self.down_proj = nn.Linear(self.h, cfg["dim"], bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).split([self.h, self.h], dim=-1)
        return self.down_proj(F.silu(gate) * up)


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["dim"])
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg["n_layers"]))
        self.norm = RMSNorm(cfg["dim"], cfg["norm_eps"])


class Llama(nn.Module):
    """cfg is the "model" section of an hlat config."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)
        self.lm_head = nn.Linear(cfg["dim"], cfg["vocab_size"], bias=False)

    def init_weights(self, seed):
        """Normal(0, init_std), output projections scaled as hlat's config says."""
        g = torch.Generator().manual_seed(seed)
        std, L = self.cfg["init_std"], self.cfg["n_layers"]
        for name, p in self.named_parameters():
            if p.dim() == 1:
                continue
            s = std
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                layer = int(name.split(".")[2])
                if self.cfg["init_scaling"] == "per_layer":
                    s /= math.sqrt(2 * (layer + 1))
                elif self.cfg["init_scaling"] == "total_layers":
                    s /= math.sqrt(2 * L)
            with torch.no_grad():
                p.normal_(0.0, s, generator=g)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        hd = self.cfg["dim"] // self.cfg["n_heads"]
        dtype = self.lm_head.weight.dtype
        inv_freq = self.cfg["rope_theta"] ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        logits = self.lm_head(self.model.norm(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss

    def load_numpy(self, tensors):
        own = dict(self.named_parameters())
        missing = set(own) - set(tensors)
        if missing:
            raise ValueError(f"missing tensors: {sorted(missing)}")
        with torch.no_grad():
            for name, p in own.items():
                p.copy_(torch.from_numpy(tensors[name]).to(p.dtype))


def z_loss_term(logits, coefficient):
    """PaLM's auxiliary loss: coefficient * logsumexp(logits)^2, mean over positions (0 when off)."""
    if not coefficient:
        return logits.new_zeros(())
    return coefficient * torch.logsumexp(logits, dim=-1).pow(2).mean()


def learning_rate(sched, step):
    """hlat's schedule: linear warmup from max_lr/warmup, cosine to min_lr at total_steps."""
    if step < sched["warmup_steps"]:
        return sched["max_lr"] * (step + 1) / sched["warmup_steps"]
    if step >= sched["total_steps"]:
        return sched["min_lr"]
    decay = sched["total_steps"] - sched["warmup_steps"]
    progress = (step - sched["warmup_steps"]) / decay if decay > 0 else 1.0
    return sched["min_lr"] + 0.5 * (sched["max_lr"] - sched["min_lr"]) * (1 + math.cos(math.pi * progress))


def make_optimizer(model, opt, foreach=None):
    """torch.optim.AdamW with hlat's parameter groups."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        exempt = p.dim() == 1 or name == "model.embed_tokens.weight"
        (no_decay if exempt and not opt["decay_norms_and_embeddings"] else decay).append(p)
    groups = [{"params": decay, "weight_decay": opt["weight_decay"]}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return torch.optim.AdamW(groups, lr=0.0, betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"], foreach=foreach)
