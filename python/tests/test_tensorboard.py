"""hlat ingest of TensorBoard event files written here by an independent writer: Python's
protobuf (python3-protobuf) from the public schema's field numbers, TFRecord framing with
crcmod's CRC-32C. A log directory gives one run per folder; a flipped byte or a cut-short
file is an error naming the file and offset, and writes nothing."""
import os
import sqlite3
import struct
import subprocess
import sys
import tempfile
import unittest

import crcmod.predefined

HLAT = os.environ.get("HLAT_BINARY", "hlat")
PROTO_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "telemetry", "proto")
crc32c = crcmod.predefined.mkCrcFun("crc-32c")


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
        ev = db.execute("SELECT value FROM metrics m JOIN metric_keys k ON k.id = m.key_id "
                        "WHERE k.name = 'eval/loss'").fetchall()
        self.assertEqual(ev, [(2.5,)])
        meta = db.execute("SELECT meta FROM runs WHERE name = 'tb/train'").fetchone()[0]
        self.assertIn('"format":"tensorboard"', meta)

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
