"""The client core: standard library only.

A Run queues each log() on the caller's thread (a dict copy and a deque
append) and a sender thread posts batches of JSON lines to
POST /api/v1/runs/{run}/ingest. Each reply carries the run's state; a halt
sets a flag that the next log() or should_stop() turns into HaltRequested,
agreed across ranks when torch.distributed is initialised. Without a server,
store= writes a local store through `hlat ingest --follow`.

A run not finished by the program is ended for it (see _install_hooks): an
uncaught exception ends it "crashed" (Ctrl-C's KeyboardInterrupt "stopped", an
uncaught HaltRequested "halted"), SIGTERM "crashed", a normal interpreter exit
"finished"; each first sends what is queued (at most 2 s when dying).
"""
import atexit
import collections
import http.client
import itertools
import json
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HALT_EXIT_CODE = 3  # `hlat ingest --follow --on-halt exit` and a halted `hlat train`
_log = logging.getLogger("hlat")
DYING_FLUSH_S = 2.0    # how long a dying process waits for its queue before it reports the run's end
DYING_REQUEST_S = 2.0  # and for the server's answer to that report (both well inside the 5 s the issue asks)
EXIT_FLUSH_S = 10.0    # a normal exit without finish(): how long it waits for the queue (a dead server
                       # must not hold the interpreter's exit for finish()'s 30 s)


class HaltRequested(Exception):
    """The run must stop: a detector with the halt policy fired, or a person asked.

    `reason` says who and why, e.g. "detector grad_spike at step 31: ...".
    Checkpoint, then call run.finish() (it records the run as halted).
    """

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class _HttpTransport:
    """Posts to `hlat serve` over one kept-alive connection."""

    def __init__(self, url, token, timeout):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"hlat url {url!r}: expected http://HOST:PORT")
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.prefix = parsed.path.rstrip("/")
        self.url, self.token, self.timeout = url, token, timeout
        self.conn = None

    def another(self, timeout):
        """A second connection to the same server, for a thread that must not share this one."""
        return _HttpTransport(self.url, self.token, timeout)

    def request(self, method, path, body=b"", content_type="application/json"):
        headers = {"Content-Type": content_type, "X-HLAT-Token": self.token or ""}
        for attempt in range(2):  # a kept-alive connection the server closed: reconnect once
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, self.prefix + path, body=body, headers=headers)
                response = self.conn.getresponse()
                text = response.read().decode("utf-8", "replace")
                status = response.status
                break
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise
        try:
            payload = json.loads(text) if text else {}
        except ValueError:
            payload = {"error": text}
        if status >= 400:
            raise _ServerError(status, payload.get("error", text))
        return payload

    def close(self):
        if self.conn is not None:
            self.conn.close()


class _ServerError(Exception):
    def __init__(self, status, message):
        super().__init__(f"hlat serve answered {status}: {message}")
        self.status = status


def _quote(name):
    return urllib.parse.quote(name, safe="")


