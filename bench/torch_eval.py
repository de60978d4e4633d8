"""Times the PyTorch reference scoring the requests of `hlat eval --log-samples`,
for bench/eval_vs_pytorch.

usage: scripts/python bench/torch_eval.py CHECKPOINT_DIR SAMPLES_JSONL THREADS

float32, each request from scratch as lm-evaluation-harness sends a Hugging
Face model one: context + continuation through the whole model (every
position through the LM head), one request at a time. Prints one JSON object:
{"tasks": {task: {"seconds", "requests", "max_abs_diff"}}, "blas": {"library",
"coretype"}} where max_abs_diff compares its log-likelihoods with hlat's. Its
BLAS as in torch_train_steps.py: the faster core type, never the reference BLAS.
"""
import json
import os
import sys
import time

from fast_openblas import blas_in_use, ensure_fast_openblas, refuse_reference_blas

ensure_fast_openblas()

import torch  # noqa: E402

BLAS = blas_in_use()
refuse_reference_blas(BLAS)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from eval_loglik import continuation_logliks, load, rolling_loglik, unconditional_logliks  # noqa: E402


def main(checkpoint, samples, threads):
    torch.set_num_threads(threads)
    model, T = load(checkpoint, torch.float32)
    out = {}
    for line in open(samples):
        s = json.loads(line)
        t0 = time.perf_counter()
        if "tokens" in s:
            ours, ref = [s["loglik"]], [rolling_loglik(model, T, s)]
        else:
            ours, ref = s["loglik"], continuation_logliks(model, T, s)
        if "unconditional" in s:
            ours, ref = ours + s["unconditional_loglik"], ref + unconditional_logliks(model, T, s)
        task = out.setdefault(s["task"], {"seconds": 0.0, "requests": 0, "max_abs_diff": 0.0})
        task["seconds"] += time.perf_counter() - t0
        task["requests"] += len(ref)
        task["max_abs_diff"] = max([task["max_abs_diff"]] + [abs(a - b) for a, b in zip(ours, ref)])
    print(json.dumps({"tasks": out, "blas": BLAS}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
