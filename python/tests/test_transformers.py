"""hlat.transformers.HlatCallback in a real transformers.Trainer (the pinned release, on the CPU):
a tiny LlamaForCausalLM from a config (random weights, no download) trained 50 steps on motif
data. The run's curves (the Trainer's loss, grad_norm, learning_rate), its internals and its
TrainingArguments are stored; an lr x30 fault of the test's own scheduler over steps 30-49 is
flagged by update_ratio within 2 steps, 4 clean seeds raise nothing at warn or above; a halt
pressed on the page stops training at a step end with the Trainer's own checkpoint on disk, and
the run ends "halted"."""
import os
import subprocess
import sys
import tempfile
import unittest

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from support import ServerTestCase, TOKEN, batches
from hlat.transformers import HlatCallback

STEPS = 50
FAULT = (30, 20)
DETECTORS = {"update_ratio": {"warmup_steps": 20}}  # a 5-step warm-up here, not hundreds


class Motifs(torch.utils.data.Dataset):
    def __init__(self, seed, n):
        data = batches(vocab=128, seq=32, batch=n, seed=seed)
        self.rows = next(data)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


def tiny_llama(seed):
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))


def train(name, url, seed=0, fault=None, steps=STEPS, halt=None):
    """Trains through a Trainer with the callback; returns (trainer, output folder)."""
    out = tempfile.mkdtemp(prefix="hlat-hf-")
    model = tiny_llama(seed)
    args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=4, learning_rate=1e-3,
                             logging_steps=1, save_strategy="no", report_to=[], seed=seed, use_cpu=True,
                             dataloader_num_workers=0, disable_tqdm=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))

    def schedule(step):  # 5 warm-up steps, then flat; x30 over the fault's steps
        factor = 30.0 if fault and fault[0] <= step + 1 < fault[0] + fault[1] else 1.0
        return min(1.0, (step + 1) / 5) * factor
    trainer = Trainer(model=model, args=args, train_dataset=Motifs(seed, 4 * steps),
                      optimizers=(optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)),
                      callbacks=[HlatCallback(name, url=url, token=TOKEN, watch=True, precision="fp32",
                                              detectors=DETECTORS)])
    trainer.train()
    return trainer, out


class HuggingFaceTrainer(ServerTestCase):
    def alerts(self, name):
        return [a for a in self.server.get(f"/api/v1/runs/{name}/alerts")["alerts"] if a["severity"] != "info"]

    def test_a_run_is_stored_and_an_lr_fault_is_flagged(self):
        train("hf-fault", self.server.url, fault=FAULT)
        run = self.server.runs()["hf-fault"]
        self.assertEqual(run["status"], "finished")
        self.assertEqual(run["config"]["training_args"]["max_steps"], STEPS)
        self.assertEqual(self.server.steps("hf-fault"), list(range(1, STEPS + 1)), "the Trainer's loss, every step")
        keys = self.server.get("/api/v1/runs/hf-fault/keys")
        self.assertIn("grad_norm", keys["keys"])
        vectors = {v["key"] for v in keys["vectors"]}
        self.assertTrue({"update_ratio", "attn_entropy", "residual_rms", "tensor_grad_norm"} <= vectors, vectors)
        flagged = [a for a in self.alerts("hf-fault") if a["kind"] == "update_ratio"]
        self.assertTrue(flagged, self.alerts("hf-fault"))
        self.assertTrue(FAULT[0] <= flagged[0]["step"] <= FAULT[0] + 2, flagged[0])

    def test_clean_seeds_raise_nothing(self):
        for seed in range(1, 5):
            train(f"hf-clean-{seed}", self.server.url, seed=seed)
            self.assertEqual(self.alerts(f"hf-clean-{seed}"), [], f"seed {seed}")

    def test_a_trainer_that_raises_ends_its_run_crashed(self):
        """An exception out of trainer.train() ends the script, and the run "crashed"."""
        script = (f"import sys\nsys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
                  "import test_transformers as t\n"
                  "class Broken(t.Motifs):\n"
                  "    def __getitem__(self, i):\n"
                  "        if i >= 12: raise RuntimeError('a bad shard')\n"
                  "        return super().__getitem__(i)\n"
                  "t.Motifs = Broken\n"
                  f"t.train('hf-crash', {self.server.url!r})\n")
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("a bad shard", r.stderr)
        self.assertEqual(self.server.runs()["hf-crash"]["status"], "crashed")

    def test_a_halt_from_the_page_stops_training_with_the_trainers_checkpoint(self):
        name = "hf-halt"

        presser = self.server.halt_after(name)  # as the page's Halt button, once the run has 10 steps
        trainer, out = train(name, self.server.url, steps=400)
        presser.join()
        stopped = trainer.state.global_step
        self.assertLess(stopped, 400, "the halt did not stop the Trainer")
        self.assertTrue(os.path.isdir(os.path.join(out, f"checkpoint-{stopped}")), os.listdir(out))
        self.assertEqual(self.server.runs()[name]["status"], "halted")


if __name__ == "__main__":
    unittest.main()
