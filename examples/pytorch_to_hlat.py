"""Stream a PyTorch training loop's metrics into hlat's store.

The loop writes one JSON object per step to a JSONL file (standard library
only: json and a line-buffered file); `hlat ingest --follow` tails that file
into the store while the loop runs:

    hlat ingest --store runs/hlat.db --run my-run --follow --idle-exit 30 metrics.jsonl &
    scripts/python examples/pytorch_to_hlat.py metrics.jsonl

Each record: {"step": N, "loss": ..., "grad_norm": ..., "lr": ..., "time": unix seconds}.
Non-finite values are written as the strings "nan", "inf", "-inf", which
hlat ingest reads back as NaN and infinities (JSON has no literals for them).
"""
import json
import math
import sys
import time


class JsonlMetrics:
    """Appends one JSON line per step, flushed at once so a follower sees it."""

    def __init__(self, path):
        self.file = open(path, "a", buffering=1)

    def log(self, step, **values):
        record = {"step": int(step), "time": time.time()}
        for name, value in values.items():
            value = float(value)
            record[name] = value if math.isfinite(value) else ("nan" if math.isnan(value) else
                                                               ("inf" if value > 0 else "-inf"))
        self.file.write(json.dumps(record) + "\n")

    def close(self):
        self.file.close()


def main(path, steps=50):
    import torch  # the loop being observed; the logging above needs only the standard library

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.randn(256, 16)
    y = x[:, :1] * 2.0 - x[:, 1:2]
    metrics = JsonlMetrics(path)
    for step in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        metrics.log(step, loss=loss.item(), grad_norm=grad_norm.item(), lr=optimizer.param_groups[0]["lr"])
    metrics.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 50)