def _dist():
    """torch.distributed when it is initialised with more than one rank, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


class Run:
    """One training run as hlat sees it. Create it with hlat.init()."""

    def __init__(self, name, url=None, token=None, store=None, config=None, precision=None, meta=None,
                 detectors=None, resume=False, rank=None, world_size=None, send_interval=0.02, timeout=10.0,
                 sync_every=1, max_lag_steps=None, hlat_binary=None):
        self.name = name
        dist = _dist()
        self.rank = rank if rank is not None else (dist.get_rank() if dist else int(os.environ.get("RANK", 0)))
        self.world_size = world_size if world_size is not None else (
            dist.get_world_size() if dist else int(os.environ.get("WORLD_SIZE", 1)))
        self.sync_every = max(1, int(sync_every))
        self.send_interval = send_interval
        self.max_lag_steps = max_lag_steps
        self._answered = -1        # the newest step whose batch hlat has answered
        self._queue = collections.deque()
        self._wake = threading.Event()
        self._halt_reason = None   # set by the sender thread on rank 0
        self._halted = None        # the reason every rank agreed on
        self._last_step = 0
        self._top_step = 0  # the largest step of anything queued: a follower skips records below it
        self._closed = False
        self._finishing = False    # finish() is under way (a signal may arrive in the middle of it)
        self._abandoned = False    # a dying process gave up on what is still queued
        self._unwatched_said = False
        self._pid = os.getpid()    # a forked child (a DataLoader worker) must not end its parent's run
        self._error = None
        self.stats = {"batches": 0, "values": 0, "retries": 0, "alerts": 0, "dropped_values": 0, "dropped_batches": 0}
        self._dropped_keys = set()
        self.alerts = []           # alerts the server raised on this run's records
        self._transport = self._local = None
        if self.rank != 0:
            return  # only rank 0 talks to hlat; the others take part in the collectives
        config = dict(config or {})
        if detectors is not None:
            config["detectors"] = detectors
        meta = dict(meta or {})
        meta.setdefault("world_size", self.world_size)
        if url and store:
            raise ValueError("hlat.init: give url= (a running hlat serve) or store= (a local store), not both")
        if store:
            self._local = _LocalStore(name, store, config, precision, meta, resume, hlat_binary)
        else:
            url = url or os.environ.get("HLAT_URL", "http://127.0.0.1:8080")
            token = token if token is not None else os.environ.get("HLAT_TOKEN", "")
            self._transport = _HttpTransport(url, token, timeout)
            self._transport.request("POST", f"/api/v1/runs/{_quote(name)}/start", json.dumps(
                {"config": config, "precision": precision or "", "meta": meta, "resume": bool(resume),
                 "host": socket.gethostname()}).encode())
        self._sender = threading.Thread(target=self._send_loop, name="hlat-sender", daemon=True)
        self._sender.start()
        _install_hooks(self)

    # -- the training thread ------------------------------------------------

    def log(self, values, step):
        """Queues values (numbers or 0-d tensors, NaN and inf kept) for `step`.

        Never waits on the network. Raises HaltRequested once a halt is known
        (on every rank at the same step, with torch.distributed).
        """
        step = int(step)
        self._last_step = step
        self.record(values, step)
        if self.rank == 0 and self.max_lag_steps is not None:
            self._wait_for_answers(step - self.max_lag_steps - 1)
        if self._should_stop(step):
            raise HaltRequested(self._halted)

    def record(self, values, step):
        """Queues values like log() without the halt check (and its collective): for probes
        that only rank 0 reports from. Every rank may call it; the others' values are dropped."""
        if self.rank == 0:
            step = int(step)
            if not _valid_step(step):
                self._drop(f"step {step}", step, f"a step is an integer from 0 to {_MAX_STEP:.0e}; its values are not stored")
                return
            self._top_step = max(self._top_step, step)
            self._queue.append((step, dict(values)))
            if not self._wake.is_set():
                self._wake.set()

    def _wait_for_answers(self, step):
        """With max_lag_steps: waits (only when hlat lags) until every step <= `step` is answered,
        so a halt raised on step s reaches the loop by step s + max_lag_steps + 1 at the latest."""
        deadline = time.monotonic() + 10.0
        while self._answered < step and self._queue and time.monotonic() < deadline and self._sender.is_alive():
            time.sleep(0.0002)

    def event(self, kind, detail, step):
        """Records an event (e.g. a replica_mismatch with the ranks and tensor)."""
        if self.rank == 0 and _valid_step(int(step)):
            self._top_step = max(self._top_step, int(step))
            self._queue.append((int(step), {"event": kind, "detail": detail}))
            self._wake.set()

    def should_stop(self, step=None):
        """True once a halt is requested; the same answer on every rank."""
        return self._should_stop(self._last_step if step is None else int(step))

    def halt_reason(self):
        return self._halted

    def flush(self, timeout=30.0):
        """Waits until everything queued so far has been sent (rank 0)."""
        if self.rank != 0:
            return
        deadline = time.monotonic() + timeout
        self._wake.set()
        while (self._queue or self._busy) and time.monotonic() < deadline and self._sender.is_alive():
            time.sleep(0.002)
        if self._queue:
            raise TimeoutError(f"hlat: {len(self._queue)} records still unsent after {timeout} s")

    def finish(self, status=None, detail="", timeout=30.0):
        """Sends what is queued and ends the run: finished, or halted after a HaltRequested.

        Calling it again does nothing. A run the program does not finish is ended for it:
        "crashed" by an uncaught exception or SIGTERM, "stopped" by an uncaught
        KeyboardInterrupt (Ctrl-C), "halted" by an uncaught HaltRequested, "finished" when the
        interpreter exits normally (sys.exit(n) included: the exit code is not visible to Python).
        Raises TimeoutError, leaving the run open, when the queue is not sent within `timeout` s.
        """
        if self._closed or self._finishing:
            return
        status = status or ("halted" if self._halted else "finished")
        self._finishing = True
        try:
            if self.rank == 0:
                self.flush(timeout)
                self._report_end(status, detail or (self._halted or ""))
        finally:
            self._finishing = False
            if self._closed:  # ended, even if hlat's answer failed; a timed-out flush leaves it open
                _forget(self)
        self._closed = True
        _forget(self)

    def _end_dying(self, status, detail, flush_s=DYING_FLUSH_S):
        """Ends the run from a process on its way out (uncaught exception, SIGTERM, exit): every
        wait bounded (flush_s for the queue, DYING_REQUEST_S for the answer), nothing raised;
        the run ends even when records are left unsent, and the detail says how many."""
        if self._closed or self._finishing or self._pid != os.getpid():
            return
        self._finishing = True
        try:
            if self.rank == 0:
                try:
                    self.flush(flush_s)
                except TimeoutError:
                    detail = f"{detail} ({len(self._queue)} records unsent after {flush_s:g} s)".strip()
                self._abandoned = True  # the sender stops: a late batch would make the run running again
                self._report_end(status, detail, join_s=0.5, request_s=DYING_REQUEST_S)
        except Exception as e:  # the process is dying of something else: say this, do not mask that
            print(f"hlat: could not record run {self.name!r} as {status}: {e}", file=sys.stderr)
        finally:
            self._finishing = False
            self._closed = True
            _forget(self)

    def _report_end(self, status, detail, join_s=5.0, request_s=None):
        """Stops the sender and tells hlat how the run ended (rank 0)."""
        self._closed = True
        self._wake.set()
        self._sender.join(timeout=join_s)
        body = json.dumps({"status": status, "step": self._last_step, "detail": detail[:2000]})  # the server takes 10,000 bytes
        if self._transport:
            transport = self._transport
            if request_s is not None or self._sender.is_alive():  # the sender may still hold the connection
                transport = self._transport.another(request_s or self._transport.timeout)
            try:
                transport.request("POST", f"/api/v1/runs/{_quote(self.name)}/finish", body.encode())
            finally:
                transport.close()
                self._transport.close()
        if self._local:
            self._local.close(status, self._top_step, detail)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None or issubclass(kind, HaltRequested):
            self.finish()
        elif issubclass(kind, KeyboardInterrupt):
            self.finish("stopped", detail="KeyboardInterrupt (Ctrl-C)")
        else:
            self.finish("crashed", detail=_describe(kind, value))
        return False

    # -- halts -------------------------------------------------------------

    def _should_stop(self, step):
        if self._halted:
            return True
        reason = self._halt_reason
        if self._local and reason is None:
            reason = self._local.halt_reason()
        dist = _dist()
        if dist is not None:
            if step % self.sync_every:
                return False
            reason = self._agree(dist, reason)
        if reason:
            self._halted = reason
        return bool(reason)

    def _agree(self, dist, reason):
        """Rank 0 knows; every rank learns at the same step (one small broadcast)."""
        import torch
        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        flag = torch.tensor([1 if reason else 0], dtype=torch.int32, device=device)
        dist.broadcast(flag, src=0)
        if not int(flag.item()):
            return None
        box = [reason]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    # -- the sender thread -------------------------------------------------

    _busy = False

    def _send_loop(self):
        while True:
            self._wake.wait(timeout=0.5)
            self._wake.clear()
            if self.send_interval:
                time.sleep(self.send_interval)  # let a step's log calls gather into one batch
            while self._queue and not self._abandoned:
                self._busy = True
                try:
                    self._send_batch()
                except Exception as e:  # the training thread must not die of a monitoring error
                    self._retry(e)
                finally:
                    self._busy = False
            if self._closed:
                return

    def _retry(self, error):
        self._error = error
        print(f"hlat: sending failed ({error}); retrying", file=sys.stderr)
        self.stats["retries"] += 1
        time.sleep(min(5.0, 0.2 * self.stats["retries"]))

    def _send_batch(self):
        items = list(itertools.islice(self._queue, _MAX_BATCH_STEPS))  # popped only once sent: a failed post keeps them
        lines, values, dropped = _to_lines(items)
        body = "".join(lines).encode()
        if self._local:
            self._local.write(body)
        else:
            try:
                reply = self._transport.request("POST", f"/api/v1/runs/{_quote(self.name)}/ingest", body,
                                                "application/x-ndjson")
            except _ServerError as e:
                if e.status not in (400, 413):
                    raise
                # The server refuses what the batch says: sending it again cannot help, and
                # holding it would hold every later step. Said, counted, dropped.
                print(f"hlat: a batch of {len(items)} steps was refused and dropped ({e})", file=sys.stderr)
                self.stats["dropped_batches"] += 1
                reply, values = {}, 0
            self._take_reply(reply)
        for _ in items:
            self._queue.popleft()
        for key, step, why in dropped:
            self._drop(key, step, why)
        self._answered = max(self._answered, items[-1][0])
        self.stats["batches"] += 1
        self.stats["values"] += values

    def _drop(self, key, step, why):
        """A value left out of what is sent: counted, and said once for each key (for the first 20 keys)."""
        self.stats["dropped_values"] += 1
        if len(self._dropped_keys) > 20 or key in self._dropped_keys:
            return
        self._dropped_keys.add(key)
        if len(self._dropped_keys) > 20:
            _log.warning("hlat: values of more keys are not stored; the others are no longer named")
            return
        _log.warning("hlat: %s at step %d is not stored: %s (the rest of the step is; said once for this key)",
                     _short(key), step, why)

    def _take_reply(self, reply):
        for alert in reply.get("alerts", []):
            self.alerts.append(alert)
            self.stats["alerts"] += 1
            print(f"hlat: ALERT {alert['kind']} at step {alert['step']}: {alert['message']}", file=sys.stderr)
        unwatched = reply.get("unwatched")
        if unwatched and not self._unwatched_said:  # e.g. keys no detector reads: said once per run
            self._unwatched_said = True
            _log.warning("hlat: %s", unwatched)
        if reply.get("state") == "halt" and self._halt_reason is None:
            halt = reply.get("halt", {})
            self._halt_reason = halt.get("reason", "halt requested")


