"""Times training steps of the PyTorch reference model, for bench/train_vs_pytorch.

usage: scripts/python bench/torch_train_steps.py CONFIG.json TOKENS.u16 STEPS THREADS [fp32|autocast|bf16]
                                                [--compile] [--sdpa]

Trains the reference model on the same windows of the same token file as
`hlat train`, with the same optimizer, clipping and schedule, and prints one
JSON object: {"step_seconds": [...], "losses": [...], "blas": {"library",
"coretype"}, "setting": reference_setting.py's record of the threads, CPUs,
environment and BLAS the steps ran with}. The precision is float32
(the default), autocast (float32 weights and AdamW, forward under
torch.autocast("cpu", bfloat16): PyTorch's mixed precision) or bf16 (the model
cast to bfloat16 whole). --sdpa runs attention through
F.scaled_dot_product_attention(is_causal=True) (PyTorch's fused causal
attention) in place of the explicit softmax; --compile wraps the model in
torch.compile (inductor, the CPU backend), so the forward and backward run as
the kernels it generates; the first step pays the compilation, which the
benches' warm-up steps discard. The JSON's "variant" names what ran.

The reference gets its best BLAS setting and never the reference BLAS
(fast_openblas.py): on a CPU with AVX-512 it re-runs itself with
OPENBLAS_CORETYPE=SkylakeX when that measures faster than OpenBLAS's own
choice, and it exits with code 3 when torch loaded the reference BLAS.
"""
import argparse
import contextlib
import json
import os
import sys
import time

from fast_openblas import blas_in_use, ensure_fast_openblas, refuse_reference_blas
from reference_setting import reference_setting

ensure_fast_openblas()

import numpy as np  # noqa: E402
import torch  # noqa: E402

BLAS = blas_in_use()
refuse_reference_blas(BLAS)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from llama_ref import Llama, learning_rate, make_optimizer  # noqa: E402

DEFAULTS = {
    "model": {"norm_eps": 1e-5, "rope_theta": 10000.0, "init_std": 0.02, "init_scaling": "per_layer"},
    "optimizer": {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
                  "decay_norms_and_embeddings": True, "grad_clip": 1.0},
    "schedule": {"max_lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 100, "total_steps": 2000},
}


def build_model(cfg, precision, compile_model, sdpa):
    model = Llama({**cfg["model"], "torch_sdpa": sdpa})
    model.init_weights(1234)
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    # The optimizer holds the module's own parameters; the compiled wrapper
    # shares them, so only the forward (and its backward) changes.
    return model, (torch.compile(model) if compile_model else model)


def main(config_path, tokens_path, steps, threads, precision="fp32", compile_model=False, sdpa=False):
    torch.set_num_threads(threads)
    cfg = json.load(open(config_path))
    for section, values in DEFAULTS.items():
        cfg[section] = {**values, **cfg.get(section, {})}
    B, T = cfg["run"]["batch_size"], cfg["run"]["seq_len"]
    tokens = np.fromfile(tokens_path, dtype="<u2").astype(np.int64)
    model, forward = build_model(cfg, precision, compile_model, sdpa)
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if precision == "autocast" else contextlib.nullcontext
    optimizer = make_optimizer(model, cfg["optimizer"], foreach=True)
    pos, times, losses = 0, [], []
    for step in range(steps):
        t0 = time.perf_counter()
        rows = []
        for _ in range(B):
            if pos + T + 1 > len(tokens):
                pos = 0
            rows.append(tokens[pos : pos + T + 1])
            pos += T
        batch = torch.from_numpy(np.stack(rows))
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            _, loss = forward(batch[:, :-1], batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["optimizer"]["grad_clip"])
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(cfg["schedule"], step)
        optimizer.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    variant = {"precision": precision, "compiled": compile_model, "attention": "sdpa" if sdpa else "explicit",
               "torch": torch.__version__}
    print(json.dumps({"step_seconds": times, "losses": losses, "blas": BLAS, "setting": reference_setting(torch),
                      "variant": variant}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("tokens")
    ap.add_argument("steps", type=int)
    ap.add_argument("threads", type=int)
    ap.add_argument("precision", nargs="?", default="fp32", choices=["fp32", "autocast", "bf16"])
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (inductor)")
    ap.add_argument("--sdpa", action="store_true", help="F.scaled_dot_product_attention for attention")
    a = ap.parse_args()
    main(a.config, a.tokens, a.steps, a.threads, a.precision, a.compile, a.sdpa)
