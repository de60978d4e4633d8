#!/usr/bin/env python3
"""Fuzzes the Python client's reading of hlat serve's replies (python/hlat/_http.py: framing,
status, headers, chunks, the documented JSON) and what the sender does with an ingest reply
(Sender._reply, Run._take_reply: alerts, halts, the unwatched sentence).

Each input is the bytes a server sends back. The client's own HttpTransport reads them from an
in-memory socket that hands them over in pieces of random sizes (a byte at a time, a few, all)
and then ends the stream, for one of start, ingest, finish or state, and a second request on
the same connection when the first kept it. An input passes when every request returns the
documented JSON object or raises ServerError (BadReply among them) or OSError, the errors
python/hlat documents, within 2 s (a hang or a quadratic read is a failure too). Anything else
(ValueError, RecursionError, KeyError, ...) is a crash: its input is saved and the run stops.

Standard library only (atheris is not installed here): mutations of a seed corpus of real
replies (fuzz/corpus/client_reply, captured from hlat serve, and proxies' pages and redirects)
and past crashes (fuzz/regressions/client_reply), which are replayed first. An input that
reaches a pair of lines of the client not reached before (sys.settrace over python/hlat) joins
the corpus, as libFuzzer keeps what reaches new edges. The seed of the random choices is
printed (SEED=N in the environment makes the same mutations again), and each input's own hash
decides its endpoint and read sizes, so a saved crash replays alone:
python3 fuzz/client_reply.py 0 WORK CRASH_FILE.

usage: python3 fuzz/client_reply.py SECONDS [WORK_DIR] [INPUT...]
Prints one line as fuzz/run.sh does for the libFuzzer targets:
    fuzz client_reply: N executions in S s, cov E edges, corpus C, crashes K
and exits 1 on a crash, its input left in WORK_DIR/crashes/client_reply-SHA1 (add it to
fuzz/regressions/client_reply with the fix).
"""
import contextlib
import hashlib
import io
import json
import logging
import os
import random
import re
import signal
import sys
import time
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "python")))

from hlat import _http, _sender, client  # noqa: E402

TARGET = "client_reply"
HANG_S = 2.0       # an input in memory is read in microseconds: 2 s is a hang or a quadratic read
MAX_LEN = 1 << 18  # inputs grow to 256 KB, as fuzz/run.sh's libFuzzer targets do
TIMEOUT_S = 5.0
HLAT_DIR = os.path.dirname(_http.__file__)  # as the code objects name their files (sys.path above is normalised)
ENDPOINTS = ("start", "ingest", "finish", "state")
LINES = [b'{"step": 0, "loss": 1.0}\n', b'{"step": 1, "loss": 0.9}\n']
TOKENS = [b"\r\n", b"\n", b"\r\n\r\n", b"HTTP/1.1 ", b"HTTP/1.0 ", b"100 Continue\r\n\r\n", b"Content-Length: ",
          b"Transfer-Encoding: chunked\r\n", b"Connection: close\r\n", b"Connection: keep-alive\r\n",
          b"Location: ", b"0\r\n\r\n", b";ext=1", b" ", b"\t", b":", b"{", b"}", b"[", b"]", b'"', b",",
          b'"state"', b'"alerts"', b'"halt"', b'"reason"', b'"rewind"', b'"values"', b'"unwatched"',
          b'"error"', b"null", b"true", b"NaN", b"1e999", b'"\\ud800"', b"\xff", b"\xc3", b"\x00", b"-"]
NUMBERS = [b"0", b"1", b"-1", b"00", b"+1", b" 1", b"1_0", b"0x10", b"1e3", b"", b"ffffffffffffffff",
           b"f" * 17, b"18446744073709551616", b"99999999999999999999", b"67108864", b"67108865", b"9" * 400]
STATUSES = [b"100", b"101", b"102", b"103", b"199", b"200", b"201", b"202", b"204", b"206", b"301", b"302",
            b"304", b"307", b"400", b"401", b"404", b"409", b"410", b"413", b"500", b"502", b"503", b"599",
            b"600", b"000", b"999", b"20", b"2000"]


class Hang(BaseException):
    """Raised by SIGALRM in an input that runs past HANG_S; a BaseException, so that no
    `except Exception` in the client can swallow it."""