_MAX_KEY_BYTES = 200     # what hlat takes as a key: 1 to 200 bytes of UTF-8, no control character
_MAX_STEP = 9 * 10**15   # steps hlat keeps: integers from 0 to 9e15
_MAX_DETAIL = 10_000     # characters of an event's detail sent (the server takes lines of 1 MB)
_MAX_BATCH_STEPS = 4096  # steps in one POST: a backlog after an outage goes out in pieces


def _valid_step(step):
    return 0 <= step <= _MAX_STEP


def _key_problem(key):
    """Why hlat cannot store `key` as a metric's name, or None."""
    if not isinstance(key, str):
        return f"its name {key!r} is not a string"
    if key == "step":
        return "step is the step argument's (a value named step would move the record)"
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        return "its name is not valid UTF-8 (a lone surrogate)"
    if not 1 <= size <= _MAX_KEY_BYTES:
        return f"its name is {size} bytes (1 to {_MAX_KEY_BYTES})"
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        return "its name holds a control character"
    return None


def _number(key, x):
    """x as the float hlat stores (NaN and infinities kept; the strings "nan" and "1e-3" read as
    numbers), or the reason it is none."""
    try:
        value = float(x)
    except Exception as e:  # anything a user may pass: None, lists, tensors of many elements, ...
        return None, f"{type(x).__name__} {_short(x)} is not a number ({e})"
    if key == "time" and not math.isfinite(value):
        return None, f"a time must be finite, not {value}"
    return value, None


