"""Records to the JSON lines POST /api/v1/runs/{run}/ingest takes (and a spool file holds).

A record is (step, values) as log(), event() or alert() queued it. What hlat
cannot store is left out with its reason, never sent: one bad value must not
make the server refuse a batch and hold back every later step.

A step's batch ids (log(..., batch=)) go in its record as "batch": "ID" or ["ID", ...], which
the server keeps as the step's batch record (not a metric) and a rewind_skip halt lists; they
are checked here as the server checks them.
"""
import json
import math
import numbers

MAX_KEY_BYTES = 200      # what hlat takes as a key: 1 to 200 bytes of UTF-8, no control character
MAX_STEP = 9 * 10**15    # steps hlat keeps: integers from 0 to 9e15
MAX_DETAIL = 10_000      # characters of an event's detail or an alert's text (the server takes lines of 1 MB)
MAX_TITLE = 200          # characters of an alert's title
MAX_BATCH_STEPS = 4096   # steps in one POST: a backlog after an outage goes out in pieces
MAX_BATCH_ID_BYTES = 256  # a batch id: 1 to 256 bytes of UTF-8, no control character (as the server takes it)
MAX_BATCH_IDS = 1024      # batch ids in one step
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


def _element(x):
    """One element of a vector as a float, or None: numbers (and 0-d tensors) only; strings,
    None, lists and dicts are no element."""
    if x is None or isinstance(x, (str, bytes, list, tuple, dict)):
        return None
    try:
        return float(x)
    except Exception:
        return None


def _label_problem(label):
    """Why `label` cannot name a vector's element, or None (the rules of a key's name)."""
    if not isinstance(label, str):
        return f"label {short(label)} is not a string"
    why = key_problem(label) if label != "step" else None
    return why and f"label {short(label)}: " + why.replace("its name ", "")


def value(key, x):
    """(what is sent, None) or (None, why not): a number (a float); a vector, as a dict of
    label -> number, a list of numbers (labelled by index) or a list of equally long lists of
    numbers (a matrix, flattened row-major by hlat); a 1-d or 2-d tensor or array of more than
    one element as the list. NaN and infinities are kept, in vectors too."""
    if hasattr(x, "tolist") and hasattr(x, "ndim") and not isinstance(x, (str, bytes)):
        if x.ndim in (1, 2) and _size(x) > 1:
            x = x.tolist()  # then checked as the list it is
        elif x.ndim > 2:
            return None, f"a tensor of shape {tuple(x.shape)} is no vector or matrix (1-d or 2-d only)"
    if isinstance(x, dict):
        return _dict_vector(key, x)
    if isinstance(x, (list, tuple)):
        return _list_vector(key, x)
    return number(key, x)


def _size(x):
    try:
        return int(x.numel()) if hasattr(x, "numel") else int(x.size)
    except Exception:
        return 0


def _dict_vector(key, x):
    if key == "time":
        return None, "a time must be a number"
    if not x:
        return None, "an empty dict is no vector"
    out = {}
    for label, element in x.items():
        why = _label_problem(label)
        if why:
            return None, f"a vector's {why}"
        v = _element(element)
        if v is None:
            return None, f"a vector's element {short(label)} is {type(element).__name__} {short(element)}, not a number"
        out[label] = v
    return out, None


def _list_vector(key, x):
    if key == "time":
        return None, "a time must be a number"
    if not x:
        return None, "an empty list is no vector"
    if all(isinstance(row, (list, tuple)) for row in x):
        width = len(x[0])
        if width == 0 or any(len(row) != width for row in x):
            return None, f"a list of lists must be a matrix (rows of one length > 0): {short(x)}"
        rows = [[_element(e) for e in row] for row in x]
        if any(e is None for row in rows for e in row):
            return None, f"a matrix holds something that is not a number: {short(x)}"
        return rows, None
    out = [_element(e) for e in x]
    if any(e is None for e in out):
        return None, f"list {short(x)} holds something that is not a number (a vector is numbers, a matrix lists of them)"
    return out, None


class BatchIds:
    """log()'s batch= as queued, checked on the sender thread. `shadowed`: the values had a
    "batch" of their own, which these ids replace."""

    __slots__ = ("given", "shadowed")

    def __init__(self, given, shadowed=False):
        self.given, self.shadowed = given, shadowed

    def plus(self, other):
        """Two log() calls of one step: both their ids."""
        mine = list(self.given) if isinstance(self.given, (list, tuple)) else [self.given]
        theirs = list(other.given) if isinstance(other.given, (list, tuple)) else [other.given]
        return BatchIds(mine + theirs, self.shadowed or other.shadowed)


def with_batch(values, batch):
    """A copy of log()'s values with its batch ids."""
    out = dict(values)
    out["batch"] = BatchIds(batch, "batch" in out)
    return out


def holds_batch_ids(x):
    """Whether a value named batch is batch ids (a string, or a list with a string in it), as the
    server tells them from a metric named batch (a number, a list of numbers)."""
    return isinstance(x, str) or (isinstance(x, (list, tuple)) and any(isinstance(e, str) for e in x))


