"""The sender thread: moves a run's records from the queue to `hlat serve`, or to the spool file
while it cannot, and sends the spool first once the server answers again.

Records are encoded once (records.to_lines); the lines then go to the server or to the spool,
never both on purpose. Order is kept: while the spool holds lines the server has not
acknowledged, the queue waits behind them. What the server refuses (400, 413) is dropped one line
at a time (http.post_lines); what it cannot take now (unreachable, 5xx, a reply that is not
hlat serve's, such as a proxy's login redirect) is kept.
"""
import collections
import itertools
import json
import logging
import sys
import threading
import time

from . import _spool
from ._http import BadReply, RunExists, quote, post_lines, unreachable
from ._records import MAX_BATCH_STEPS, to_lines

_log = logging.getLogger("hlat")
MAX_BACKOFF_S = 5.0   # a server back after an outage hears from the run within this
LAG_WAIT_S = 1.0      # the longest one log() waits for answers under max_lag_steps


class Sender:
    def __init__(self, run, transport, local, start_body, spool_dir, offline, send_interval):
        self.run, self.name, self.transport, self.local = run, run.name, transport, local
        self.url = transport.url if transport else None
        self.start_body, self.spool_dir, self.send_interval = start_body, spool_dir, send_interval
        self.queue = collections.deque()   # (step, values), appended by the training thread
        self.hurry = threading.Event()     # flush or close: stop waiting between tries
        self.lock = threading.Lock()       # held while queue head or spool change hands; never during I/O
        self.inflight = False              # a batch taken from the queue is on its way
        self.closed = self.abandoned = False
        self.started = local is not None   # the server has the run (its start was answered)
        self.maybe_started = False         # an unanswered start may have reached it: retry with resume
        self.connected = self.started
        self.offline = offline
        self.local_only = "offline (HLAT_MODE=offline)" if offline else None  # why records go to the spool only
        self.spool = None
        self.spool_error = None            # why the spool cannot be written, once it could not
        self.answered = self.spilled_top = self.top_step = -1
        self.failures = 0
        self.outage_said = False
        self.stats = {"batches": 0, "values": 0, "retries": 0, "alerts": 0, "dropped_values": 0,
                      "dropped_lines": 0, "spooled_lines": 0}
        if offline and not self._open_spool():
            raise OSError(f"hlat.init: offline, and the spool cannot be written in {spool_dir}: {self.spool_error}")
        self.thread = threading.Thread(target=self._loop, name="hlat-sender", daemon=True)

    # -- the training thread's side ------------------------------------------------------

    def start(self, timeout):
        """Tells the server the run starts, on the caller's thread, then starts the thread. A
        server that refuses (a name taken, a wrong token, a bad config) raises; one that does
        not answer is said once and tried again in the background."""
        if not self.started and not self.local_only:
            self._try_start(timeout, raise_refusal=True)
        self.thread.start()

    def wait_for_answers(self, step):
        """max_lag_steps: while the server answers, waits (at most LAG_WAIT_S) until it has
        answered every step <= `step`; never while it is unreachable."""
        if self.answered >= step or not self.connected:
            return
        deadline = time.monotonic() + LAG_WAIT_S
        while (self.answered < step and self.connected and (self.queue or self.inflight) and not self.closed
               and time.monotonic() < deadline):
            time.sleep(0.0002)

    def flush(self, timeout):
        """Waits until every record queued so far is with the server or in the spool."""
        deadline = time.monotonic() + timeout
        self._wake_up()
        while (self.queue or self.inflight) and time.monotonic() < deadline and self.thread.is_alive():
            time.sleep(0.002)
        if self.queue:
            raise TimeoutError(f"hlat: {len(self.queue)} records still unsent after {timeout} s")

    # -- the thread ----------------------------------------------------------------------

    def _wake_up(self):
        self.hurry.set()

    def _wait(self):
        """send_interval s. log() never wakes the thread: waking a thread from the training
        thread costs it a context switch (measured: 40 us a call in a 6 ms loop on 2 busy
        cores), where a thread that looks by itself costs it nothing."""
        if not self.hurry.is_set():
            time.sleep(self.send_interval)
        if self.hurry.is_set() and not self.closed:
            self.hurry.clear()

    def _loop(self):
        while True:
            self._wait()
            while not self.abandoned and self._has_work():
                try:
                    answered = self._pump()
                except Exception as e:  # a bug here must not take the training process down
                    _log.exception("hlat: the sender failed: %s", e)
                    answered = False
                if not answered:
                    self._backoff()
                    break
            if self.local is not None and self.local.halt_reason():
                self.run._halted_by(self.local.halt_reason())
            if self.closed:
                return

    def _has_work(self):
        return bool(self.queue) or (self.spool is not None and self.spool.unsent() and not self.local_only)

    def _pump(self):
        """Moves the next piece on; False when the server did not answer (wait, then try again)."""
        if self.local is not None:
            return self._send_queue()
        if self.local_only or not self.connected:
            with self.lock:  # safe on disk first: a retry may take the HTTP timeout
                if not self.abandoned:
                    self._spill()
            if self.local_only:
                return self.spool_error is None  # a spool that cannot be written: wait, do not spin
        if not self.started and not self._try_start(self.transport.timeout):
            return False
        if self.local_only:
            return self.spool_error is None
        if self.spool is not None and self.spool.unsent():
            return self._drain_spool()
        return self._send_queue()

    def _send_queue(self):
        with self.lock:
            if self.abandoned or not self.queue:
                return True
            items = list(itertools.islice(self.queue, MAX_BATCH_STEPS))  # popped once sent or spooled
            self.inflight = True
        lines = None
        try:
            text, values, dropped, top = to_lines(items)
            self.top_step = max(self.top_step, top)
            for key, step, why in dropped:
                self.run._drop(key, step, why)
            lines = [line.encode() for line in text]
            if self.local is not None:
                self.local.write(b"".join(lines))
            else:
                post_lines(self.transport, self.name, lines, self._reply, self._refused)
        except Exception as e:
            return self._failed(e, items, lines)
        with self.lock:
            if not self.abandoned:
                for _ in items:
                    self.queue.popleft()
            self.inflight = False
        self._answered(top)
        self.stats["batches"] += 1
        if self.local is not None:
            self.stats["values"] += values
        return True

    def _failed(self, error, items, lines):
        """A batch from the queue did not reach the server: to the spool (kept), or for a
        store= follower, retried."""
        with self.lock:
            self.inflight = False
            if self.abandoned:
                return True
            if lines is None or self.local is not None:
                if lines is None:  # not even encoded: a bug, said with its traceback; never retried
                    _log.error("hlat: %d records could not be encoded and are dropped", len(items), exc_info=error)
                    for _ in items:
                        self.queue.popleft()
                    return True
                self.stats["retries"] += 1
                print(f"hlat: writing for hlat ingest --follow failed ({error}); retrying", file=sys.stderr)
                return False
            text, _, _, top = to_lines(items, time.time())  # dated; the drops were said already
            if self._to_spool(text, top):  # else they stay queued, for the next try
                for _ in items:
                    self.queue.popleft()
        if unreachable(error):
            self._lost(error)
            return False
        self._go_local(f"{self.url} refused the run's records ({error})")
        return True

    def _drain_spool(self):
        lines, offset = self.spool.read_unsent(MAX_BATCH_STEPS)
        try:
            post_lines(self.transport, self.name, lines, self._reply, self._refused)
        except Exception as e:
            if unreachable(e):
                self._lost(e)
                return False
            self._go_local(f"{self.url} refused the run's records ({e})")
            return True
        with self.lock:
            if not self.abandoned:
                self.spool.mark_sent(offset, len(lines), self.name)
                self.stats["batches"] += 1
        if not self.spool.unsent():
            self._answered(self.spilled_top)
        else:
            self._answered(-1)  # connected again
        return True

    def _try_start(self, timeout, raise_refusal=False):
        body = dict(self.start_body, resume=bool(self.start_body["resume"] or self.maybe_started))
        transport = self.transport if timeout == self.transport.timeout else self.transport.another(timeout)
        try:
            transport.request("POST", f"/api/v1/runs/{quote(self.name)}/start", json.dumps(body).encode())
        except Exception as e:
            if unreachable(e):
                self.maybe_started |= not isinstance(e, ConnectionRefusedError)
                self._lost(e)
                return False
            if raise_refusal:
                raise
            hint = ("pass resume=True to add to it, or another name" if isinstance(e, RunExists) else str(e))
            self._go_local(f"{self.url} refused to start run {self.name!r} ({e.message}; {hint})")
            return True
        finally:
            if transport is not self.transport:
                transport.close()
        self.started = True
        if self.spool is not None:
            self.spool.save_started(self.name)
        self._answered(-1)
        return True

    # -- outages -------------------------------------------------------------------------

    def _answered(self, step):
        self.answered = max(self.answered, step)
        self.connected = True
        self.failures = 0
        if self.outage_said:
            self.outage_said = False
            _log.warning("hlat: %s answers again; sending the records kept in %s", self.url,
                         self.spool.path if self.spool is not None else "memory")

    def _lost(self, error):
        self.connected = False
        self.failures += 1
        self.stats["retries"] += 1
        if not self.outage_said:
            self.outage_said = True
            with self.lock:
                where = self.spool.path if self._open_spool() else "memory"
            # A reply that is not hlat serve's (a proxy's login redirect, a page) is said as what it is:
            # the server may be up, and the user must change the URL or the proxy, not wait.
            how = f"does not answer as hlat serve does ({error.message})" if isinstance(error, BadReply) else \
                f"does not answer ({type(error).__name__}: {error})"
            _log.warning("hlat: %s %s; the run goes on, its records are kept in %s and sent when it answers",
                         self.url, how, where)

    def _go_local(self, reason):
        with self.lock:
            where = self.spool.path if self._open_spool() else None
            self.local_only = reason
        _log.warning("hlat: %s; the run's records go to %s (upload them with: python3 -m hlat sync %s)",
                     reason, where or "memory, as the spool cannot be written", where or "")

    def _backoff(self):
        """Waits before the next try (a flush or close cuts it short; log() does not)."""
        if self.hurry.wait(min(MAX_BACKOFF_S, 0.1 * 2 ** min(self.failures, 6))) and not self.closed:
            self.hurry.clear()

    def _open_spool(self):
        """Whether there is a spool file; one that cannot be made (a folder not writable, a
        full disk) is said once, and the records wait in memory for the server instead."""
        if self.spool is None:
            try:
                self.spool = _spool.Spool(_spool.new_path(self.spool_dir, self.name), self.name, self.url,
                                          self.start_body, "offline" if self.offline else "online")
                if self.started:
                    self.spool.save_started(self.name)
            except OSError as e:
                self._spool_failed(e)
        return self.spool is not None and self.spool_error is None

    def _spool_failed(self, error):
        if self.spool_error is None:
            self.spool_error = str(error)
            _log.warning("hlat: the spool cannot be written (%s); records wait in memory until the server takes "
                         "them", error)

    def _to_spool(self, lines, top):
        """Appends lines to the spool; False when it cannot (the caller keeps the records)."""
        if not self._open_spool():
            return False
        try:
            self.spool.append(lines)
        except OSError as e:
            self._spool_failed(e)
            return False
        self.spilled_top = max(self.spilled_top, top)
        self.stats["spooled_lines"] += len(lines)
        return True

    def _spill(self):
        """Everything queued to the spool (the lock held); left queued when it cannot be written."""
        if not self.queue or self.spool_error is not None:
            return
        items = list(self.queue)
        text, _, dropped, top = to_lines(items, time.time())
        if not self._to_spool(text, top):
            return
        for _ in items:
            self.queue.popleft()
        for key, step, why in dropped:
            self.run._drop(key, step, why)
        self.top_step = max(self.top_step, top)

    # -- replies -------------------------------------------------------------------------

    def _reply(self, reply):
        self.stats["values"] += reply.get("values", 0)
        self.run._take_reply(reply)

    def _refused(self, line, error):
        # The server says this line cannot be stored: sending it again cannot help, and holding
        # it would hold every later step. Said, counted, dropped.
        self.stats["dropped_lines"] += 1
        print(f"hlat: the server refused a line and it is dropped ({error}): {line[:200]!r}", file=sys.stderr)

    # -- the end -------------------------------------------------------------------------

    def close(self, status, step, detail, join_s=5.0, request_s=None):
        """Stops the thread and ends the run: on the server when it has everything (or answers
        at all), and in the spool, with the command that uploads it, when it does not."""
        self.closed = True
        self._wake_up()
        self.thread.join(timeout=join_s)
        with self.lock:
            self.abandoned = True  # the thread, if still in a request, touches nothing any more
            if self.local is not None:
                return self.local.close(status, max(self.top_step, 0), detail)
            self._spill()
        reported = self._report_end(status, step, detail, request_s) if self.started and not self.local_only \
            else False
        if reported and (self.spool is None or not self.spool.unsent()):
            if self.spool is not None:
                self.spool.remove()
            return
        with self.lock:
            if not self._open_spool():
                print(f"hlat: run {self.name!r}: {len(self.queue)} records and the run's end could not be sent to "
                      f"{self.url} nor written to a spool ({self.spool_error}); they are lost", file=sys.stderr)
                return
            try:
                self.spool.end(status, step, detail)
            except OSError as e:
                print(f"hlat: run {self.name!r}: its end could not be written to {self.spool.path} ({e})",
                      file=sys.stderr)
        self._say_sync(reported)

    def _report_end(self, status, step, detail, request_s):
        transport = self.transport
        if request_s is not None or self.thread.is_alive():  # the thread may still hold the connection
            transport = self.transport.another(request_s or self.transport.timeout)
        body = json.dumps({"status": status, "step": step, "detail": detail}).encode()
        try:
            transport.request("POST", f"/api/v1/runs/{quote(self.name)}/finish", body)
            return True
        except Exception as e:
            print(f"hlat: could not record run {self.name!r} as {status} on {self.url}: {e}", file=sys.stderr)
            return False
        finally:
            transport.close()
            self.transport.close()

    def _say_sync(self, reported):
        spool = self.spool
        unsent = spool.lines - spool.lines_sent
        what = f"{unsent} record lines{' and its end' if not reported else ''}"
        why = "ran offline" if self.offline else f"could not send {what} to {self.url}"
        print(f"hlat: run {self.name!r} {why}; {what} are kept in {spool.path}\n"
              f"hlat: upload them with:  python3 -m hlat sync {spool.path}", file=sys.stderr)