def _short(x):
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _text(x, limit):
    """An event's kind or detail as UTF-8 the server reads (lone surrogates replaced), at most `limit` characters."""
    return str(x)[:limit].encode("utf-8", "replace").decode("utf-8")


def _tensors_to_floats(merged):
    """0-d tensors to Python floats in one transfer; any tensor that is not one value (or on a
    device that cannot stack with the rest) is left as it is, for _number to refuse."""
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


def _to_lines(items):
    """One JSON line per step (consecutive logs of a step merged), the values counted, and what
    was left out as (key, step, why): a value hlat cannot store (None, a list, a string that is no
    number, a tensor of many values, a key that is no name) is left out and the rest of its step
    sent, so a value cannot make the server refuse a batch and hold back every later step."""
    merged = []
    for step, values in items:
        if merged and merged[-1][0] == step and "event" not in values and "event" not in merged[-1][1]:
            merged[-1][1].update(values)
        else:
            merged.append((step, dict(values)))
    _tensors_to_floats(merged)
    lines, values, dropped = [], 0, []
    for step, v in merged:
        record = {"step": step}
        if "event" in v:  # an event record (event(), or log() with an "event" key): kind and detail as text
            record.update(event=_text(v.pop("event"), _MAX_DETAIL), detail=_text(v.pop("detail", ""), _MAX_DETAIL))
        for k, x in v.items():
            if x is None:
                continue  # a missing value, as in hlat's JSONL
            why = _key_problem(k)
            if why is None:
                number, why = _number(k, x)
            if why is None:
                record[k] = number
                values += 1
            else:
                dropped.append((k, step, why))
        lines.append(json.dumps(record) + "\n")  # NaN and Infinity bare: hlat reads them
    return lines, values, dropped


