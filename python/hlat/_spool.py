"""A spool file: a run's records on local disk, for `python3 -m hlat sync` to upload.

Line 1 is the header, {"hlat_spool": 1, "run": NAME, "url": URL, "start": START, "writer": W},
where START is the body of POST /api/v1/runs/{run}/start ({config, precision, meta, resume,
host}) and W says who writes it ({pid, host, mode}: online or offline). Then
the run's records, each line exactly as POST /api/v1/runs/{run}/ingest takes it. The last line,
once the run has ended, is {"hlat_end": {"status": S, "step": N, "detail": D}}, the body of
POST .../finish. Nothing else: the file is readable by `hlat ingest --format jsonl` too, header
and end aside.

Beside it, PATH.progress says how far an upload got ({"run", "offset", "started"}), so that a
sync interrupted half-way carries on where it stopped instead of sending lines twice.
"""
import json
import os
import re
import socket
import time

HEADER_KEY = b'{"hlat_spool"'
END_KEY = b'{"hlat_end"'
MAX_BATCH_BYTES = 4 << 20  # a piece of a backlog: well under the server's 1 MB a line, 64 MB a request


def default_dir():
    """$HLAT_DIR, else ./hlat-spool (beside the training script's working folder, as W&B's ./wandb)."""
    return os.path.abspath(os.environ.get("HLAT_DIR") or "hlat-spool")


def new_path(directory, name):
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:100] or "run"
    stamp = time.strftime("%Y%m%dT%H%M%S")
    return os.path.join(directory, f"{safe}-{stamp}-{os.getpid()}.jsonl")


class Spool:
    """One run's spool file, written by the process that runs it (appends only) and read back
    by it (its own backlog after an outage) or by sync."""

    def __init__(self, path, name, url, start, mode):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path
        self.file = open(path, "xb", buffering=0)  # unbuffered: what is written survives a SIGKILL
        writer = {"pid": os.getpid(), "host": socket.gethostname(), "mode": mode}
        header = json.dumps({"hlat_spool": 1, "run": name, "url": url, "start": start, "writer": writer}) + "\n"
        self.file.write(header.encode())
        self.size = self.sent = len(header.encode())
        self.lines = self.lines_sent = 0
        self.ended = self.removed = False

    def append(self, lines):
        """Appends record lines (str or bytes, each ending in a newline)."""
        if lines:
            data = b"".join(x if isinstance(x, bytes) else x.encode() for x in lines)
            self.file.write(data)
            self.size += len(data)
            self.lines += len(lines)

    def unsent(self):
        return self.size > self.sent

    def read_unsent(self, max_lines):
        """(lines, offset after them): the next complete lines not yet acknowledged."""
        size = self.size  # what another thread appends meanwhile waits for the next read
        with open(self.path, "rb") as f:
            f.seek(self.sent)
            data = f.read(min(size - self.sent, MAX_BATCH_BYTES))
            if b"\n" not in data:  # one line longer than a batch: sent alone (the server says what it thinks)
                f.seek(self.sent)
                data = f.readline()
        complete = data[: data.rfind(b"\n") + 1]
        lines = [line + b"\n" for line in complete.split(b"\n")[:-1]][:max_lines]
        return lines, self.sent + sum(len(x) for x in lines)

    def mark_sent(self, offset, lines, run):
        """The server has every line before `offset` (`lines` more of them than before)."""
        self.sent = offset
        self.lines_sent += lines
        self.save_started(run)

    def save_started(self, run, started=True):
        """For sync: the server has this run (it resumes it) and every line before self.sent."""
        save_progress(self.path, {"run": run, "offset": self.sent, "started": started})

    def end(self, status, step, detail):
        if not self.ended:
            end = {"status": status, "step": step, "detail": detail, "time": time.time()}
            self.file.write((json.dumps({"hlat_end": end}) + "\n").encode())
            self.ended = True
        self.file.close()

    def remove(self):
        """Every line reached the server and the run ended there: nothing left to sync."""
        self.file.close()
        self.removed = True
        for p in (self.path, progress_path(self.path)):
            try:
                os.remove(p)
            except FileNotFoundError:
                pass


def progress_path(path):
    return path + ".progress"


def save_progress(path, progress):
    tmp = progress_path(path) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(progress, f)
    os.replace(tmp, progress_path(path))  # whole or not at all, whenever the process dies


def load_progress(path):
    try:
        with open(progress_path(path)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def read_header(f):
    """The header of an open spool file, or ValueError saying why it is not one."""
    line = f.readline()
    if not line.startswith(HEADER_KEY):
        raise ValueError("not an hlat spool file (its first line is no hlat_spool header)")
    header = json.loads(line)
    if not isinstance(header.get("run"), str) or not isinstance(header.get("start"), dict):
        raise ValueError("its header has no run name or start")
    return header, len(line)


def batches(f, offset, max_lines):
    """From `offset`: (lines, offset after them, end or None) for each batch of complete record
    lines, the end record (the body of finish) with the last. A line not yet ended (a writer
    still at work, or killed mid-line) is left for later."""
    f.seek(offset)
    lines, size, end = [], 0, None
    while True:
        line = f.readline()
        if not line.endswith(b"\n"):
            break
        if line.startswith(END_KEY):
            end = json.loads(line)["hlat_end"]
            size += len(line)
            break
        lines.append(line)
        size += len(line)
        if len(lines) >= max_lines or size >= MAX_BATCH_BYTES:
            offset += size
            yield lines, offset, None
            lines, size = [], 0
    yield lines, offset + size, end


def writer_alive(header):
    """Whether the online run that writes this file is still running here: it sends the file
    itself when the server answers, and a sync beside it would send lines twice."""
    writer = header.get("writer") or {}
    if writer.get("mode") != "online" or writer.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(writer.get("pid")), 0)
    except (OSError, TypeError, ValueError):
        return False
    return True
