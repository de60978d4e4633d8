"""`hlat ingest --follow` of a TensorBoard log directory that torch.utils.tensorboard's
SummaryWriter is writing in another process (torchtitan's and Megatron's way of logging): the
steps arrive while it writes, a NaN loss is alerted (the time from its flush to the alert in the
store is printed) and its halt policy stops the follower; a halt pressed on the page (hlat serve
on the same store) reaches it too, each ending the run "halted" (--on-halt exit: code 3); a
corrupt record stops following with every record before it kept."""
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error

from support import HLAT, Server, TOKEN

WRITER = """
import sys, time, torch
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter(sys.argv[1], flush_secs=1)
for step in range(10000):
    nan = step == int(sys.argv[2])
    writer.add_scalar("loss", float("nan") if nan else 3.0 - 1e-4 * step, step)
    writer.add_scalar("grad_norm", 1.0, step)
    writer.flush()
    if nan:
        print(time.time(), flush=True)   # when the NaN was written out
    if step == int(sys.argv[3]):
        break
    time.sleep(0.05)
writer.close()
"""


def serve(store):
    """hlat serve on an existing store, as support.Server does on a new one."""
    server = Server.__new__(Server)
    server.dir = tempfile.mkdtemp(prefix="hlat-tbf-serve-")
    server.store = store
    server.log = open(os.path.join(server.dir, "serve.log"), "w+")
    server.proc = subprocess.Popen([HLAT, "serve", "--store", store, "--port", "0", "--token", TOKEN],
                                   stdout=server.log, stderr=subprocess.STDOUT)
    server.url = wait_for(lambda: _url(server.log), 30)
    return server


def _url(log):
    log.seek(0)
    m = re.search(r"open (http://127\.0\.0\.1:\d+)/", log.read())
    return m.group(1) if m else None


def wait_for(predicate, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    return predicate()


class FollowTensorBoard(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hlat-tbf-")
        self.logdir = os.path.join(self.tmp, "tb")
        self.store = os.path.join(self.tmp, "s.db")

    def follower(self, run, *extra):
        return subprocess.Popen([HLAT, "ingest", "--store", self.store, "--run", run, "--follow", "--idle-exit", "20",
                                 "--file", self.logdir, *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    def writer(self, nan_at, last):
        return subprocess.Popen([sys.executable, "-c", WRITER, self.logdir, str(nan_at), str(last)],
                                stdout=subprocess.PIPE, text=True)

    def query(self, sql, *args):
        if not os.path.exists(self.store):
            return []
        with sqlite3.connect(self.store) as db:
            try:
                return db.execute(sql, args).fetchall()
            except sqlite3.OperationalError:
                return []  # the store is being made

    def test_a_nan_written_by_a_running_summary_writer_is_alerted_and_halts_the_follower(self):
        os.makedirs(self.logdir)
        writer = self.writer(nan_at=30, last=100000)
        follower = self.follower("tb-nan", "--on-halt", "exit")
        try:
            written = float(writer.stdout.readline())
            alert = wait_for(lambda: self.query("SELECT wall_time FROM alerts WHERE kind = 'nonfinite'"))
            seen = time.time()
            self.assertTrue(alert, "no nonfinite alert")
            print(f"\n    NaN flushed at {written:.3f}, its alert in the store by {seen:.3f}: {seen - written:.2f} s "
                  f"later", file=sys.stderr)
            output, _ = follower.communicate(timeout=60)  # nonfinite's policy is halt: --on-halt exit
            self.assertEqual(follower.returncode, 3, output)
            self.assertEqual(self.query("SELECT status FROM runs WHERE name = 'tb-nan'"), [("halted",)])
        finally:
            writer.kill()
            writer.wait()

    def test_a_halt_pressed_on_the_page_reaches_the_follower(self):
        os.makedirs(self.logdir)
        writer = self.writer(nan_at=-1, last=100000)
        follower = self.follower("tb-live", "--on-halt", "exit")
        server = None
        try:
            steps = lambda: (self.query("SELECT COUNT(*) FROM metrics WHERE step >= 10") or [(0,)])[0][0]  # noqa: E731
            self.assertTrue(wait_for(steps))
            server = serve(self.store)  # the page, on the follower's store
            try:
                server.post("/api/v1/runs/tb-live/halt")
            except urllib.error.HTTPError as e:
                self.fail(f"halt refused: {e.code} {e.read().decode()}")
            output, _ = follower.communicate(timeout=60)
            self.assertEqual(follower.returncode, 3, output)
            self.assertIn("halt: requested by", output)
            self.assertEqual(server.runs()["tb-live"]["status"], "halted")
        finally:
            if server is not None:
                server.stop()
            writer.kill()
            writer.wait()

    def test_a_follower_started_first_waits_for_the_folder_and_ends_with_its_trainer(self):
        """As a launcher starts them: the follower before the trainer has made its folder
        (torchtitan makes tb/ at its first step), told the trainer's process with --on-halt
        signal:PID; the trainer writes 40 steps and exits unhalted: every step is stored, the
        follower ends by itself, and the run says "stopped" with why (its exit status is not the
        follower's to know)."""
        launcher = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; time.sleep(1.5); "
                                     "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)",
                                     sys.executable, "-c", WRITER, self.logdir, "-1", "39"])
        follower = self.follower("tb-first", "--on-halt", f"signal:{launcher.pid}")
        time.sleep(1)
        self.assertFalse(os.path.exists(self.logdir))
        self.assertIsNone(follower.poll(), "the follower waits for the folder")
        launcher.wait(timeout=60)
        output, _ = follower.communicate(timeout=60)
        self.assertEqual(follower.returncode, 0, output)
        self.assertIn("waiting for", output)
        self.assertEqual(self.query("SELECT COUNT(DISTINCT step) FROM metrics"), [(40,)])
        self.assertEqual(self.query("SELECT status FROM runs WHERE name = 'tb-first'"), [("stopped",)])
        ends = self.query("SELECT detail FROM events WHERE kind = 'stop'")
        self.assertTrue(any(f"process {launcher.pid}) ended" in d for (d,) in ends), ends)

    def test_a_path_that_never_appears_is_an_error_once_the_trainer_is_gone(self):
        sleeper = subprocess.Popen([sys.executable, "-c", "pass"])
        sleeper.wait()
        follower = self.follower("tb-never", "--on-halt", f"signal:{sleeper.pid}")
        output, _ = follower.communicate(timeout=60)
        self.assertEqual(follower.returncode, 1, output)
        self.assertIn("never appeared (the trainer is gone); nothing is stored", output)
        self.assertFalse(os.path.exists(self.store))

    def test_a_corrupt_record_stops_following_and_keeps_what_came_before(self):
        writer = self.writer(nan_at=-1, last=20)
        writer.wait(timeout=60)
        event_file = [os.path.join(self.logdir, f) for f in os.listdir(self.logdir)][0]
        with open(event_file, "ab") as f:
            f.write(b"\x05\x00\x00\x00\x00\x00\x00\x00" + b"\x00" * 13)  # a length whose CRC is wrong
        follower = self.follower("tb-bad")
        output, _ = follower.communicate(timeout=60)
        self.assertEqual(follower.returncode, 1, output)
        self.assertIn("the CRC of its length does not match", output)
        steps = self.query("SELECT MAX(m.step) FROM metrics m JOIN metric_keys k ON k.id = m.key_id "
                           "WHERE k.name = 'loss'")
        self.assertEqual(steps, [(20,)])


if __name__ == "__main__":
    unittest.main()
