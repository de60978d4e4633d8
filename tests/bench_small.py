"""A bench's small mode, run as the test suite's check that the bench still runs.

usage: python3 tests/bench_small.py NAME     (from any folder; the build is ../build)

Runs the bench NAME with --small (a few steps, the smallest config, a short
budget: the bench's whole path, its figures meaningless), then checks what a
reader of its numbers relies on: it exits 0, its last line is one JSON object,
each key path SHAPES names is there (a number unless typed otherwise), and
every number anywhere in it is finite. Values are not checked: no timing
limits in tests (the full bench, `make bench`, measures).

A key path is dotted; `*` stands for every entry of an object or a list (at
least one must be there); `:str`, `:bool`, `:list`, `:object` type its leaf.
"""
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HLAT = os.path.join(ROOT, "build", "cli", "hlat")

# How each bench is started (default: bench/NAME --small).
COMMANDS = {
    "kernels": [os.path.join(ROOT, "build", "bench", "hlat_kernels_bench"), "--small"],
    "run_page_draw": ["node", os.path.join(ROOT, "bench", "run_page_draw.mjs"), HLAT, "--small"],
    "page_screenshots": ["node", os.path.join(ROOT, "bench", "page_screenshots.mjs"), HLAT, "--small"],
}

# The key paths each bench's last line must hold: the figures docs quote.
SHAPES = {
    "uptime": ["budget_seconds", "mean_crash_seconds", "operator_delay_seconds",
               "supervised.uptime", "supervised.training_seconds", "supervised.crashes", "supervised.restarts",
               "supervised.tokens_trained", "supervised.steps",
               "unsupervised.uptime", "unsupervised.training_seconds", "unsupervised.crashes",
               "unsupervised.restarts", "unsupervised.tokens_trained", "unsupervised.steps"],
}


def fail(message):
    sys.exit(f"bench_small: {message}")


def leaves(value, path, parts):
    """The values at a dotted path (parts), `*` expanded; fails naming the path where it breaks."""
    if not parts:
        return [value]
    head, rest = parts[0], parts[1:]
    if head == "*":
        items = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else None
        if not items:
            fail(f"{path}: expected a non-empty object or list, got {json.dumps(value)[:200]}")
        return [leaf for item in items for leaf in leaves(item, path, rest)]
    if not isinstance(value, dict) or head not in value:
        fail(f"{path}: no key {head!r} in {json.dumps(value)[:200]}")
    return leaves(value[head], path, rest)


TYPES = {"number": (int, float), "str": (str,), "bool": (bool,), "list": (list,), "object": (dict,)}


def check_shape(result, paths):
    for spec in paths:
        path, _, kind = spec.partition(":")
        kind = kind or "number"
        for leaf in leaves(result, path, path.split(".")):
            if not isinstance(leaf, TYPES[kind]) or (kind == "number" and isinstance(leaf, bool)):
                fail(f"{path}: expected a {kind}, got {json.dumps(leaf)[:200]}")


def non_finite(value, path="$"):
    """Every number in the result that is NaN or infinite, by path."""
    if isinstance(value, float) and not math.isfinite(value):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in non_finite(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in non_finite(v, f"{path}[{i}]")]
    return []


def main():
    if len(sys.argv) != 2 or not SHAPES.get(sys.argv[1]):
        fail(f"usage: bench_small.py NAME, NAME one of {', '.join(sorted(SHAPES))} (a bench with no key paths "
             f"declared here is not checked)")
    name = sys.argv[1]
    command = COMMANDS.get(name, [os.path.join(ROOT, "bench", name), "--small"])
    print("$", " ".join(command), flush=True)
    proc = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        fail(f"{name} --small exited {proc.returncode}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        fail(f"{name} --small printed nothing")
    try:
        result = json.loads(lines[-1])
    except json.JSONDecodeError as e:
        fail(f"{name} --small: its last line is not JSON ({e}): {lines[-1][:200]}")
    if not isinstance(result, dict):
        fail(f"{name} --small: its last line is not a JSON object: {lines[-1][:200]}")
    check_shape(result, SHAPES[name])
    bad = non_finite(result)
    if bad:
        fail(f"{name} --small: not finite: {', '.join(bad[:20])}")
    print(f"bench_small: {name}: {len(SHAPES[name])} key paths there, every number finite")


if __name__ == "__main__":
    main()