class _LocalStore:
    """store=: JSON lines into a file that `hlat ingest --follow` reads into the store."""

    def __init__(self, name, store, config, precision, meta, resume, hlat_binary):
        binary = hlat_binary or os.environ.get("HLAT_BINARY") or shutil.which("hlat")
        if not binary:
            raise FileNotFoundError("hlat.init(store=...): the hlat binary is not on PATH; pass hlat_binary= "
                                    "or set HLAT_BINARY")
        self.dir = tempfile.mkdtemp(prefix="hlat-client-")
        self.path = os.path.join(self.dir, "records.jsonl")
        self.file = open(self.path, "ab", buffering=0)
        meta_arg = ",".join(f"{k}={v}" for k, v in meta.items())
        if precision:
            meta_arg = f"precision={precision}" + ("," + meta_arg if meta_arg else "")
        cmd = [binary, "ingest", "--store", store, "--run", name, "--follow", "--format", "jsonl",
               "--on-halt", "exit", "--config", json.dumps(config), self.path]
        if meta_arg:
            cmd += ["--meta", meta_arg]
        if resume:
            cmd.append("--resume")
        # Its own process group: a SIGTERM for the training job's group must not
        # stop the follower before it reads the run's last lines and its end.
        self.proc = subprocess.Popen(cmd, start_new_session=True)

    def write(self, body):
        self.file.write(body)

    def halt_reason(self):
        code = self.proc.poll()
        if code == HALT_EXIT_CODE:
            return "halt requested (hlat ingest --follow exited with the halt code; see the run's alerts)"
        return None

    def close(self, status, step, detail=""):
        # The follower ends the run with this status when it reads the line
        # (`hlat ingest --follow`'s "end" record), then exits by itself.
        end = {"step": step, "event": "end", "detail": f"{status}: {detail}" if detail else status}
        self.file.write((json.dumps(end) + "\n").encode())
        self.file.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


