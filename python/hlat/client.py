"""The client core: standard library only.

A Run queues each log() on the caller's thread (a dict copy and a deque append); a sender
thread (_sender.py) posts batches of JSON lines to POST /api/v1/runs/{run}/ingest, or writes
them to a spool file while the server does not answer (and, with HLAT_MODE=offline, always).
Each reply carries the run's state; a halt sets a flag that log() reads (single process) or
should_stop() agrees on across ranks (torch.distributed). Without a server, store= writes a
local store through `hlat ingest --follow`.

A step may name what it trained on, log(values, step, batch=ID or [ID, ...]) (a hash of the
token ids, "shard3:offset12345"): the server keeps it as the step's batch record. When a
detector's policy is rewind_skip, its halt carries a plan, HaltRequested.rewind and
run.rewind_plan(): restart from the newest checkpoint at or before "restart_at_or_before" and
skip the batches "skip_batch_ids" (docs/external-trainers.md, "Batch ids and rewind-and-skip").

A run not finished by the program is ended for it (_ends.py): "crashed" by an uncaught
exception or SIGTERM, "stopped" by Ctrl-C, "halted" by an uncaught HaltRequested, "finished" at
a normal interpreter exit; each first sends (or spools) what is queued.
"""
import json
import logging
import os
import secrets
import socket
import sys
import time

from . import _ends, _meta, _spool, _system, _wandb
from ._http import HttpTransport
from ._local import HALT_EXIT_CODE, LocalStore  # noqa: F401  (HALT_EXIT_CODE: the documented name)
from ._records import MAX_STEP, short, with_batch
from ._sender import Sender

_log = logging.getLogger("hlat")
MODES = ("online", "offline", "disabled")
DEFAULT_URL = "http://127.0.0.1:8080"  # `hlat serve`'s default port
SEND_INTERVAL_S = 0.02         # how often the sender looks at the queue by default
PROMPT_SEND_INTERVAL_S = 0.002  # with max_lag_steps, or given: a step's answer (and a halt) back within ms
START_TIMEOUT_S = 5.0   # init's own try at the server: not the whole HTTP timeout before step 0
DYING_FLUSH_S = 2.0     # how long a dying process waits for its queue before it reports the run's end
DYING_REQUEST_S = 2.0   # and for the server's answer to that report (both well inside the 5 s the issue asks)
EXIT_FLUSH_S = _ends.EXIT_FLUSH_S


class HaltRequested(Exception):
    """The run must stop: a detector with the halt policy fired, or a person asked.

    `reason` says who and why, e.g. "detector grad_spike at step 31: ...".
    Checkpoint, then call run.finish() (it records the run as halted).
    `rewind` is None, or, when the detector's policy is rewind_skip, its plan: a dict with
    "restart_at_or_before" (reload the newest checkpoint at or before this step),
    "skip_batch_ids" (the batch ids logged with log(..., batch=) for the skipped steps: never
    train on them again), "skip_steps", "alert_step" and "max_rewinds" (after that many rewinds,
    stop for good; the loop counts them).
    """

    def __init__(self, reason, rewind=None):
        super().__init__(reason)
        self.reason = reason
        self.rewind = rewind