def _batch_id(x, which):
    """One id as the string sent, or (None, why)."""
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        x = str(int(x))  # a dataset index: sent as its digits
    if not isinstance(x, str):
        return None, (f"{which} is {type(x).__name__} {short(x)}, not a string (batch ids are strings: a hash of "
                      "the batch's token ids, \"shard3:offset12345\"; or integers)")
    try:
        size = len(x.encode("utf-8"))
    except UnicodeEncodeError:
        return None, f"{which} is not valid UTF-8 (a lone surrogate)"
    if size == 0:
        return None, f"{which} is empty"
    if size > MAX_BATCH_ID_BYTES:
        return None, f"{which} is {size} bytes, the most is {MAX_BATCH_ID_BYTES}: {short(x)}"
    if any(ord(c) < 32 or ord(c) == 127 for c in x):
        return None, f"{which} holds a control character: {short(x)}"
    return x, None


def batch_ids(given):
    """(what is sent as "batch", None) or (None, why not): a string, or a list of strings (or
    integers, sent as strings) of 1 to MAX_BATCH_IDS ids."""
    if isinstance(given, (list, tuple)):
        if not given:
            return None, "an empty list of batch ids"
        if len(given) > MAX_BATCH_IDS:
            return None, f"{len(given)} batch ids; a step takes at most {MAX_BATCH_IDS}"
        out = []
        for i, x in enumerate(given):
            one, why = _batch_id(x, f"batch id {i}")
            if why:
                return None, why
            out.append(one)
        return out, None
    return _batch_id(given, "the batch id")


def short(x):
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def text(x, limit):
    """Text as UTF-8 the server reads (lone surrogates replaced), at most `limit` characters."""
    return str(x)[:limit].encode("utf-8", "replace").decode("utf-8")


def _tensors_to_floats(merged):
    """Tensors of one element to Python floats in one transfer; any other tensor (a vector or a
    matrix, for value() to read with tolist(); one that cannot stack with the rest) is left as
    it is."""
    tensors = [(i, k) for i, (_, v) in enumerate(merged) for k, x in v.items()
               if hasattr(x, "detach") and _one_element(x)]
    if not tensors:
        return
    import torch
    try:
        flat = torch.stack([merged[i][1][k].detach().float().reshape(()) for i, k in tensors]).cpu().tolist()
    except Exception:  # one by one, so that one bad tensor does not hold back the others
        flat = [_one_value(merged[i][1][k]) for i, k in tensors]
    for (i, k), x in zip(tensors, flat):
        merged[i][1][k] = x


def _one_element(tensor):
    try:
        return tensor.numel() == 1
    except Exception:
        return False


def _resolve_deferred(merged, dropped):
    """Values measured on a device and read here, on the sender thread (hlat.torch.watch's):
    each Deferred is replaced by the values it resolves to."""
    for step, v in merged:
        for k in [k for k, x in v.items() if isinstance(x, Deferred)]:
            deferred = v.pop(k)
            try:
                v.update(deferred.resolve())
            except Exception as e:
                dropped.append((k, step, f"its values could not be read ({type(e).__name__}: {e})"))


class Deferred:
    """A record's values still on their way (a device-to-host copy): resolve() waits for them
    and returns key -> value, on the sender thread."""

    def resolve(self):
        raise NotImplementedError


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
            before, now = merged[-1][1].get("batch"), values.get("batch")
            if isinstance(before, BatchIds) and isinstance(now, BatchIds):
                values = dict(values, batch=before.plus(now))
            merged[-1][1].update(values)
        else:
            merged.append((step, dict(values), special))
    return [(step, values) for step, values, _ in merged]


def to_lines(items, stamp=None):
    """One JSON line per step, the values counted, what was left out as (key, step, why), and
    the largest step (-1 for none):
    a value hlat cannot store (a string that is no number, a list that is no vector or matrix,
    a tensor of more than 2 dimensions, a key that is no name) is left out and the rest of its
    step sent; None is a missing value. With `stamp` (Unix time),
    each line without a time of its own gets that one: lines kept in a spool are dated when
    they were logged, not when they are uploaded."""
    dropped = []
    merged = _merge(items, dropped)
    _resolve_deferred(merged, dropped)
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
            if k == "batch" and (isinstance(x, BatchIds) or holds_batch_ids(x)):
                if isinstance(x, BatchIds) and x.shadowed:
                    dropped.append(("batch", step, "a value named batch beside log()'s batch= ids, which take "
                                                   "the name: log it under another"))
                ids, why = batch_ids(x.given if isinstance(x, BatchIds) else x)
                if why is None:
                    record["batch"] = ids
                else:
                    dropped.append(("batch", step, why))
                continue
            why = key_problem(k)
            if why is None:
                kept, why = value(k, x)
            if why is None:
                record[k] = kept
                values += 1
            else:
                dropped.append((k, step, why))
        if stamp is not None and "time" not in record:
            record["time"] = stamp
        lines.append(json.dumps(record, separators=(",", ":")) + "\n")  # NaN, Infinity bare: hlat reads them
    return lines, values, dropped, max((step for step, _ in merged), default=-1)
