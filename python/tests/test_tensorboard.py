"""hlat ingest of TensorBoard event files written here by an independent writer: Python's
protobuf from the public schema's field numbers, TFRecord framing with a bitwise CRC-32C
(checked against the Castagnoli check value). A log directory gives one run per folder; a flipped byte or a cut-short
file is an error naming the file and offset, and writes nothing."""
import json
import os
import sqlite3
import struct
import subprocess
import sys
import tempfile
import unittest

HLAT = os.environ.get("HLAT_BINARY", "hlat")
PROTO_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "telemetry", "proto")


def _crc32c_table():
    table = []
    for byte in range(256):
        c = byte
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # the Castagnoli polynomial, reflected
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(payload):
    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", masked(header)) + payload + struct.pack("<I", masked(payload))


class TensorBoardIngest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="hlat-tb-")
        subprocess.run(["protoc", f"--python_out={cls.tmp}", f"-I{PROTO_DIR}", "tensorboard_event.proto"], check=True)
        sys.path.insert(0, cls.tmp)
        import tensorboard_event_pb2
        cls.pb = tensorboard_event_pb2

    def write(self, path, scalars, tensor_style=False):
        """scalars: (step, tag, value, wall_time); the first record is the file_version event."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(record(self.pb.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString()))
            for step, tag, value, t in scalars:
                e = self.pb.Event(wall_time=t, step=step)
                v = e.summary.value.add(tag=tag)
                if tensor_style:  # what TF2 and SummaryWriter(new_style=True) write
                    v.metadata.plugin_data.plugin_name = "scalars"
                    v.tensor.dtype = 1
                    v.tensor.float_val.append(value)
                else:
                    v.simple_value = value
                f.write(record(e.SerializeToString()))

    def ingest(self, store, *args):
        return subprocess.run([HLAT, "ingest", "--store", store, *args], capture_output=True, text=True)

    def test_crc32c_is_the_castagnoli_check_value(self):
        self.assertEqual(crc32c(b"123456789"), 0xE3069283)

    def test_a_log_directory_is_one_run_per_folder(self):
        logdir = os.path.join(self.tmp, "logs")
        self.write(os.path.join(logdir, "train", "events.out.tfevents.1700000000.host.1.0"),
                   [(s, "train/loss", 3.0 - 0.1 * s, 1.7e9 + s) for s in range(10)] +
                   [(s, "grad_norm", 1.0, 1.7e9 + s) for s in range(10)])
        self.write(os.path.join(logdir, "eval", "events.out.tfevents.1700000000.host.1.1"),
                   [(5, "eval/loss", 2.5, 1.7e9 + 5)], tensor_style=True)
        store = os.path.join(self.tmp, "dir.db")
        r = self.ingest(store, "--run", "tb", "--map", "train/loss=loss", logdir)
        self.assertEqual(r.returncode, 0, r.stderr)
        db = sqlite3.connect(store)
        runs = dict(db.execute("SELECT name, id FROM runs"))
        self.assertEqual(set(runs), {"tb/train", "tb/eval"})
        loss = db.execute("SELECT m.step, m.value, m.wall_time FROM metrics m JOIN metric_keys k ON k.id = m.key_id "
                          "WHERE k.name = 'loss' AND m.run_id = ? ORDER BY m.step", (runs["tb/train"],)).fetchall()
        self.assertEqual(len(loss), 10)
        self.assertAlmostEqual(loss[3][1], 2.7, places=6)  # float32, as TensorBoard stores it
        self.assertEqual(loss[3][2], 1.7e9 + 3)
        # Hugging Face's eval/loss is read as hlat's held-out loss
        ev = db.execute("SELECT value FROM metrics m JOIN metric_keys k ON k.id = m.key_id "
                        "WHERE k.name = 'heldout_loss'").fetchall()
        self.assertEqual(ev, [(2.5,)])
        meta = db.execute("SELECT meta FROM runs WHERE name = 'tb/train'").fetchone()[0]
        self.assertIn('"format":"tensorboard"', meta)

    def alerts(self, store, run):
        db = sqlite3.connect(store)
        return db.execute("SELECT a.step, a.kind, a.message FROM alerts a JOIN runs r ON r.id = a.run_id "
                          "WHERE r.name = ? ORDER BY a.step, a.kind", (run,)).fetchall()

    def test_other_trainers_names_feed_the_detectors_without_a_map(self):
        """Hugging Face's TensorBoard tags and W&B-style JSONL keys raise what hlat's own names raise."""
        def f32(x):
            return struct.unpack("<f", struct.pack("<f", x))[0]
        steps = []
        for s in range(300):
            loss = f32(4.0 - s / 200.0 + (s % 7) / 64.0)
            grad = f32(1.0 + (s % 5) / 32.0) * (40.0 if s == 150 else 1.0)  # a one-step spike
            if s >= 250:
                loss = grad = float("nan")  # and non-finite from step 250 on
            steps.append((s, loss, grad, f32(3e-4)))
        store = os.path.join(self.tmp, "aliases.db")
        path = os.path.join(self.tmp, "hf", "events.out.tfevents.1700000000.host.1.0")
        self.write(path, [(s, tag, v, 1.7e9 + s) for s, loss, grad, lr in steps
                          for tag, v in (("train/loss", loss), ("train/grad_norm", grad), ("train/lr", lr))])
        r = self.ingest(store, "--run", "hf-tensorboard", os.path.dirname(path))  # the event directory
        self.assertEqual(r.returncode, 0, r.stderr)

        def jsonl(name, keys):
            with open(os.path.join(self.tmp, name), "w") as f:
                for s, loss, grad, lr in steps:
                    f.write(json.dumps({"step": s, keys[0]: loss, keys[1]: grad, keys[2]: lr}) + "\n")
            return os.path.join(self.tmp, name)
        r = self.ingest(store, "--run", "wandb-style", jsonl("wandb.jsonl", ("train/loss", "train/grad_norm", "train/lr")))
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.ingest(store, "--run", "hlat-names", jsonl("hlat.jsonl", ("loss", "grad_norm", "lr")))
        self.assertEqual(r.returncode, 0, r.stderr)

        own = self.alerts(store, "hlat-names")
        kinds = {kind for _, kind, _ in own}
        self.assertIn("grad_spike", kinds)
        self.assertIn("nonfinite", kinds)
        self.assertEqual([a for a in own if a[1] == "grad_spike"][0][0], 150)
        self.assertEqual(min(step for step, kind, _ in own if kind == "nonfinite"), 250)
        self.assertEqual(self.alerts(store, "hf-tensorboard"), own)
        self.assertEqual(self.alerts(store, "wandb-style"), own)
        db = sqlite3.connect(store)
        keys = {k for (k,) in db.execute("SELECT DISTINCT k.name FROM metrics m JOIN metric_keys k ON k.id = m.key_id "
                                         "JOIN runs r ON r.id = m.run_id WHERE r.name = 'hf-tensorboard'")}
        self.assertEqual(keys, {"loss", "grad_norm", "lr"}, "stored under hlat's keys, so the page's panels draw them")

    def test_a_run_no_detector_reads_says_so(self):
        path = os.path.join(self.tmp, "unwatched.jsonl")
        with open(path, "w") as f:
            for s in range(20):
                f.write(json.dumps({"step": s, "my_objective": 3.0 - s / 10, "acc": s / 20}) + "\n")
        store = os.path.join(self.tmp, "unwatched.db")
        r = self.ingest(store, "--run", "unwatched", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        log = r.stdout + r.stderr
        self.assertIn('run "unwatched" is not watched', log)
        self.assertIn("my_objective", log)
        db = sqlite3.connect(store)
        notes = db.execute("SELECT detail FROM events e JOIN runs r ON r.id = e.run_id "
                           "WHERE r.name = 'unwatched' AND e.kind = 'unwatched'").fetchall()
        self.assertEqual(len(notes), 1, "said once, and kept for the page")
        self.assertIn("my_objective", notes[0][0])

    def test_corrupt_and_truncated_files_are_refused_whole(self):
        path = os.path.join(self.tmp, "bad", "events.out.tfevents.1.host")
        self.write(path, [(s, "loss", 1.0, 1.7e9) for s in range(5)])
        data = bytearray(open(path, "rb").read())
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0xFF
        store = os.path.join(self.tmp, "bad.db")
        open(path, "wb").write(flipped)
        r = self.ingest(store, "--run", "bad", path)
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"events\.out\.tfevents\.1\.host: record at byte offset \d+: the CRC")
        open(path, "wb").write(data[:-7])
        r = self.ingest(store, "--run", "bad", path)
        self.assertEqual(r.returncode, 1)
        self.assertIn("cut short", r.stderr)
        self.assertFalse(os.path.exists(store) and sqlite3.connect(store).execute(
            "SELECT count(*) FROM sqlite_master WHERE name = 'runs'").fetchone()[0] and sqlite3.connect(store).execute(
            "SELECT count(*) FROM runs").fetchone()[0], "nothing written")


if __name__ == "__main__":
    unittest.main()
