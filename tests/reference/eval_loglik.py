"""Recomputes the log-likelihoods of `hlat eval --log-samples` with the PyTorch
reference model, in float64, each sequence from scratch (no key/value cache),
and prints the largest absolute difference as JSON.

usage: eval_loglik.py CHECKPOINT_DIR SAMPLES_JSONL
Run with scripts/python (the venv with PyTorch).
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import Llama, read_safetensors  # noqa: E402


def load(checkpoint, dtype=torch.float64):
    state = json.load(open(os.path.join(checkpoint, "state.json")))
    cfg = {"vocab_size": 8192, "dim": 256, "n_layers": 4, "n_heads": 4, "n_kv_heads": 4, "hidden_dim": 704,
           "max_seq_len": 256, "norm_eps": 1e-5, "rope_theta": 10000.0, "init_std": 0.02,
           "init_scaling": "per_layer"}
    cfg.update(state["config"]["model"])
    model = Llama(cfg).to(dtype)
    weights, _ = read_safetensors(os.path.join(checkpoint, "model.safetensors"))
    model.load_numpy(weights)
    model.eval()
    return model, cfg["max_seq_len"]


def logprobs_of(model, inputs, targets):
    """Sum of log p(targets[i] | inputs[:i+1]) over the last len(targets) positions."""
    with torch.inference_mode():
        logits, _ = model(torch.tensor([inputs], dtype=torch.long))
    lp = F.log_softmax(logits[0, -len(targets):], dim=-1)
    return lp[torch.arange(len(targets)), torch.tensor(targets)].sum().item()


def continuation_logliks(model, T, s):
    """The harness's loglikelihood requests; the context is cut from the left
    so the longest continuation fits, as hlat cuts it."""
    longest = max(len(c) for c in s["continuations"])
    context = [s["prefix_token"]] + s["context_tokens"]
    context = context[max(0, len(context) - (T - longest + 1)):]
    return [logprobs_of(model, (context + c)[:-1], c) for c in s["continuations"]]


def unconditional_logliks(model, T, s):
    """Each choice after the prefix token alone (the harness's context "")."""
    return [logprobs_of(model, ([s["prefix_token"]] + c)[:-1], c) for c in s["unconditional"]]


def rolling_loglik(model, T, s):
    """lm-evaluation-harness's get_rolling_token_windows, written out again."""
    tokens, context_len = s["tokens"], s["rolling_context"]
    pred_len = T - context_len + 1
    first = min(T, len(tokens))
    total = logprobs_of(model, [s["prefix_token"]] + tokens[: first - 1], tokens[:first])
    predicted = first
    while predicted < len(tokens):
        n = min(len(tokens) - predicted, pred_len)
        end = predicted + n
        total += logprobs_of(model, tokens[end - T - 1 : end - 1], tokens[end - n : end])
        predicted = end
    return total


def main(checkpoint, samples):
    model, T = load(checkpoint)
    worst, count = 0.0, 0
    for line in open(samples):
        s = json.loads(line)
        if "tokens" in s:
            ours, ref = [s["loglik"]], [rolling_loglik(model, T, s)]
        else:
            ours, ref = s["loglik"], continuation_logliks(model, T, s)
        if "unconditional" in s:  # acc_mutual_info: each choice after the prefix token alone
            ours = ours + s["unconditional_loglik"]
            ref = ref + unconditional_logliks(model, T, s)
        for a, b in zip(ours, ref):
            worst = max(worst, abs(a - b))
            count += 1
    print(json.dumps({"compared": count, "max_abs_diff": worst}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
