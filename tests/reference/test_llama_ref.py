"""The reference model's fused-attention path (torch_sdpa, what the benches give
the current PyTorch as its best setting) computes what its explicit softmax
path computes: the benches compare hlat with the same model either way.

usage: scripts/python -m unittest tests/reference/test_llama_ref.py
"""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import Llama  # noqa: E402

TINY = {"vocab_size": 97, "dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "hidden_dim": 64,
        "max_seq_len": 24, "norm_eps": 1e-5, "rope_theta": 10000.0, "init_std": 0.02, "init_scaling": "per_layer"}


def loss_and_grads(cfg, idx, targets):
    model = Llama(cfg).to(torch.float64)
    model.init_weights(7)
    _, loss = model(idx, targets)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


class FusedAttention(unittest.TestCase):
    def test_matches_the_explicit_softmax_in_float64(self):
        g = torch.Generator().manual_seed(3)
        idx = torch.randint(0, TINY["vocab_size"], (3, 24), generator=g)
        targets = torch.randint(0, TINY["vocab_size"], (3, 24), generator=g)
        for extra in ({}, {"qk_norm": True}, {"n_kv_heads": 4}):
            cfg = {**TINY, **extra}
            with self.subTest(**extra):
                loss, grads = loss_and_grads(cfg, idx, targets)
                sdpa_loss, sdpa_grads = loss_and_grads({**cfg, "torch_sdpa": True}, idx, targets)
                self.assertAlmostEqual(loss, sdpa_loss, delta=1e-12)
                for name, grad in grads.items():
                    err = (grad - sdpa_grads[name]).abs().max().item()
                    self.assertLess(err, 1e-12 * max(1.0, grad.abs().max().item()), name)

    def test_is_causal(self):
        """A later token cannot change an earlier position's logits on the fused path."""
        model = Llama({**TINY, "torch_sdpa": True}).to(torch.float64)
        model.init_weights(7)
        idx = torch.randint(0, TINY["vocab_size"], (1, 24), generator=torch.Generator().manual_seed(5))
        changed = idx.clone()
        changed[0, 20] = (idx[0, 20] + 1) % TINY["vocab_size"]
        with torch.no_grad():
            a, _ = model(idx)
            b, _ = model(changed)
        self.assertTrue(torch.equal(a[0, :20], b[0, :20]))
        self.assertFalse(torch.equal(a[0, 20:], b[0, 20:]))


if __name__ == "__main__":
    unittest.main()
