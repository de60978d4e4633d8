"""A run hlat serve does not hear at the time: HLAT_MODE=offline, a server down at start, one
that comes back mid-run, one down to the end. Every step ends in the store once, after the run
itself (server back) or `python3 -m hlat sync` sent the spool; a sync that stopped half-way goes
on where it stopped, and a step sent twice is stored and detected once."""
import glob
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

from support import Server, ServerTestCase, TOKEN, free_port
import hlat
import hlat.sync

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SCRIPT = """
import os, sys, time
sys.path.insert(0, {root!r})
import hlat
run = hlat.init({name!r}, url={url!r}, token={token!r})
for step in range({steps}):
    run.log({{"loss": 3.0 - step / 100, "grad_norm": 1.0}}, step=step)
    time.sleep({pause})
run.finish()
"""


def dead_url():
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


class Spooled(ServerTestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="hlat-spool-")

    def child(self, name, url, steps=20, pause=0.0, **env):
        """A training script in a process of its own, spooling into self.dir."""
        script = SCRIPT.format(root=ROOT, name=name, url=url, token=TOKEN, steps=steps, pause=pause)
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "HLAT_DIR": self.dir, **env})

    def sync(self, *args):
        out = subprocess.run([sys.executable, "-m", "hlat", "sync", *args, "--url", self.server.url,
                              "--token", TOKEN], capture_output=True, text=True, timeout=120, cwd=ROOT)
        return out.returncode, out.stdout + out.stderr

    def spools(self, pattern="*.jsonl"):
        return sorted(glob.glob(os.path.join(self.dir, pattern)))

    def test_offline_never_touches_the_network_and_sync_stores_every_step_once(self):
        done = self.child("offline", self.server.url, HLAT_MODE="offline")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertNotIn("offline", self.server.runs(), "offline: nothing sent")
        [path] = self.spools()
        self.assertIn(f"python3 -m hlat sync {path}", done.stderr, "the command that uploads it is printed")
        with open(path) as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual(lines[0]["start"]["meta"]["pid"] > 0, True)
        self.assertEqual([x["step"] for x in lines[1:-1]], list(range(20)))
        self.assertEqual(lines[-1]["hlat_end"]["status"], "finished")
        code, said = self.sync(self.dir)
        self.assertEqual(code, 0, said)
        self.assertEqual(self.server.steps("offline"), list(range(20)))
        self.assertEqual(self.server.runs()["offline"]["status"], "finished")
        self.assertEqual(self.spools(), [], "a synced file is renamed")
        self.assertEqual(self.spools("*.synced"), [path + ".synced"])
        code, said = self.sync(self.dir)
        self.assertEqual((code, said.strip()), (0, f"hlat sync: nothing to sync in {self.dir}"))
        self.assertEqual(self.server.steps("offline"), list(range(20)), "a second sync sends nothing")

    def test_a_server_down_at_start_and_to_the_end_leaves_a_spool_that_sync_uploads(self):
        done = self.child("down", dead_url())
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("does not answer (ConnectionRefusedError", done.stderr, "said, not raised")
        self.assertEqual(done.stderr.count("does not answer"), 1, "said once")
        [path] = self.spools()
        self.assertIn(f"python3 -m hlat sync {path}", done.stderr)
        code, said = self.sync(path)
        self.assertEqual(code, 0, said)
        self.assertEqual(self.server.steps("down"), list(range(20)))
        self.assertEqual(self.server.steps("down", "grad_norm"), list(range(20)))
        self.assertEqual(self.server.runs()["down"]["status"], "finished")

    def test_a_server_that_comes_back_gets_the_start_and_the_backlog_from_the_run_itself(self):
        port = free_port()
        run = hlat.init("back", url=f"http://127.0.0.1:{port}", token=TOKEN, dir=self.dir)
        server = None
        try:
            for step in range(200):
                run.log({"loss": 3.0 - step / 100}, step=step)
                if step == 60:
                    server = Server(port=port)
                    self.assertTrue(self.spools(), "the backlog is on disk while the server is away")
                time.sleep(0.01)
            run.finish()
            self.assertEqual(server.steps("back"), list(range(200)), "nothing lost, nothing twice")
            self.assertEqual(server.runs()["back"]["status"], "finished")
            self.assertEqual(self.spools(), [], "a backlog the run sent itself leaves no file")
            self.assertIsNone(run.spool_path)
        finally:
            if server:
                server.stop()

    def test_a_sync_that_stopped_half_way_goes_on_and_a_step_sent_twice_is_stored_and_alerted_once(self):
        done = self.child("halves", self.server.url, steps=300, HLAT_MODE="offline")
        self.assertEqual(done.returncode, 0, done.stderr)
        [path] = self.spools()
        with open(path) as f:
            lines = f.readlines()
        lines[201] = json.dumps({"step": 200, "loss": 40.0, "grad_norm": 1.0}) + "\n"  # a loss jump at step 200
        full = "".join(lines)
        with open(path, "w") as f:  # what a run still writing (or killed) leaves: 150 steps, no end
            f.write("".join(lines[:151]))
        code, said = self.sync(path)
        self.assertEqual(code, 0, said)
        self.assertIn("no end record yet", said)
        self.assertEqual(self.server.steps("halves"), list(range(150)))
        with open(path, "w") as f:
            f.write(full)
        code, said = self.sync(path)
        self.assertEqual(code, 0, said)
        self.assertIn("150 lines sent", said, "the second sync starts where the first stopped")
        self.assertEqual(self.server.steps("halves"), list(range(300)))
        alerts = self.server.get("/api/v1/runs/halves/alerts")["alerts"]
        self.assertEqual([(a["kind"], a["step"]) for a in alerts], [("loss_jump", 200)])
        # Everything again, as a sync whose progress file was lost would send it.
        shutil.copy(path + ".synced", path)
        code, said = self.sync(path, "--resume")
        self.assertEqual(code, 0, said)
        self.assertEqual(self.server.steps("halves"), list(range(300)), "a step sent twice is stored once")
        self.assertEqual(len(self.server.get("/api/v1/runs/halves/alerts")["alerts"]), 1, "and alerted once")

    def test_a_name_taken_is_said_by_sync_with_what_to_do(self):
        hlat.init("taken", url=self.server.url, token=TOKEN).finish()
        self.child("taken", self.server.url, steps=3, HLAT_MODE="offline")
        [path] = self.spools()
        code, said = self.sync(path)
        self.assertEqual(code, 1)
        self.assertIn("--resume", said)
        code, said = self.sync(path, "--name", "taken-2")
        self.assertEqual(code, 0, said)
        self.assertEqual(self.server.steps("taken-2"), [0, 1, 2])

    def test_batch_ids_stay_in_the_spool_and_sync_keeps_them(self):
        run = hlat.init("offline-ids", mode="offline", dir=self.dir, url=self.server.url, token=TOKEN)
        for step in range(5):
            run.log({"loss": 2.0}, step=step, batch=f"shard0:offset{step * 100}")
        run.finish()
        [path] = self.spools()
        with open(path) as f:
            records = [json.loads(line) for line in f][1:-1]
        self.assertEqual([r["batch"] for r in records], [f"shard0:offset{s * 100}" for s in range(5)])
        code, said = self.sync(path)
        self.assertEqual(code, 0, said)
        db = sqlite3.connect(self.server.store)
        try:
            rows = db.execute("SELECT step, data FROM batches WHERE run_id = (SELECT id FROM runs WHERE name = ?) "
                              "ORDER BY step", ("offline-ids",)).fetchall()
        finally:
            db.close()
        self.assertEqual([(s, json.loads(d)["ids"]) for s, d in rows], [(s, [f"shard0:offset{s * 100}"]) for s in range(5)])


