"""W&B's habits (issue 55): a script written against wandb's API, in the shape of W&B's quickstart,
run unchanged but for `import hlat as wandb` against `hlat serve` (HLAT_URL, HLAT_TOKEN): every
value it logs is stored at the step wandb would count, its config is the run's, the summary and
the alert arrive, define_metric is accepted (said once), finish(exit_code=1) ends a run
"crashed", and WANDB_MODE=offline keeps the run in the spool; the same script under the real
wandb (the lock's, offline) logs the same keys at the same steps with the same values."""
import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

from support import ServerTestCase, TOKEN

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

QUICKSTART = """
import random
import hlat as wandb

random.seed(7)
run = wandb.init(project="quickstart", name=NAME, config={"learning_rate": 0.02, "architecture": "CNN"})
wandb.define_metric("acc", summary="max")
print("lr", wandb.config.learning_rate, run.config["architecture"])
offset = random.random() / 5
for epoch in range(2, 10):
    acc = 1 - 2 ** -epoch - random.random() / epoch - offset
    loss = 2 ** -epoch + random.random() / epoch + offset
    wandb.log({"acc": acc, "loss": loss})
    with open(OUT, "a") as f:
        f.write(f"{acc} {loss}\\n")
wandb.log({"val_ppl": 1.5}, commit=False)
wandb.log({"val_acc": 0.9})
wandb.summary["best_acc"] = 0.95
wandb.alert(title="done", text="the quickstart ran", level="INFO")
wandb.finish(exit_code=EXIT)
"""


def wandb_history(path):
    """The history rows ({key: value, "_step": n}) of an offline wandb run's .wandb file: W&B's
    header (":W&B", 2 magic bytes, a version), then LevelDB's log format (32 KiB blocks of
    records, each a 4-byte checksum, a 2-byte length, a type: 1 whole, 2 first, 3 middle, 4
    last), each record a wandb_internal Record protobuf."""
    from wandb.proto import wandb_internal_pb2
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B", data[:8]
    block, pos, pieces, rows = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        payload, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (2, 3):
            pieces += payload
            continue
        if kind not in (1, 4):
            continue
        record = wandb_internal_pb2.Record()
        record.ParseFromString(pieces + payload)
        pieces = b""
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


class WandbScript(ServerTestCase):
    def run_script(self, name, exit_code=0, env=None):
        out = tempfile.mktemp(prefix="hlat-wandb-")
        script = f"import sys\nsys.path.insert(0, {ROOT!r})\nNAME, OUT, EXIT = {name!r}, {out!r}, {exit_code}\n"
        environment = dict(os.environ, HLAT_URL=self.server.url, HLAT_TOKEN=TOKEN, **(env or {}))
        environment.pop("HLAT_MODE", None)
        r = subprocess.run([sys.executable, "-c", script + QUICKSTART], env=environment, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            logged = [tuple(map(float, line.split())) for line in f]
        return r, logged

    def series(self, name, key):
        return [(p[0], p[1]) for p in self.server.get(f"/api/v1/runs/{name}/series?key={key}")["points"]]

    def test_the_quickstart_runs_unchanged_and_stores_what_it_logs(self):
        r, logged = self.run_script("wb-quickstart")
        self.assertIn("lr 0.02 CNN", r.stdout)
        self.assertIn("define_metric has no meaning in hlat", r.stderr)
        stored_acc, stored_loss = self.series("wb-quickstart", "acc"), self.series("wb-quickstart", "loss")
        self.assertEqual([s for s, _ in stored_acc], list(range(8)), "wandb's step: one a log() call")
        for (step, acc), (_, loss), (want_acc, want_loss) in zip(stored_acc, stored_loss, logged):
            self.assertAlmostEqual(acc, want_acc, places=6)
            self.assertAlmostEqual(loss, want_loss, places=6)
        self.assertEqual(self.series("wb-quickstart", "val_ppl"), [(8, 1.5)], "commit=False: the next log's step")
        self.assertEqual(self.series("wb-quickstart", "val_acc"), [(8, 0.9)])
        run = self.server.runs()["wb-quickstart"]
        self.assertEqual(run["config"]["learning_rate"], 0.02)
        self.assertEqual(run["status"], "finished")
        events = self.server.get("/api/v1/runs/wb-quickstart/events")["events"]
        summary = [e for e in events if e["kind"] == "summary"]
        self.assertEqual(json.loads(summary[0]["detail"]), {"best_acc": 0.95})
        alerts = self.server.get("/api/v1/runs/wb-quickstart/alerts")["alerts"]
        self.assertIn("done: the quickstart ran", [a["message"] for a in alerts])

    def test_the_same_script_under_wandb_logs_the_same_keys_and_steps(self):
        """The quickstart under the real wandb (offline, its .wandb file read back) and under
        hlat: the same keys at the same steps, the same values."""
        folder = tempfile.mkdtemp(prefix="hlat-real-wandb-")
        out = os.path.join(folder, "values")
        script = (f"NAME, OUT, EXIT = 'real', {out!r}, 0\n" + QUICKSTART.replace("import hlat as wandb", "import wandb"))
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, WANDB_MODE="offline", WANDB_DIR=folder, WANDB_SILENT="true"))
        self.assertEqual(r.returncode, 0, r.stderr)
        under_wandb = {}
        for history in wandb_history(glob.glob(os.path.join(folder, "wandb", "offline-run-*", "run-*.wandb"))[0]):
            step = int(history.pop("_step"))
            for key, value in history.items():
                if not key.startswith("_"):
                    under_wandb.setdefault(key, []).append((step, value))
        self.run_script("wb-same")
        under_hlat = {key: self.series("wb-same", key) for key in self.server.get("/api/v1/runs/wb-same/keys")["keys"]}
        self.assertEqual(sorted(under_wandb), ["acc", "loss", "val_acc", "val_ppl"])
        self.assertEqual(sorted(under_wandb), sorted(under_hlat))
        for key, points in under_wandb.items():
            self.assertEqual([s for s, _ in points], [s for s, _ in under_hlat[key]], key)
            for (_, a), (_, b) in zip(points, under_hlat[key]):
                self.assertAlmostEqual(a, b, places=9, msg=key)

    def test_finish_with_an_exit_code_ends_the_run_crashed(self):
        self.run_script("wb-exit", exit_code=1)
        self.assertEqual(self.server.runs()["wb-exit"]["status"], "crashed")

    def test_wandb_mode_offline_keeps_the_run_in_the_spool(self):
        spool = tempfile.mkdtemp(prefix="hlat-wandb-spool-")
        self.run_script("wb-offline", env={"WANDB_MODE": "offline", "HLAT_DIR": spool})
        self.assertNotIn("wb-offline", self.server.runs())
        self.assertEqual(len(glob.glob(os.path.join(spool, "wb-offline-*.jsonl"))), 1, os.listdir(spool))


if __name__ == "__main__":
    unittest.main()
