"""`python3 -m hlat sync [PATH ...]`: uploads spool files (an offline run, or what a run kept
while the server did not answer) to `hlat serve`.

For each file: start the run (resuming it when a sync or the run itself got it to the server
before), its lines in batches of at most 4,096, then its end with the stored status. How far it
got is saved beside the file after every batch (PATH.progress), so a sync that stops half-way
(the server goes down, Ctrl-C) carries on from there when run again. A file whose run ended and
was sent whole is renamed PATH.synced: a second sync sends nothing. A file without its end (a
run still writing, or killed) is sent as far as it goes and left for a later sync.
"""
import argparse
import glob
import json
import os
import sys

from . import _spool
from ._http import HttpTransport, RunExists, ServerError, post_lines, quote, unreachable
from ._records import MAX_BATCH_STEPS

DEFAULT_URL = "http://127.0.0.1:8080"


class SyncError(Exception):
    pass


def spool_files(paths):
    """The spool files named, or found in the folders named (the default folder when none)."""
    out = []
    for path in paths or [_spool.default_dir()]:
        if os.path.isdir(path):
            out += sorted(glob.glob(os.path.join(path, "*.jsonl")))
        elif os.path.exists(path):
            out.append(path)
        else:
            raise SyncError(f"{path}: no such file or folder")
    return out


def sync_file(path, url, token, name=None, resume=False, timeout=30.0, say=print):
    """Uploads one spool file; returns "synced", or "partial" for a file without its end yet.
    Raises SyncError saying why it stopped (what was sent stays sent)."""
    with open(path, "rb") as f:
        try:
            header, header_end = _spool.read_header(f)
        except ValueError as e:
            raise SyncError(f"{path}: {e}")
        if _spool.writer_alive(header):
            raise SyncError(f"{path}: the run writing it (pid {header['writer']['pid']}) is still running and "
                            "sends it itself once the server answers; sync it after that process ends")
        run = name or header["run"]
        url = url or header.get("url") or DEFAULT_URL
        progress = _spool.load_progress(path)
        if progress.get("run") not in (None, run):  # sent under another name before: start over
            progress = {}
        transport = HttpTransport(url, token, timeout)
        try:
            _start(transport, run, header["start"], resume or bool(progress.get("started")))
            _spool.save_progress(path, {"run": run, "offset": progress.get("offset", header_end), "started": True})
            sent, end = _send_lines(transport, run, f, path, progress.get("offset", header_end))
            if end is not None:
                transport.request("POST", f"/api/v1/runs/{quote(run)}/finish", json.dumps(end).encode())
        except (OSError, ServerError) as e:
            raise SyncError(f"{path}: {url} {'does not answer' if unreachable(e) else 'refused'} ({e}); "
                            "what was sent stays sent: run sync again to go on")
        finally:
            transport.close()
    if end is None:
        say(f"{path}: {sent} lines sent to run {run!r}; the file has no end record yet (a run still writing, "
            "or one that was killed): sync it again later")
        return "partial"
    os.replace(path, path + ".synced")
    try:
        os.remove(_spool.progress_path(path))
    except FileNotFoundError:
        pass
    say(f"{path}: {sent} lines sent to run {run!r} at {url}, ended {end.get('status')}; renamed {path}.synced")
    return "synced"


def _start(transport, run, start, resume):
    body = dict(start, resume=bool(start.get("resume") or resume))
    try:
        transport.request("POST", f"/api/v1/runs/{quote(run)}/start", json.dumps(body).encode())
    except RunExists as e:
        raise SyncError(f"the server has a run named {run!r} already ({e.message}): sync with --resume to add "
                        "these records to it, or --name NEW to send them as another run")


def _send_lines(transport, run, f, path, offset):
    """Sends the record lines from `offset`, saving the progress after each batch."""
    sent, refused = 0, []
    for lines, after, end in _spool.batches(f, offset, MAX_BATCH_STEPS):
        if lines:
            post_lines(transport, run, lines, lambda reply: None, lambda line, e: refused.append((line, e)))
        _spool.save_progress(path, {"run": run, "offset": after, "started": True})
        sent += len(lines)
    for line, e in refused[:5]:
        print(f"hlat sync: the server refused a line, not sent ({e}): {line[:200]!r}", file=sys.stderr)
    return sent - len(refused), end


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m hlat sync", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="spool files or folders (default: $HLAT_DIR, else ./hlat-spool)")
    parser.add_argument("--url", default=os.environ.get("HLAT_URL"),
                        help="hlat serve (default: $HLAT_URL, else the URL the run was given)")
    parser.add_argument("--token", default=os.environ.get("HLAT_TOKEN", ""),
                        help="the token hlat serve printed (default: $HLAT_TOKEN)")
    parser.add_argument("--name", help="send under this run name instead of the one in the file (one file)")
    parser.add_argument("--resume", action="store_true", help="add to a run of that name the server has already")
    args = parser.parse_args(argv)
    try:
        files = spool_files(args.paths)
        if args.name and len(files) > 1:
            raise SyncError("--name names one run: give one file")
    except SyncError as e:
        print(f"hlat sync: {e}", file=sys.stderr)
        return 2
    if not files:
        print(f"hlat sync: nothing to sync in {', '.join(args.paths or [_spool.default_dir()])}")
        return 0
    failed = 0
    for path in files:
        try:
            sync_file(path, args.url, args.token, args.name, args.resume)
        except SyncError as e:
            print(f"hlat sync: {e}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0
