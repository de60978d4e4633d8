"""Computes what hlat's parity test compares against, in float64.

usage: scripts/python parity.py DIR [fp64|autocast|bf16]

Reads DIR/config.json (a full hlat config), DIR/weights.safetensors (hlat's
initial weights) and DIR/tokens.i32 (int32, shape (steps, grad_accum, 2, B, T):
inputs then targets of every micro-batch). Writes DIR/reference_grads.safetensors
(the gradients of step 0, before clipping) and DIR/reference.json (the loss and
gradient norm of every step, with AdamW, clipping and the LR schedule applied).
With model.z_loss the gradients are of the cross-entropy plus the z-loss term;
the losses are the cross-entropy alone, as hlat reports them, and the z-loss
term of every step is written beside them (z_losses).

The precision argument picks PyTorch's counterpart of an hlat mode: fp64 (the
exact reference for fp32), autocast (float32 weights and optimizer, the
forward under torch.autocast("cpu", bfloat16): hlat's `mixed`) or bf16 (the
whole model, its gradients and AdamW's state in bfloat16: hlat's `bf16`). The
output names carry the precision unless it is fp64.
"""
import contextlib
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import Llama, learning_rate, make_optimizer, read_safetensors, write_safetensors, z_loss_term  # noqa: E402


def main(d, precision="fp64"):
    cfg = json.load(open(os.path.join(d, "config.json")))
    run, sched, opt = cfg["run"], cfg["schedule"], cfg["optimizer"]
    B, T, accum = run["batch_size"], run["seq_len"], run["grad_accum"]
    tokens = np.fromfile(os.path.join(d, "tokens.i32"), dtype=np.int32).reshape(-1, accum, 2, B, T)
    torch.manual_seed(0)
    dtype = {"fp64": torch.float64, "autocast": torch.float32, "bf16": torch.bfloat16}[precision]
    model = Llama(cfg["model"]).to(dtype)
    suffix = "" if precision == "fp64" else "_" + precision
    weights, _ = read_safetensors(os.path.join(d, "weights.safetensors"))
    model.load_numpy(weights)
    optimizer = make_optimizer(model, opt)
    losses, grad_norms, z_losses = [], [], []
    z_coefficient = cfg["model"].get("z_loss", 0.0)
    for step in range(tokens.shape[0]):
        optimizer.zero_grad(set_to_none=False)
        total, z_total = 0.0, 0.0
        for micro in range(accum):
            x = torch.from_numpy(tokens[step, micro, 0].astype(np.int64))
            y = torch.from_numpy(tokens[step, micro, 1].astype(np.int64))
            autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "autocast" else contextlib.nullcontext()
            with autocast:
                logits, loss = model(x, y)
                z = z_loss_term(logits, z_coefficient)
            ((loss + z) / accum).backward()
            total += loss.item() / accum
            z_total += z.item() / accum
        if step == 0:
            write_safetensors(os.path.join(d, f"reference_grads{suffix}.safetensors"),
                              {n: p.grad.float().numpy() for n, p in model.named_parameters()})
        max_norm = opt["grad_clip"] if opt["grad_clip"] > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(sched, step)
        optimizer.step()
        losses.append(total)
        grad_norms.append(norm.item())
        z_losses.append(z_total)
    json.dump({"losses": losses, "grad_norms": grad_norms, "z_losses": z_losses},
              open(os.path.join(d, f"reference{suffix}.json"), "w"))


if __name__ == "__main__":
    main(*sys.argv[1:])
