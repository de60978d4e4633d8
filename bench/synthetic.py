"""Synthetic training data for the benches: a noisy Markov-chain language that
a small model can learn (a token file: fast to make, no corpus needed)."""
import numpy as np


def markov_tokens(n, vocab, seed=0):
    rng = np.random.default_rng(seed)
    nxt = rng.integers(0, vocab, size=(vocab, 3))
    out = np.empty(n, dtype=np.uint16)
    t = 0
    for i in range(n):
        out[i] = t
        t = nxt[t, rng.integers(0, 3)] if rng.random() < 0.9 else rng.integers(0, vocab)
    return out