class Modes(unittest.TestCase):
    def test_disabled_does_nothing_and_costs_next_to_nothing(self):
        os.environ["HLAT_MODE"] = "disabled"
        try:
            run = hlat.init("nothing", url=dead_url())
        finally:
            del os.environ["HLAT_MODE"]
        self.assertIsInstance(run, hlat.DisabledRun)
        t0 = time.perf_counter()
        for step in range(10000):
            run.log({"loss": 1.0}, step=step)
        run.log({"loss": 1.0}, step=0, batch="a")
        self.assertIsNone(run.rewind_plan())
        per_call_us = (time.perf_counter() - t0) / 10000 * 1e6
        print(f"\n    disabled run.log: {per_call_us:.3f} us a call", file=sys.stderr)
        self.assertFalse(run.should_stop(3))
        run.alert("t", "x", level="warn")
        run.finish()

    def test_offline_with_a_spool_that_cannot_be_written_fails_at_init(self):
        with self.assertRaisesRegex(OSError, "spool cannot be written in /proc/hlat"):
            hlat.init("nowhere", mode="offline", dir="/proc/hlat")

    def test_a_mode_hlat_does_not_know_is_an_error_naming_the_modes(self):
        with self.assertRaisesRegex(ValueError, "online, offline, disabled"):
            hlat.init("x", mode="sideways")  # ("dryrun" is wandb's old name of offline)

    def test_sync_says_what_is_wrong_with_a_file_that_is_no_spool(self):
        bad = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
        bad.write('{"step": 0, "loss": 1}\n')
        bad.close()
        with self.assertRaisesRegex(hlat.sync.SyncError, "not an hlat spool file"):
            hlat.sync.sync_file(bad.name, dead_url(), TOKEN)


if __name__ == "__main__":
    unittest.main()
