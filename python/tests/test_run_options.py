"""What hlat.init records and accepts: git revision, command line, host and versions in the
run's meta; system metrics from a thread of its own; precision by PyTorch's names (and an
error naming hlat's for one it does not know); a name already used (hlat.RunExists, or
resume); run.alert, stored and listed like a detector's alert; the causality probe on a model
whose forward returns (logits, loss), as nanoGPT's does."""
import json
import logging
import os
import sqlite3
import subprocess
import sys
import time
import unittest

import torch

from support import ServerTestCase, TinyLM, TOKEN
import hlat
import hlat.torch


class RunOptions(ServerTestCase):
    def init(self, name, **kw):
        return hlat.init(name, url=self.server.url, token=TOKEN, **kw)

    def meta(self, name):
        db = sqlite3.connect(self.server.store)
        try:
            return json.loads(db.execute("SELECT meta FROM runs WHERE name = ?", (name,)).fetchone()[0])
        finally:
            db.close()

    def test_init_records_where_and_how_the_run_started(self):
        self.init("where", meta={"seed": 3}).finish()
        meta = self.meta("where")
        revision = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        self.assertEqual(meta["git_revision"], revision)
        self.assertIn(meta["git_dirty"], (True, False))
        self.assertEqual(meta["pid"], os.getpid())
        self.assertEqual(meta["python"], sys.version.split()[0])
        self.assertEqual(meta["torch"], torch.__version__)
        self.assertIn("unittest", meta["command"])
        self.assertEqual(meta["seed"], 3, "the program's own meta is kept")

    def test_outside_a_git_repository_there_is_no_revision_and_no_error(self):
        script = (f"import os, sys\nsys.path.insert(0, {os.path.abspath('..')!r})\nos.chdir('/')\nimport hlat\n"
                  f"hlat.init('nogit', url={self.server.url!r}, token={TOKEN!r}).finish()\n")
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertNotIn("git_revision", self.meta("nogit"))

    def test_system_metrics_are_sampled_on_a_thread_of_their_own(self):
        run = self.init("sampled", system_interval=0.05)
        for step in range(10):
            run.log({"loss": 1.0}, step=step)
            time.sleep(0.03)
        run.finish()
        keys = self.server.get("/api/v1/runs/sampled/keys")["keys"]
        self.assertTrue({"cpu_pct", "rss_mb"} <= set(keys), keys)
        self.assertGreater(len(self.server.steps("sampled", "rss_mb")), 1)

    def test_precision_by_pytorchs_names(self):
        for name, given, stored in [("p-float32", "float32", "fp32"), ("p-dtype", torch.bfloat16, "bf16"),
                                    ("p-lightning", "bf16-mixed", "mixed"), ("p-kahan", "BF16_KAHAN", "bf16_kahan")]:
            self.init(name, precision=given).finish()
            self.assertEqual(self.server.runs()[name]["precision"], stored, given)
        with self.assertRaisesRegex(ValueError, r"'fp16' is not one hlat knows: fp32 .*bf16_kahan.*mixed"):
            self.init("p-fp16", precision="fp16")
        self.assertNotIn("p-fp16", self.server.runs())

    def test_a_name_already_used_raises_run_exists_unless_resumed(self):
        run = self.init("twice-named")
        run.log({"loss": 2.0}, step=0)
        run.finish()
        with self.assertRaises(hlat.RunExists) as caught:
            self.init("twice-named")
        self.assertIn("resume", str(caught.exception))
        for resume in (True, "allow"):
            again = self.init("twice-named", resume=resume)
            again.log({"loss": 1.0}, step=1)
            again.finish()
        self.assertEqual(self.server.steps("twice-named"), [0, 1])

    def test_a_job_of_several_ranks_stops_at_should_stop_not_at_log(self):
        """One rank leaving at log() would hang the others in their next collective."""
        run = self.init("ranks", rank=0, world_size=2, max_lag_steps=1)
        self.server.post("/api/v1/runs/ranks/halt")
        with self.assertLogs("hlat", logging.WARNING) as logs:
            for step in range(5):
                run.log({"loss": 1.0}, step=step)  # never raises here
        self.assertEqual(len(logs.output), 1, logs.output)
        self.assertIn("if run.should_stop(step): break", logs.output[0])
        self.assertTrue(run.should_stop(4))
        run.finish()
        self.assertEqual(self.server.runs()["ranks"]["status"], "halted")

    def test_run_alert_is_stored_and_listed_like_a_detectors(self):
        run = self.init("own-alert")
        for step in range(5):
            run.log({"loss": 2.0}, step=step)
        run.alert("loss too high", "loss 12 > 10", level="error")  # at the step of the last log
        run.alert("note", "a plain note", level="info", step=4)
        run.log({"loss": 2.0}, step=5)
        run.finish()
        alerts = self.server.get("/api/v1/runs/own-alert/alerts")["alerts"]
        mine = [(a["kind"], a["severity"], a["step"], a["message"]) for a in alerts]
        self.assertEqual(mine, [("alert", "critical", 4, "loss too high: loss 12 > 10"),
                                ("alert", "info", 4, "note: a plain note")])
        self.assertEqual(run.stats["dropped_lines"], 0)

    def test_alert_levels_as_wandb_and_logging_name_them(self):
        from hlat._meta import level_name
        self.assertEqual([level_name(x) for x in ("INFO", "warn", "Warning", "error", "critical")],
                         ["info", "warning", "warning", "critical", "critical"])
        with self.assertRaisesRegex(ValueError, "info, warning"):
            level_name("fatal")


class NanoGPTLike(torch.nn.Module):
    """nanoGPT's forward: (logits, loss); without targets, logits of the last position only."""

    def __init__(self, leak=False):
        super().__init__()
        self.lm = TinyLM(leak=leak)
        self.drop = torch.nn.Dropout(0.5)  # the probe puts a module in eval mode

    def forward(self, idx, targets=None):
        logits = self.lm(self.drop(self.lm.emb(idx)).argmax(-1) * 0 + idx)
        if targets is None:
            return logits[:, [-1], :], None
        return logits, torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


class CausalityProbe(ServerTestCase):
    def test_a_model_returning_logits_and_loss_is_probed_as_it_is(self):
        torch.manual_seed(0)
        sound = hlat.init("nano-sound", url=self.server.url, token=TOKEN)
        model = NanoGPTLike().train()
        self.assertEqual(hlat.torch.probe_causality(sound, model, vocab_size=64, seq_len=32), 0.0)
        self.assertTrue(model.training, "the module's mode is put back")
        sound.finish()
        leaky = hlat.init("nano-leaky", url=self.server.url, token=TOKEN)
        with self.assertRaises(hlat.HaltRequested):
            hlat.torch.probe_causality(leaky, NanoGPTLike(leak=True), vocab_size=64, seq_len=32)
        leaky.finish()
        self.assertEqual([a["kind"] for a in self.server.get("/api/v1/runs/nano-leaky/alerts")["alerts"]],
                         ["information_leak"])

    def test_a_function_returning_a_tuple_and_one_giving_too_few_positions(self):
        model = TinyLM().eval()
        leak, _ = hlat.torch.causality_probe(lambda x: (model(x), None), vocab_size=64, seq_len=32)
        self.assertEqual(leak, 0.0)
        with self.assertRaisesRegex(ValueError, r"lambda x: model\(x, x\)\[0\]"):
            hlat.torch.causality_probe(lambda x: model(x)[:, -1:], vocab_size=64, seq_len=32)


if __name__ == "__main__":
    unittest.main()