# -- ends the program did not write ------------------------------------------

_live = []              # this process's rank-0 runs not yet finished
_previous_excepthook = None


def _install_hooks(run):
    """Makes sure `run` ends with a true status however the process ends, short of SIGKILL
    (which leaves the run to the server's stale check):

    - an uncaught exception (sys.excepthook; the previous hook still runs after, and prints the
      traceback): "crashed" with the exception's type and message; KeyboardInterrupt (Ctrl-C)
      "stopped", as hlat's own trainer records Ctrl-C and as W&B and MLflow keep a killed run
      apart from a failed one; an uncaught HaltRequested "halted";
    - SIGTERM: "crashed", then the process dies of SIGTERM as it would have (exit status -15).
      Installed only when SIGTERM has its default action and init runs on the main thread:
      a handler of the program's own is left alone, and decides;
    - a normal interpreter exit without finish() (atexit): "finished", after sending what is
      queued (at most EXIT_FLUSH_S).
    """
    global _previous_excepthook
    if run.rank != 0:
        return
    _live.append(run)
    if _previous_excepthook is None:
        _previous_excepthook = sys.excepthook
        sys.excepthook = _on_uncaught
        atexit.register(_on_exit)
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def _forget(run):
    """A finished run: off the list; the default SIGTERM action back when no run is left."""
    if run in _live:
        _live.remove(run)
    if not _live and threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _end_all(status, detail):
    for run in list(_live):
        run._end_dying(status or ("halted" if run._halted else "crashed"), detail or (run._halted or ""))


def _describe(kind, value):
    module = getattr(kind, "__module__", "builtins")
    name = kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
    return f"{name}: {value}" if str(value) else name


def _on_uncaught(kind, value, tb):
    try:
        if issubclass(kind, HaltRequested):
            _end_all(None, value.reason)
        elif issubclass(kind, KeyboardInterrupt):
            _end_all("stopped", "KeyboardInterrupt (Ctrl-C)")
        else:
            _end_all("crashed", "uncaught " + _describe(kind, value))
    finally:
        (_previous_excepthook or sys.__excepthook__)(kind, value, tb)


def _on_sigterm(signum, frame):
    _end_all("crashed", f"killed by signal {signum} (SIGTERM)")
    signal.signal(signum, signal.SIG_DFL)  # then die of it, as without hlat: whoever waits sees -15
    os.kill(os.getpid(), signum)


def _on_exit():
    for run in list(_live):
        run._end_dying("halted" if run._halted else "finished", run._halted or "", flush_s=EXIT_FLUSH_S)


def init(name, url=None, token=None, store=None, config=None, precision=None, meta=None, detectors=None,
         resume=False, rank=None, world_size=None, **options):
    """Starts (or with resume=True continues) a run.

    url/token: a running `hlat serve` (defaults: $HLAT_URL or http://127.0.0.1:8080, $HLAT_TOKEN);
    store: a local store file instead, written through `hlat ingest --follow`.
    config: the run's config (shown in the page and `hlat compare`); detectors: its detector
    settings, as the "detectors" section of an hlat config (e.g. {"grad_spike": {"policy": "halt"}}).
    precision and meta (bytes_per_param, ...): what hlat cannot know by itself.
    rank/world_size: default to torch.distributed's, or $RANK/$WORLD_SIZE.
    options: send_interval (s to gather a step's logs, default 0.02), timeout (s), sync_every (steps between
    the ranks' halt agreements, default 1), max_lag_steps (log() waits when hlat has not answered the
    steps before step - max_lag_steps: a bound on how late a halt arrives; default None, never waits),
    hlat_binary (for store=).
    """
    return Run(name, url=url, token=token, store=store, config=config, precision=precision, meta=meta,
               detectors=detectors, resume=resume, rank=rank, world_size=world_size, **options)