def _dist():
    """torch.distributed when it is initialised with more than one rank, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def _resume_flag(resume):
    """resume as W&B users write it: True or "allow" adds to a run of that name (or starts it),
    False or "never" refuses a name already used (hlat.RunExists)."""
    if resume in (True, False):
        return resume
    if resume in ("allow", "never"):
        return resume == "allow"
    raise ValueError(f"hlat.init: resume={resume!r}: use True (or \"allow\") or False (or \"never\")")


class Run:
    """One training run as hlat sees it. Create it with hlat.init()."""

    disabled = False

    def __init__(self, name, url=None, token=None, store=None, mode="online", dir=None, config=None,
                 precision=None, meta=None, detectors=None, resume=False, rank=None, world_size=None,
                 send_interval=None, timeout=10.0, sync_every=1, max_lag_steps=None, system_interval=None,
                 hlat_binary=None, main_rank=None):
        if not isinstance(name, str) or not name:
            raise ValueError(f"hlat.init: the run's name must be a non-empty string, not {name!r}")
        self.name = name
        dist = _dist()
        self.rank = rank if rank is not None else (dist.get_rank() if dist else int(os.environ.get("RANK", 0)))
        self.world_size = world_size if world_size is not None else (
            dist.get_world_size() if dist else int(os.environ.get("WORLD_SIZE", 1)))
        self.main_rank = int(main_rank if main_rank is not None else os.environ.get("HLAT_MAIN_RANK", 0))
        if not 0 <= self.main_rank < max(self.world_size, 1):
            raise ValueError(f"hlat.init: main_rank={self.main_rank} is not a rank of this job of {self.world_size}")
        self._rank_values = {}     # step -> {key: value} of this rank's, until should_stop's agreement
        self.sync_every = max(1, int(sync_every))
        self.max_lag_steps = max_lag_steps
        # One process stops at log(); in a job of several ranks one rank leaving alone would hang
        # the others in their next collective, so there only should_stop() (every rank) stops.
        self._raise_in_log = self.world_size == 1
        self._halt_reason = None   # set by the sender thread on rank 0
        self._halted = None        # the reason every rank agreed on
        self._rewind = None        # a rewind_skip halt's plan (the server's reply; every rank's after should_stop)
        self._last_step = 0
        self._next_step = 0        # log() without a step: W&B's counter
        self._queue = None  # rank 0: the sender's queue
        self._after = None  # what log() does after queueing: max_lag_steps's wait, or a halt's check
        self._closed = self._finishing = False
        self._stop_checked = self._halt_unheard_said = self._unwatched_said = False
        self._pid = os.getpid()    # a forked child (a DataLoader worker) must not end its parent's run
        self._dropped_keys = set()
        self.alerts = []           # alerts the server raised on this run's records
        self._sender = self._sampler = None
        precision = _meta.precision_name(precision)  # on every rank: a typo fails everywhere alike
        resume = _resume_flag(resume)
        if self.rank != self.main_rank:
            self.log = self._log_elsewhere
            return  # only the main rank talks to hlat; the others' numbers travel in should_stop's agreement
        self._open(name, url, token, store, mode, dir, config, precision, meta, detectors, resume,
                   send_interval, timeout, system_interval, hlat_binary)

    def _open(self, name, url, token, store, mode, dir, config, precision, meta, detectors, resume,
              send_interval, timeout, system_interval, hlat_binary):
        config = dict(config or {})
        if detectors is not None:
            config["detectors"] = detectors
        meta = {**_meta.captured(), **dict(meta or {})}  # the program's own meta wins
        meta.setdefault("world_size", self.world_size)
        interval = _system.interval_from(system_interval)
        if url and store:
            raise ValueError("hlat.init: give url= (a running hlat serve) or store= (a local store), not both")
        if send_interval is None:  # max_lag_steps: every step goes out at once, so its answer is back in time
            send_interval = PROMPT_SEND_INTERVAL_S if self.max_lag_steps is not None else SEND_INTERVAL_S
        transport = local = None
        if store:
            local = LocalStore(name, store, config, precision, meta, resume, hlat_binary)
        else:
            transport = HttpTransport(url or os.environ.get("HLAT_URL") or DEFAULT_URL,
                                      token if token is not None else os.environ.get("HLAT_TOKEN", ""), timeout)
        # "time": when it started (a run uploaded later by sync is dated by it where the server reads it).
        # "start_id" names this start in each retry of it: a start that timed out may have been taken,
        # and the server answers its retry without a second session or a "restart" event.
        start = {"config": config, "precision": precision, "meta": meta, "resume": resume,
                 "host": socket.gethostname(), "time": time.time(), "start_id": secrets.token_hex(8)}
        self._sender = Sender(self, transport, local, start, dir or _spool.default_dir(), mode == "offline",
                              send_interval)
        self._queue = self._sender.queue
        if self.max_lag_steps is not None:
            self._after = self._lagging
        self._sender.start(min(timeout, START_TIMEOUT_S))
        _ends.watch(self)
        if interval > 0:
            self._sampler = _system.Sampler(interval, self.record, lambda: self._last_step)

    @property
    def stats(self):
        """Counts of what was sent (batches, values), kept (spooled_lines), retried and dropped."""
        return self._sender.stats if self._sender else {}

    @property
    def spool_path(self):
        """The spool file this run writes (offline, or while the server did not answer) and that
        holds what the server still lacks; None when there is none (any more)."""
        spool = self._sender.spool if self._sender else None
        return spool.path if spool is not None and not spool.removed else None

    # -- the training thread ------------------------------------------------

    def log(self, values, step=None, batch=None, commit=None):
        """Queues values (numbers or 0-d tensors, NaN and inf kept) for `step`; without a step,
        at the step after the last one logged (the first: 0), as wandb.log counts (commit=False:
        the next log() without a step is at this step again).

        batch: what the step trained on, a string or a list of strings (one per rank or
        micro-batch; integers are sent as strings), e.g. a hash of the token ids or
        "shard3:offset12345": kept by the server as the step's batch record, and listed in a
        rewind_skip halt's plan (HaltRequested.rewind) when the step is skipped. At most 1024
        ids of 1 to 256 bytes.
        Never waits on the network and never does a collective (with max_lag_steps it may
        wait, at most 1 s, while the server is answering but behind). In a single process it
        raises HaltRequested once a halt is known; in a job of several ranks it does not (see
        should_stop). The step, the values and the batch ids are checked on the sender thread:
        what hlat cannot store is left out there, with a warning.
        """
        # The training thread's few microseconds. After a step the caches are cold and every
        # bytecode costs (a call that does nothing takes ~2 us there), so this is all there is:
        # other ranks, max_lag_steps and a halt come in through self.log and self._after.
        # The dict is copied: the caller may reuse or change it after log() returns.
        if step is None:
            step = self._next_step
        if commit is not False and type(step) is int:
            self._next_step = step + 1
        self._last_step = step
        self._queue.append((step, dict(values) if batch is None else with_batch(values, batch)))
        if self._after is not None:
            self._after(step)

    def _log_elsewhere(self, values, step=None, batch=None, commit=None):
        """log() on a rank that does not send the run's own values (only the main rank does): its
        numbers are this rank's (log_rank), and the step is should_stop()'s."""
        if step is None:
            step = self._next_step
        if commit is not False and type(step) is int:
            self._next_step = step + 1
        self._last_step = step
        self.log_rank(values, step)

    def log_rank(self, values, step):
        """Values of this rank at `step` (its step time, memory, data wait, the loss of its pipeline
        stage), on any rank: the main rank sends every rank's as one value per rank under
        "rank/<key>" (the page's per-rank charts; "rank/compute_s", seconds of compute, is the
        straggler detector's). Numbers and 0-d tensors; read at should_stop()'s agreement, which
        carries them (a collective then; never here), so a job that never calls should_stop()
        sends none of another rank's."""
        if self._closed:
            return
        mine = self._rank_values.setdefault(step, {})
        for key, value in values.items():
            if isinstance(key, str) and key and not key.startswith("rank/"):
                key = "rank/" + key
            mine[key] = value

    def record(self, values, step):
        """Queues values like log() without the halt check: for probes and threads. Every rank
        may call it; only rank 0's values are sent."""
        if self._queue is not None:
            self._queue.append((step, dict(values)))

    def _lagging(self, step):
        """After log() with max_lag_steps: waits while the server lags, then the halt check."""
        try:
            self._sender.wait_for_answers(int(step) - self.max_lag_steps - 1)
        except (TypeError, ValueError):  # a step that is no integer: the sender says so, nothing to wait for
            pass
        if self._halt_reason is not None:
            self._halt_in_log()

    def event(self, kind, detail, step):
        """Records an event (e.g. a replica_mismatch with the ranks and tensor)."""
        self.record({"event": kind, "detail": detail}, step)

    def alert(self, title, text="", level="warning", step=None):
        """An alert of the program's own, as wandb.alert: stored with kind "alert", message
        "TITLE: TEXT" and the level as its severity (info, warning or critical; "warn" and
        "error" are read as warning and critical), and routed like a detector's (log, page,
        webhook). At `step`, or the step of the last log()."""
        level = _meta.level_name(level)
        if not isinstance(title, str) or not title.strip():
            raise ValueError(f"run.alert: the title must be a non-empty string, not {title!r}")
        self.record({"alert": title, "text": str(text), "level": level}, self._last_step if step is None else step)

    def should_stop(self, step=None):
        """True once a halt is requested (a detector with the halt policy, or a person).

        With torch.distributed initialised and several ranks it is a collective: every rank
        calls it at the same steps, the ranks agree (one small broadcast from rank 0) at every
        step that is a multiple of sync_every, and all get the same answer:
            if run.should_stop(step): break      # on every rank, after run.log on rank 0
        """
        step = int(self._last_step if step is None else step)
        self._stop_checked = True
        if self._halted:
            return True
        reason = self._halt_reason
        dist = _dist()
        if dist is not None:
            if step % self.sync_every:
                return False
            reason = self._agree(dist, reason)
        if reason:
            self._halted = reason
        return bool(reason)

    def halt_reason(self):
        return self._halted

    def rewind_plan(self):
        """The plan of a rewind_skip halt once it is known (the dict HaltRequested.rewind holds:
        "restart_at_or_before", "skip_batch_ids", "skip_steps", "alert_step", "max_rewinds"), else
        None. On every rank once should_stop() has agreed on the halt. Over HTTP only: a store=
        run's halt has no plan (hlat ingest --follow logs it)."""
        return self._rewind

    def flush(self, timeout=30.0):
        """Waits until everything queued so far is with the server, or in the spool (rank 0)."""
        if self._sender is not None:
            self._sender.flush(timeout)

    def finish(self, status=None, detail="", timeout=30.0, exit_code=None, quiet=None):
        """Sends what is queued and ends the run: finished, or halted after a HaltRequested;
        crashed with exit_code other than 0 (wandb's finish). A W&B-style summary (run.summary)
        goes first, as a "summary" event.

        Calling it again does nothing, and so does calling it in a forked child (a raw
        os.fork() leaving a `with hlat.init(...)` block): the run is its parent's. When the
        server does not answer, what it lacks and the end go to the spool file, and the command
        that uploads them is printed. Raises TimeoutError, leaving the run open, when a server
        that answers has not taken the queue within `timeout` s.
        """
        if self._closed or self._finishing or self._forked():
            return
        if exit_code:
            status, detail = status or "crashed", detail or f"exit code {exit_code}"
        if getattr(self, "summary", None) and self._queue is not None:
            self.event("summary", json.dumps(self.summary, default=str), self._last_step)
        status = status or ("halted" if self._halted else "finished")
        self._finishing = True
        try:
            if self._sender is not None:
                self._stop_sampler()
                self._sender.flush(timeout)
                self._closed = True
                self._sender.close(status, self._end_step(), (detail or self._halted or "")[:2000])
        finally:
            self._finishing = False
        self._closed = True
        _ends.forget(self)

    def _end_dying(self, status, detail, flush_s=DYING_FLUSH_S):
        """Ends the run from a process on its way out (uncaught exception, SIGTERM, exit): every
        wait bounded, nothing raised; what is unsent goes to the spool."""
        if self._closed or self._finishing or self._forked():
            return
        self._finishing = True
        try:
            if self._sender is not None:
                self._stop_sampler()
                try:
                    self._sender.flush(flush_s)
                except TimeoutError:
                    detail = f"{detail} ({len(self._queue)} records unsent after {flush_s:g} s)".strip()
                self._sender.close(status, self._end_step(), detail[:2000], join_s=0.5, request_s=DYING_REQUEST_S)
        except Exception as e:  # the process is dying of something else: say this, do not mask that
            print(f"hlat: could not record run {self.name!r} as {status}: {e}", file=sys.stderr)
        finally:
            self._finishing = False
            self._closed = True
            _ends.forget(self)

    def _forked(self):
        """Whether this is a forked child of the process that called init (a DataLoader worker, a
        raw os.fork()): it shares the run's objects but not its sender thread, and ending the run
        from there would end the parent's."""
        return self._pid != os.getpid()

    def _end_step(self):
        """The step the run's end is recorded at: the last one logged (0 if it was no step)."""
        try:
            return min(max(int(self._last_step), 0), MAX_STEP)
        except Exception:
            return 0

    def _stop_sampler(self):
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler = None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None or issubclass(kind, HaltRequested):
            self.finish()
        elif issubclass(kind, KeyboardInterrupt):
            self.finish("stopped", detail="KeyboardInterrupt (Ctrl-C)")
        else:
            self.finish("crashed", detail=_ends.describe(kind, value))
        return False

    # -- halts -------------------------------------------------------------

    def _halt_in_log(self, step=None):
        if self._raise_in_log:
            self._halted = self._halt_reason
            raise HaltRequested(self._halted, self._rewind)
        if not self._stop_checked and not self._halt_unheard_said:
            self._halt_unheard_said = True
            _log.warning("hlat: halt requested (%s), but this job has %d ranks and run.should_stop(step) was never "
                         "called: log() does not stop a job of several ranks by itself (one rank leaving would hang "
                         "the others); add `if run.should_stop(step): break` on every rank",
                         self._halt_reason, self.world_size)

    def _agree(self, dist, reason):
        """The main rank knows whether to halt; every rank learns at the same step (one small
        all_gather: the flag and how many bytes of per-rank values each rank holds), with the
        reason a rewind_skip halt's plan. When some rank logged values of its own, a second
        all_gather brings them all to the main rank, which sends them."""
        import torch
        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        payload = self._rank_payload()
        flag = 1 if reason and self.rank == self.main_rank else 0
        headers = [torch.zeros(2, dtype=torch.int64, device=device) for _ in range(self.world_size)]
        dist.all_gather(headers, torch.tensor([flag, len(payload)], dtype=torch.int64, device=device))
        headers = [h.tolist() for h in headers]
        longest = max(n for _, n in headers)
        if longest:
            mine = torch.zeros(longest, dtype=torch.uint8, device=device)
            if payload:
                mine[:len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(device)
            parts = [torch.empty(longest, dtype=torch.uint8, device=device) for _ in range(self.world_size)]
            dist.all_gather(parts, mine)
            if self.rank == self.main_rank:
                self._queue_rank_values([bytes(p[:n].cpu().tolist()) for p, (_, n) in zip(parts, headers)])
        if not headers[self.main_rank][0]:
            return None
        box = [(reason, self._rewind)]
        dist.broadcast_object_list(box, src=self.main_rank)
        reason, self._rewind = box[0]
        return reason

    def _rank_payload(self):
        """This rank's values since the last agreement, as JSON bytes ({step: {key: number}})."""
        if not self._rank_values:
            return b""
        out = {}
        for step, values in self._rank_values.items():
            numbers = {}
            for key, value in values.items():
                try:
                    numbers[key] = float(value)
                except (TypeError, ValueError, RuntimeError):
                    pass  # a vector or text: not a per-rank number
            out[str(step)] = numbers
        self._rank_values = {}
        return json.dumps(out).encode()

    def _queue_rank_values(self, payloads):
        """Every rank's values, by step and key: one value per rank (NaN: that rank had none)."""
        steps = {}
        for rank, payload in enumerate(payloads):
            if not payload:
                continue
            for step, values in json.loads(payload).items():
                for key, value in values.items():
                    steps.setdefault(int(step), {}).setdefault(key, [float("nan")] * self.world_size)[rank] = value
        for step in sorted(steps):
            self.record(steps[step], step)

    # -- called by the sender thread ---------------------------------------

    def _drop(self, key, step, why):
        """A value left out of what is sent: counted, and said once for each key (for the first 20 keys)."""
        self.stats["dropped_values"] += 1
        if len(self._dropped_keys) > 20 or key in self._dropped_keys:
            return
        self._dropped_keys.add(key)
        if len(self._dropped_keys) > 20:
            _log.warning("hlat: values of more keys are not stored; the others are no longer named")
            return
        if isinstance(key, str) and key.startswith("step "):
            _log.warning("hlat: %s is not stored: %s (said once)", key, why)
        else:
            _log.warning("hlat: %s at step %s is not stored: %s (the rest of the step is; said once for this key)",
                         short(key), step, why)

    def _take_reply(self, reply):
        for alert in reply.get("alerts", []):
            self.alerts.append(alert)
            self.stats["alerts"] += 1
            if alert.get("severity") == "info":  # a note (a one-step loss outlier): kept in run.alerts, logged quietly
                _log.info("hlat: note %s at step %s: %s", alert.get("kind"), alert.get("step"), alert.get("message"))
                continue
            print(f"hlat: ALERT {alert.get('kind')} at step {alert.get('step')}: {alert.get('message')}",
                  file=sys.stderr)
        unwatched = reply.get("unwatched")
        if unwatched and not self._unwatched_said:  # e.g. keys no detector reads: said once per run
            self._unwatched_said = True
            _log.warning("hlat: %s", unwatched)
        if reply.get("state") == "halt" and self._halt_reason is None:
            halt = reply.get("halt") or {}
            self._halted_by(halt.get("reason", "halt requested"), halt.get("rewind"))

    def _halted_by(self, reason, rewind=None):
        """A halt from the server (or store='s follower): log() checks from now on."""
        if self._halt_reason is None:
            self._rewind = rewind if isinstance(rewind, dict) else None  # set before the reason log() reads
            self._halt_reason = reason
            if self._after is None:
                self._after = self._halt_in_log


class DisabledRun:
    """HLAT_MODE=disabled: a run whose methods do nothing (and cost next to nothing), so a
    script keeps its hlat lines and runs without a server, a spool or any thread."""

    disabled = True
    alerts = []
    spool_path = None

    def __init__(self, name, rank=0, world_size=1):
        self.name, self.rank, self.world_size, self.main_rank = name, rank, world_size, 0
        self.stats = {}

    def log(self, values, step=None, batch=None, commit=None):
        pass

    def record(self, values, step):
        pass

    def log_rank(self, values, step):
        pass

    def event(self, kind, detail, step):
        pass

    def alert(self, title, text="", level="warning", step=None):
        _meta.level_name(level)  # a wrong level is the same error in every mode

    def should_stop(self, step=None):
        return False

    def halt_reason(self):
        return None

    def rewind_plan(self):
        return None

    def flush(self, timeout=30.0):
        pass

    def finish(self, status=None, detail="", timeout=30.0, exit_code=None, quiet=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return False


def init(name=None, url=None, token=None, store=None, config=None, precision=None, meta=None, detectors=None,
         resume=False, rank=None, world_size=None, mode=None, dir=None, **options):
    """Starts (or with resume=True continues) a run; call it on every rank, after
    torch.distributed.init_process_group.

    mode: "online" (default), "offline" (records go to a spool file only, for
    `python3 -m hlat sync`) or "disabled" (a run that does nothing); default $HLAT_MODE.
    url/token: a running `hlat serve` (defaults: $HLAT_URL or http://127.0.0.1:8080, $HLAT_TOKEN);
    a server that does not answer is tried again in the background while records wait in the
    spool, and so is one whose reply is not hlat serve's documented JSON (a proxy's login
    redirect or page: said once, naming what came back). dir: the spool folder ($HLAT_DIR, else
    ./hlat-spool).
    store: a local store file instead, written through `hlat ingest --follow`.
    config: the run's config (shown in the page and `hlat compare`); detectors: its detector
    settings, as the "detectors" section of an hlat config (e.g. {"grad_spike": {"policy": "halt"}}).
    precision: fp32, bf16, bf16_sr, bf16_kahan or mixed (PyTorch's names such as "float32",
    torch.bfloat16 or "bf16-mixed" are read as these); meta: what hlat cannot know by itself
    (bytes_per_param, seed, ...), beside what init records (git revision, command line, host,
    Python and torch versions, pid). resume: True/"allow" adds to a run of that name; False
    raises hlat.RunExists when the server has one.
    rank/world_size: default to torch.distributed's, or $RANK/$WORLD_SIZE.
    options: send_interval (s to gather a step's logs, default 0.02; 0 with max_lag_steps),
    timeout (s: a request to the server whole, connect, send and the full reply; init waits at
    most 5 s of it for the start), sync_every (steps between should_stop's agreements across ranks,
    default 1), max_lag_steps (log() waits, at most 1 s, while the server answers but has not
    answered step - max_lag_steps - 1: a bound on how late a halt arrives; default None),
    system_interval (s between system metrics samples, default $HLAT_SYSTEM_INTERVAL or 10;
    0 turns them off), hlat_binary (for store=), main_rank (the rank that sends the run's own
    values, default $HLAT_MAIN_RANK or 0).
    W&B's init: project= (kept in meta; the name's default is PROJECT-DATE-TIME), id= (the
    name when none is given), resume="must"/"auto", $WANDB_MODE when $HLAT_MODE is not set;
    its other keywords are accepted and said once. The run is then the module's current one
    (hlat.log, hlat.config, hlat.summary, hlat.finish: docs/trainers/wandb.md).
    """
    name, meta = _wandb.init_arguments(name, options, meta)
    mode = _wandb.mode_of(mode, os.environ)
    resume = _wandb.resume_of(resume)
    if mode not in MODES:
        raise ValueError(f"hlat.init: mode (or HLAT_MODE) {mode!r} is not one of {', '.join(MODES)}")
    if mode == "disabled":
        _meta.precision_name(precision)
        dist = _dist()
        run = DisabledRun(name, rank if rank is not None else (dist.get_rank() if dist else 0),
                          world_size if world_size is not None else (dist.get_world_size() if dist else 1))
        return _wandb.attach(run, config)
    if mode == "offline" and store:
        raise ValueError("hlat.init: store= writes a local store already; offline mode is for a server's run")
    run = Run(name, url=url, token=token, store=store, mode=mode, dir=dir, config=config, precision=precision,
              meta=meta, detectors=detectors, resume=resume, rank=rank, world_size=world_size, **options)
    return _wandb.attach(run, config)
