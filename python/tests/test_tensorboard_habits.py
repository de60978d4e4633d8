"""TensorBoard's habits (issue 55): the same logging code written against SummaryWriter runs once
through torch.utils.tensorboard's (event files, imported with `hlat ingest`) and once through
hlat.tensorboard's (sent to `hlat serve`): the same keys at the same steps with the same values
(float32, as TensorBoard keeps them), a NaN alerted in both, and the calls with no counterpart
(add_histogram, add_text) accepted and said once."""
import os
import sqlite3
import subprocess
import tempfile
import unittest

import torch

from support import HLAT, ServerTestCase, TOKEN
import hlat.tensorboard
from torch.utils.tensorboard import SummaryWriter as TorchSummaryWriter


def write_the_log(writer):
    """What a training script writes: scalars by tag, a group through add_scalars, a NaN at step 7."""
    for step in range(12):
        writer.add_scalar("train/loss", float("nan") if step == 7 else 3.0 - 0.1 * step, step)
        writer.add_scalar("grad_norm", 1.0 + 0.01 * step, step)
        writer.add_scalars("lr", {"group0": 1e-3, "group1": 2e-3}, step)
    writer.add_histogram("weights", torch.tensor([0.1, 0.2]), 11)
    writer.add_text("note", "done", 11)
    writer.flush()
    writer.close()


class SummaryWriterHabits(ServerTestCase):
    def test_hlats_writer_sends_what_torchs_writes(self):
        folder = tempfile.mkdtemp(prefix="hlat-tbw-")
        write_the_log(TorchSummaryWriter(os.path.join(folder, "exp")))
        store = os.path.join(folder, "tb.db")
        r = subprocess.run([HLAT, "ingest", "--store", store, "--run", "from-events",
                            "--file", os.path.join(folder, "exp")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with self.assertLogs("hlat", "WARNING") as said:
            write_the_log(hlat.tensorboard.SummaryWriter(os.path.join(folder, "exp-hlat"), url=self.server.url,
                                                         token=TOKEN))
        self.assertTrue(any("add_histogram has no counterpart" in line for line in said.output), said.output)
        db = sqlite3.connect(store)
        # TensorBoard writes add_scalars' values in a folder a tag (exp/lr_group0, key lr): one run a
        # folder on import; hlat's writer keeps them in the run, as lr/group0.
        rows = db.execute("SELECT r.name, k.name, m.step, m.value FROM metrics m JOIN metric_keys k ON k.id = m.key_id "
                          "JOIN runs r ON r.id = m.run_id ORDER BY k.name, m.step").fetchall()
        from_events = {}
        for run, key, step, value in rows:
            if run != "from-events":
                key = run.rsplit("/", 1)[1].replace("lr_", "lr/")
            from_events.setdefault(key, []).append((step, value))
        keys = self.server.get("/api/v1/runs/exp-hlat/keys")["keys"]
        self.assertEqual(sorted(from_events), sorted(keys))
        for key, points in from_events.items():
            sent = [tuple(p[:2]) for p in self.server.get(f"/api/v1/runs/exp-hlat/series?key={key}")["points"]]
            self.assertEqual([s for s, _ in sent], [s for s, _ in points], key)
            for (_, a), (_, b) in zip(points, sent):
                if a is None or b is None:  # NaN, as the store and the API spell it
                    self.assertEqual(a, b, key)
                else:
                    self.assertAlmostEqual(a, b, places=5, msg=key)
        alerts = self.server.get("/api/v1/runs/exp-hlat/alerts")["alerts"]
        self.assertIn(("nonfinite", 7), [(a["kind"], a["step"]) for a in alerts])
        self.assertEqual(self.server.runs()["exp-hlat"]["status"], "finished")


if __name__ == "__main__":
    unittest.main()
