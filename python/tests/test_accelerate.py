"""hlat.accelerate.HlatTracker in a real Accelerator (the pinned release, on the CPU): a tiny
LlamaForCausalLM (random weights from a config) trained 50 steps of motif data in the loop
Accelerate's docs write. The run's loss, internals and config are stored; an lr x30 fault of the
loop's own scheduler over steps 30-49 is flagged by update_ratio within 2 steps, 4 clean seeds
raise nothing at warn or above; a halt pressed on the page stops the loop at should_stop with
Accelerate's own checkpoint (save_state) on disk and the run "halted"."""
import os
import tempfile
import unittest

import torch
from accelerate import Accelerator

from support import ServerTestCase, TOKEN
from test_transformers import DETECTORS, FAULT, STEPS, Motifs, tiny_llama
from hlat.accelerate import HlatTracker


def train(name, url, seed=0, fault=None, steps=STEPS):
    """Returns (the last step trained, the folder of a halt's checkpoint or None)."""
    tracker = HlatTracker(name, url=url, token=TOKEN, precision="fp32", detectors=DETECTORS)
    accelerator = Accelerator(log_with=[tracker], cpu=True)
    accelerator.init_trackers("hlat-tests", config={"seed": seed, "steps": steps})
    model = tiny_llama(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))

    def schedule(step):  # 5 warm-up steps, then flat; x30 over the fault's steps
        factor = 30.0 if fault and fault[0] <= step < fault[0] + fault[1] else 1.0
        return min(1.0, (step + 1) / 5) * factor
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    data = torch.utils.data.DataLoader(Motifs(seed, 4 * steps), batch_size=4)
    model, optimizer, data, scheduler = accelerator.prepare(model, optimizer, data, scheduler)
    tracker.watch(model, optimizer)
    saved, step = None, -1
    for step, batch in enumerate(data):
        loss = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        accelerator.log({"loss": loss.item()}, step=step)
        if tracker.should_stop(step):
            saved = tempfile.mkdtemp(prefix="hlat-accelerate-halt-")
            accelerator.save_state(saved)
            break
    accelerator.end_training()
    return step, saved


class AccelerateTracker(ServerTestCase):
    def alerts(self, name):
        return [a for a in self.server.get(f"/api/v1/runs/{name}/alerts")["alerts"] if a["severity"] != "info"]

    def test_a_run_is_stored_and_an_lr_fault_is_flagged(self):
        train("acc-fault", self.server.url, fault=FAULT)
        run = self.server.runs()["acc-fault"]
        self.assertEqual(run["status"], "finished")
        self.assertEqual(run["config"]["steps"], STEPS)
        self.assertEqual(self.server.steps("acc-fault"), list(range(STEPS)))
        vectors = {v["key"] for v in self.server.get("/api/v1/runs/acc-fault/keys")["vectors"]}
        self.assertTrue({"update_ratio", "attn_entropy", "residual_rms"} <= vectors, vectors)
        flagged = [a for a in self.alerts("acc-fault") if a["kind"] == "update_ratio"]
        self.assertTrue(flagged, self.alerts("acc-fault"))
        self.assertTrue(FAULT[0] <= flagged[0]["step"] <= FAULT[0] + 2, flagged[0])

    def test_clean_seeds_raise_nothing(self):
        for seed in range(1, 5):
            train(f"acc-clean-{seed}", self.server.url, seed=seed)
            self.assertEqual(self.alerts(f"acc-clean-{seed}"), [], f"seed {seed}")

    def test_a_halt_from_the_page_stops_the_loop_with_a_checkpoint(self):
        name = "acc-halt"

        presser = self.server.halt_after(name)  # as the page's Halt button, once the run has 10 steps
        stopped, saved = train(name, self.server.url, steps=400)
        presser.join()
        self.assertLess(stopped, 399, "the halt did not stop the loop")
        self.assertIsNotNone(saved)
        self.assertTrue(any(f.startswith("model") for f in os.listdir(saved)), os.listdir(saved))
        self.assertEqual(self.server.runs()[name]["status"], "halted")


if __name__ == "__main__":
    unittest.main()
