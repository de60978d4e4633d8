"""Records to the JSON lines POST /api/v1/runs/{run}/ingest takes (and a spool file holds).

A record is (step, values) as log(), event() or alert() queued it. What hlat
cannot store is left out with its reason, never sent: one bad value must not
make the server refuse a batch and hold back every later step.
"""
import json
import math

MAX_KEY_BYTES = 200      # what hlat takes as a key: 1 to 200 bytes of UTF-8, no control character
MAX_STEP = 9 * 10**15    # steps hlat keeps: integers from 0 to 9e15
MAX_DETAIL = 10_000      # characters of an event's detail or an alert's text (the server takes lines of 1 MB)
MAX_TITLE = 200          # characters of an alert's title
MAX_BATCH_STEPS = 4096   # steps in one POST: a backlog after an outage goes out in pieces
_SPECIAL = ("event", "alert")  # records that are not merged with the values of their step


def valid_step(step):
    return 0 <= step <= MAX_STEP


def key_problem(key):
    """Why hlat cannot store `key` as a metric's name, or None."""
    if not isinstance(key, str):
        return f"its name {key!r} is not a string"
    if key == "step":
        return "step is the step argument's (a value named step would move the record)"
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        return "its name is not valid UTF-8 (a lone surrogate)"
    if not 1 <= size <= MAX_KEY_BYTES:
        return f"its name is {size} bytes (1 to {MAX_KEY_BYTES})"
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        return "its name holds a control character"
    return None


def number(key, x):
    """x as the float hlat stores (NaN and infinities kept; the strings "nan" and "1e-3" read as
    numbers), or the reason it is none."""
    try:
        value = float(x)
    except Exception as e:  # anything a user may pass: None, lists, tensors of many elements, ...
        return None, f"{type(x).__name__} {short(x)} is not a number ({e})"
    if key == "time" and not math.isfinite(value):
        return None, f"a time must be finite, not {value}"
    return value, None


def short(x):
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def text(x, limit):
    """Text as UTF-8 the server reads (lone surrogates replaced), at most `limit` characters."""
    return str(x)[:limit].encode("utf-8", "replace").decode("utf-8")


def _tensors_to_floats(merged):
    """0-d tensors to Python floats in one transfer; any tensor that is not one value (or on a
    device that cannot stack with the rest) is left as it is, for number() to refuse."""
    tensors = [(i, k) for i, (_, v) in enumerate(merged) for k, x in v.items() if hasattr(x, "detach")]
    if not tensors:
        return
    import torch
    try:
        flat = torch.stack([merged[i][1][k].detach().float().reshape(()) for i, k in tensors]).cpu().tolist()
    except Exception:  # one by one, so that one bad tensor does not hold back the others
        flat = [_one_value(merged[i][1][k]) for i, k in tensors]
    for (i, k), x in zip(tensors, flat):
        merged[i][1][k] = x


def _one_value(tensor):
    try:
        return tensor.detach().float().reshape(()).item()
    except Exception:
        return tensor


def _step(step):
    """The step as the int hlat stores (an int, a float, a 0-d tensor or numpy int given), or None."""
    try:
        step = int(step)
    except Exception:
        return None
    return step if valid_step(step) else None


def _merge(items, dropped):
    """Consecutive records of one step as one (events and alerts stay records of their own);
    a record whose step hlat cannot keep is left out, said in `dropped`."""
    merged = []
    for given, values in items:
        step = _step(given)
        if step is None:
            dropped.append((f"step {short(given)}", given, f"a step is an integer from 0 to {MAX_STEP:.0e}; the "
                                                            "values of this step are not stored"))
            continue
        special = any(k in values for k in _SPECIAL)
        if merged and merged[-1][0] == step and not special and not merged[-1][2]:
            merged[-1][1].update(values)
        else:
            merged.append((step, dict(values), special))
    return [(step, values) for step, values, _ in merged]


def to_lines(items, stamp=None):
    """One JSON line per step, the values counted, what was left out as (key, step, why), and
    the largest step (-1 for none):
    a value hlat cannot store (None, a list, a string that is no number, a tensor of many values,
    a key that is no name) is left out and the rest of its step sent. With `stamp` (Unix time),
    each line without a time of its own gets that one: lines kept in a spool are dated when
    they were logged, not when they are uploaded."""
    dropped = []
    merged = _merge(items, dropped)
    _tensors_to_floats(merged)
    lines, values = [], 0
    for step, v in merged:
        record = {"step": step}
        if "event" in v:  # an event record (event(), or log() with an "event" key): kind and detail as text
            record.update(event=text(v.pop("event"), MAX_DETAIL), detail=text(v.pop("detail", ""), MAX_DETAIL))
        elif "alert" in v:  # alert(): the server stores it as an alert of kind "alert"
            record.update(alert=text(v.pop("alert"), MAX_TITLE), text=text(v.pop("text", ""), MAX_DETAIL),
                          level=v.pop("level", "warning"))
        for k, x in v.items():
            if x is None:
                continue  # a missing value, as in hlat's JSONL
            why = key_problem(k)
            if why is None:
                value, why = number(k, x)
            if why is None:
                record[k] = value
                values += 1
            else:
                dropped.append((k, step, why))
        if stamp is not None and "time" not in record:
            record["time"] = stamp
        lines.append(json.dumps(record) + "\n")  # NaN and Infinity bare: hlat reads them
    return lines, values, dropped, max((step for step, _ in merged), default=-1)
