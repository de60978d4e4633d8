"""store=: a run written to a local store by `hlat ingest --follow`, with no server."""
import json
import os
import shutil
import subprocess
import tempfile

HALT_EXIT_CODE = 3  # `hlat ingest --follow --on-halt exit` and a halted `hlat train`


class LocalStore:
    """JSON lines into a file that `hlat ingest --follow` reads into the store."""

    def __init__(self, name, store, config, precision, meta, resume, hlat_binary):
        binary = hlat_binary or os.environ.get("HLAT_BINARY") or shutil.which("hlat")
        if not binary:
            raise FileNotFoundError("hlat.init(store=...): the hlat binary is not on PATH; pass hlat_binary= "
                                    "or set HLAT_BINARY")
        self.dir = tempfile.mkdtemp(prefix="hlat-client-")
        self.path = os.path.join(self.dir, "records.jsonl")
        self.file = open(self.path, "ab", buffering=0)
        # --meta is k=v,k=v: a value holding a comma (a command line, say) cannot go that way.
        pairs = [f"{k}={v}" for k, v in meta.items() if "," not in str(v) and "\n" not in str(v)]
        if precision:
            pairs.insert(0, f"precision={precision}")
        cmd = [binary, "ingest", "--store", store, "--run", name, "--follow", "--format", "jsonl",
               "--on-halt", "exit", "--config", json.dumps(config), self.path]
        if pairs:
            cmd += ["--meta", ",".join(pairs)]
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
