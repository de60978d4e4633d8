"""What the client tests share: a running `hlat serve` on a fresh store and a tiny causal LM."""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

HLAT = os.environ.get("HLAT_BINARY", "hlat")
TOKEN = "client-test-token"
# Tests sample system metrics only where they ask for them, and spool only into a scratch folder
# (never into the source tree); child processes inherit both.
os.environ.setdefault("HLAT_SYSTEM_INTERVAL", "0")
os.environ.setdefault("HLAT_DIR", tempfile.mkdtemp(prefix="hlat-spool-test-"))


class ServerTestCase(unittest.TestCase):
    """Tests that share one `hlat serve` (self.server), started before the first."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()


class Server:
    """hlat serve --create on a scratch store, on a free port, until stop()."""

    def __init__(self, *extra, port=0):
        self.dir = tempfile.mkdtemp(prefix="hlat-client-test-")
        self.store = os.path.join(self.dir, "s.db")
        self.log = open(os.path.join(self.dir, "serve.log"), "w+")
        self.proc = subprocess.Popen([HLAT, "serve", "--create", "--store", self.store, "--port", str(port),
                                      "--token", TOKEN, *extra], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        self.url = None
        while time.time() < deadline and self.url is None:
            time.sleep(0.1)
            self.log.seek(0)
            m = re.search(r"open (http://127\.0\.0\.1:\d+)/", self.log.read())
            if m:
                self.url = m.group(1)
        if self.url is None:
            self.stop()
            raise RuntimeError("hlat serve did not start: " + open(self.log.name).read())

    def get(self, path):
        with urllib.request.urlopen(self.url + path) as r:
            return json.loads(r.read())

    def post(self, path, body=b""):
        req = urllib.request.Request(self.url + path, data=body, method="POST", headers={"X-HLAT-Token": TOKEN})
        with urllib.request.urlopen(req) as r:
            return json.loads(r.read())

    def runs(self):
        return {r["name"]: r for r in self.get("/api/v1/runs")["runs"]}

    def steps(self, run, key="loss"):
        """The steps stored for `key`, in order (a step stored twice would show twice)."""
        return [p[0] for p in self.get(f"/api/v1/runs/{run}/series?key={key}")["points"]]

    def halt_after(self, name, steps=10, seconds=120):
        """Presses the page's Halt for run `name` once it has `steps` steps, from a thread (as
        a person watching it would); returns the thread (join it)."""
        def press():
            deadline = time.time() + seconds
            while time.time() < deadline:
                if self.runs().get(name, {}).get("steps", 0) >= steps:
                    self.post(f"/api/v1/runs/{name}/halt")
                    return
                time.sleep(0.05)
        presser = threading.Thread(target=press)
        presser.start()
        return presser

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TinyLM(torch.nn.Module):
    """Embedding, one causal attention layer, an MLP, a head. leak=True lets position t see t+1."""

    def __init__(self, vocab=64, dim=32, seq=32, leak=False):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))
        self.head = torch.nn.Linear(dim, vocab)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=2 if leak else 1))

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.emb(tokens) + self.pos[:T]
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        att = (q @ k.transpose(1, 2)) / q.shape[-1] ** 0.5
        att = att.masked_fill(self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        x = x + self.proj(att @ v)
        x = x + self.mlp(x)
        return self.head(x)


def batches(vocab=64, seq=32, batch=8, seed=0):
    """Sequences that repeat a short random motif: learnable, so the loss falls."""
    g = torch.Generator().manual_seed(seed)
    while True:
        motif = torch.randint(0, vocab, (batch, 4), generator=g)
        yield motif.repeat(1, seq // 4 + 1)[:, : seq + 1]