class MemorySocket:
    """A socket that returns `data` in pieces of sizes `rng` picks, then the end of the stream;
    checks that every timeout the client sets is a part of its request's timeout."""

    def __init__(self, data, rng):
        self.data, self.rng, self.pos = data, rng, 0
        # A byte a read finds what a line split across reads breaks; on a long input it only costs time.
        styles = ("whole", "random") + (("small",) if len(data) < 16384 else ()) + (("bytes",) if len(data) < 4096 else ())
        self.style = rng.choice(styles)

    def settimeout(self, t):
        if t is not None and not 0 < t <= TIMEOUT_S:
            raise AssertionError(f"a socket timeout of {t!r} s, not within the request's {TIMEOUT_S} s")

    def setsockopt(self, *args):
        pass

    def sendall(self, data):
        pass

    def recv(self, n):
        size = {"whole": n, "bytes": 1, "small": self.rng.randint(1, 64), "random": self.rng.randint(1, n)}[self.style]
        piece = self.data[self.pos:self.pos + min(size, n)]
        self.pos += len(piece)
        return piece

    def close(self):
        pass


class MemoryTransport(_http.HttpTransport):
    """The client's transport with its connection made in memory: each connection (the first,
    and a reconnection after a kept-alive one ended) reads the input from its start."""

    def __init__(self, data, rng):
        super().__init__("http://127.0.0.1:9", "t" * 16, TIMEOUT_S)
        self.data, self.rng = data, rng

    def _connect(self, deadline):
        _http._left(deadline, self.timeout)
        self.sock = MemorySocket(self.data, self.rng)


def sender_stub():
    """A Sender and its Run with just what Sender._reply and Run._take_reply use."""
    run = client.Run.__new__(client.Run)
    run.alerts, run._unwatched_said, run._after, run._rewind, run._halt_reason = [], False, None, None, None
    stats = {"alerts": 0, "values": 0}
    run._sender = types.SimpleNamespace(stats=stats)
    return types.SimpleNamespace(stats=stats, run=run)


def execute(data):
    """One input through the client; raises AssertionError (or whatever the client raised that
    it must not) when it breaks a rule, Hang when it runs past HANG_S."""
    rng = random.Random(hashlib.sha1(data).digest())
    transport = MemoryTransport(data, rng)
    for _ in range(2):  # a second request on the connection the first kept open
        endpoint = rng.choice(ENDPOINTS)
        try:
            if endpoint == "ingest":
                sender = sender_stub()
                _http.post_lines(transport, "r", LINES, lambda reply: _sender.Sender._reply(sender, reply),
                                 lambda line, error: check_refusal(error))
                reason = sender.run._halt_reason
                if reason is not None and not isinstance(reason, str):
                    raise AssertionError(f"a halt reason {reason!r} that finish() cannot cut to 2,000 characters")
            else:
                payload = transport.request("POST", f"/api/v1/runs/r/{endpoint}", b"{}")
                if not isinstance(payload, dict):
                    raise AssertionError(f"a reply of {type(payload).__name__} returned, not a JSON object")
        except _http.ServerError as e:
            check_error(e)
            return
        except OSError:
            return
        if transport.sock is None:
            return


def check_error(e):
    if not isinstance(e.status, int) or not isinstance(e.message, str) or not isinstance(str(e), str):
        raise AssertionError(f"a ServerError without its status and message: {e!r}")
    if isinstance(e, _http.BadReply) and not _http.unreachable(e):
        raise AssertionError(f"{e!r}: a reply that is not hlat serve's must count as not delivered")


def check_refusal(error):
    if isinstance(error, _http.BadReply) or error.status not in (400, 413):
        raise AssertionError(f"a line dropped for {error!r}: only hlat serve's own 400 and 413 drop lines")


def mutate(data, corpus, rng):
    for _ in range(rng.choice((1, 1, 2, 3, 5))):
        data = rng.choice(MUTATIONS)(data, corpus, rng)[:MAX_LEN]  # cut at each step: repeats multiply
    return data


def _at(data, rng):
    return rng.randint(0, len(data))


def truncate(data, corpus, rng):
    return data[:_at(data, rng)]


def flip(data, corpus, rng):
    if not data:
        return data
    i = rng.randrange(len(data))
    return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:]


def set_byte(data, corpus, rng):
    if not data:
        return data
    i = rng.randrange(len(data))
    return data[:i] + bytes([rng.choice(b"\x00\xff\r\n :;0f-\"{[" + bytes([rng.randrange(256)]))]) + data[i + 1:]


def erase(data, corpus, rng):
    i = _at(data, rng)
    return data[:i] + data[i + rng.randint(1, 64):]


def duplicate(data, corpus, rng):
    """A span repeated: a header or an interim reply many times, a "[" thousands deep."""
    i, j = sorted((_at(data, rng), _at(data, rng)))
    times = min(rng.choice((1, 2, 50, 2000)), MAX_LEN // max(1, j - i))
    return data[:j] + data[i:j] * times + data[j:]


def insert_token(data, corpus, rng):
    i = _at(data, rng)
    return data[:i] + rng.choice(TOKENS) + data[i:]


def renumber(data, corpus, rng):
    """A number (a length, a chunk size, a status, a JSON value) made another: 0, -1, 2^64, ..."""
    spans = [m.span() for m in re.finditer(rb"[0-9A-Fa-f]+", data)]
    if not spans:
        return data
    i, j = rng.choice(spans)
    return data[:i] + rng.choice(NUMBERS + [str(rng.randrange(1 << rng.choice((4, 16, 32)))).encode()]) + data[j:]


def restatus(data, corpus, rng):
    return re.sub(rb"^HTTP/1\.[01] \d*", b"HTTP/1.1 " + rng.choice(STATUSES), data, count=1)


def splice(data, corpus, rng):
    other = rng.choice(corpus)
    return data[:_at(data, rng)] + other[_at(other, rng):]


def rechunk(data, corpus, rng):
    """The body re-framed as chunks of random sizes, some with extensions, some sizes wrong."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return data
    head = re.sub(rb"(?im)^(content-length|transfer-encoding):[^\r\n]*\r\n?", b"", head + b"\r\n").rstrip(b"\r\n")
    out, i = [], 0
    while i < len(body):
        n = rng.randint(1, max(1, len(body) - i))
        size = b"%x" % n if rng.random() < 0.9 else rng.choice(NUMBERS)
        out.append(size + (b";x=y" if rng.random() < 0.1 else b"") + b"\r\n" + body[i:i + n] + b"\r\n")
        i += n
    return head + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(out) + b"0\r\n\r\n"


JSON_VALUES = [None, True, 7, -1, 2 ** 70, 1.5, float("nan"), "", "x" * 5000, "\ud800", [], {}, ["boom"], [{}],
               {"reason": 3}, {"reason": "r", "rewind": 5}, [[[[[]]]]], "running", "halt", "info"]
JSON_KEYS = ["state", "alerts", "halt", "values", "unwatched", "error", "run", "resumed"]


def _replace_somewhere(doc, rng):
    """`doc` with one value, at any depth, replaced by one of JSON_VALUES."""
    if isinstance(doc, dict) and doc and rng.random() < 0.7:
        key = rng.choice(list(doc))
        doc[key] = _replace_somewhere(doc[key], rng)
        return doc
    if isinstance(doc, list) and doc and rng.random() < 0.7:
        i = rng.randrange(len(doc))
        doc[i] = _replace_somewhere(doc[i], rng)
        return doc
    return rng.choice(JSON_VALUES)


def rejson(data, corpus, rng):
    """The JSON body with one value, at any depth, of another type, size or nesting, or a key of
    the documented replies added; the length fixed."""
    head, sep, body = data.partition(b"\r\n\r\n")
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return data
    if isinstance(doc, dict) and rng.random() < 0.3:
        doc[rng.choice(JSON_KEYS)] = rng.choice(JSON_VALUES)
    else:
        doc = _replace_somewhere(doc, rng)
    body = json.dumps(doc).encode()
    head = re.sub(rb"(?i)content-length: *\d+", b"Content-Length: %d" % len(body), head)
    return head + sep + body


def nest(data, corpus, rng):
    """The body wrapped in lists or objects thousands deep (past Python's recursion limit)."""
    head, sep, body = data.partition(b"\r\n\r\n")
    depth = min(rng.choice((2, 999, 1001, 5000, 100000)), MAX_LEN // 8)
    opening, closing = rng.choice(((b"[", b"]"), (b'{"a":', b"}"), (b'{"alerts":[', b"]}")))
    body = opening * depth + body + closing * depth
    return re.sub(rb"(?i)content-length: *\d+", b"Content-Length: %d" % len(body), head) + sep + body


MUTATIONS = [truncate, flip, set_byte, erase, duplicate, insert_token, renumber, restatus, splice, rechunk, rejson,
             rejson, renumber, nest]


class Coverage:
    """Pairs of consecutive lines run in python/hlat's files: libFuzzer's edges, for Python."""

    def __init__(self):
        self.seen, self.new = set(), set()
        self.last = None

    def _global(self, frame, event, arg):
        if frame.f_code.co_filename.startswith(HLAT_DIR):
            self.last = None
            return self._local
        return None

    def _local(self, frame, event, arg):
        if event == "line":
            edge = (self.last, frame.f_code.co_filename, frame.f_lineno)
            self.last = (frame.f_code.co_filename, frame.f_lineno)
            if edge not in self.seen:
                self.new.add(edge)
        return self._local

    def run(self, fn, *args):
        """fn(*args) traced; True when it reached an edge not reached before."""
        self.new = set()
        sys.settrace(self._global)
        try:
            fn(*args)
        finally:
            sys.settrace(None)
            self.seen |= self.new
        return bool(self.new)


def _alarm(signum, frame):
    raise Hang(f"no result within {HANG_S} s")


def guarded(data, coverage):
    """execute(data) under the hang alarm, its output (alerts, warnings) kept from the terminal."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return coverage.run(execute, data)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def crashed(data, work, error):
    os.makedirs(os.path.join(work, "crashes"), exist_ok=True)
    path = os.path.join(work, "crashes", f"{TARGET}-{hashlib.sha1(data).hexdigest()}")
    with open(path, "wb") as f:
        f.write(data)
    print(f"fuzz {TARGET}: CRASH on {path} ({len(data)} bytes): {error!r}", file=sys.stderr)
    traceback.print_exception(error, limit=-6, file=sys.stderr)


def load(dirs):
    out = []
    for d in dirs:
        names = sorted(os.listdir(d)) if os.path.isdir(d) else ([os.path.basename(d)] if os.path.isfile(d) else [])
        for name in names:
            with open(os.path.join(d, name) if os.path.isdir(d) else d, "rb") as f:
                out.append(f.read())
    return out


def main(argv):
    if not argv:
        print(next(p for p in __doc__.split("\n\n") if p.startswith("usage:")), file=sys.stderr)
        return 2
    seconds = float(argv[0])
    work = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(HERE, "..", "build", "fuzz-work"))
    found = os.path.join(work, TARGET)
    os.makedirs(found, exist_ok=True)
    for name in os.listdir(found):  # a fresh copy each run, as fuzz/run.sh makes for libFuzzer
        os.remove(os.path.join(found, name))
    logging.getLogger("hlat").disabled = True  # the client says what it keeps; here, thousands of times
    seed = int(os.environ.get("SEED") or int.from_bytes(os.urandom(8), "little"))
    rng = random.Random(seed)
    coverage, executions, crashes = Coverage(), 0, 0
    replay = load(argv[2:] or [os.path.join(HERE, "corpus", TARGET), os.path.join(HERE, "regressions", TARGET)])
    corpus, t0 = [], time.monotonic()
    while crashes == 0 and (replay or time.monotonic() - t0 < seconds):
        seeding = bool(replay)
        data = replay.pop(0) if seeding else mutate(rng.choice(corpus), corpus, rng)
        try:
            new = guarded(data, coverage)
        except (Exception, Hang) as e:  # noqa: B014  whatever the client raised that it must not
            crashed(data, work, e)
            crashes += 1
            new = False
        executions += 1
        if seeding or new:  # every seed is a base for mutations; a mutant only when it reached further
            corpus.append(data)
        if new and not seeding:
            with open(os.path.join(found, hashlib.sha1(data).hexdigest()), "wb") as f:
                f.write(data)
    took = time.monotonic() - t0
    print(f"fuzz {TARGET}: {executions} executions in {took:.0f} s, cov {len(coverage.seen)} edges, "
          f"corpus {len(corpus)}, crashes {crashes} (seed {seed})")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
