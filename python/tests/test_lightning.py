"""hlat.lightning.HlatLogger in a real lightning.Trainer (the pinned release, on the CPU): a tiny
LlamaForCausalLM (random weights from a config) in a LightningModule, 50 steps of motif data. The
run's loss, internals and hyperparameters are stored; an lr x30 fault of the module's own
scheduler over steps 30-49 is flagged by update_ratio within 2 steps, 4 clean seeds raise nothing
at warn or above; a halt pressed on the page stops fit() with the Trainer's checkpoint on disk and
the run "halted"."""
import os
import tempfile
import unittest

import lightning
import torch

from support import ServerTestCase, TOKEN
from test_transformers import DETECTORS, FAULT, STEPS, Motifs, tiny_llama
from hlat.lightning import HlatLogger


class TinyLlama(lightning.LightningModule):
    def __init__(self, seed, fault=None):
        super().__init__()
        self.save_hyperparameters()
        self.model = tiny_llama(seed)

    def training_step(self, batch, batch_idx):
        loss = self.model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3, betas=(0.9, 0.95))
        fault = self.hparams.fault

        def schedule(step):  # 5 warm-up steps, then flat; x30 over the fault's steps
            factor = 30.0 if fault and fault[0] <= step < fault[0] + fault[1] else 1.0
            return min(1.0, (step + 1) / 5) * factor
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.LambdaLR(optimizer, schedule), "interval": "step"}}


def fit(name, url, seed=0, fault=None, steps=STEPS):
    folder = tempfile.mkdtemp(prefix="hlat-lightning-")
    hl = HlatLogger(name, url=url, token=TOKEN, watch=True, precision="fp32", detectors=DETECTORS)
    trainer = lightning.Trainer(max_steps=steps, logger=hl, callbacks=[hl], log_every_n_steps=1, accelerator="cpu",
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                default_root_dir=folder)
    data = torch.utils.data.DataLoader(Motifs(seed, 4 * steps), batch_size=4)
    trainer.fit(TinyLlama(seed, fault), data)
    return trainer, folder


class LightningTrainer(ServerTestCase):
    def alerts(self, name):
        return [a for a in self.server.get(f"/api/v1/runs/{name}/alerts")["alerts"] if a["severity"] != "info"]

    def test_a_run_is_stored_and_an_lr_fault_is_flagged(self):
        fit("pl-fault", self.server.url, fault=FAULT)
        run = self.server.runs()["pl-fault"]
        self.assertEqual(run["status"], "finished")
        self.assertEqual(run["config"]["hparams"]["seed"], 0)
        self.assertEqual(len(self.server.steps("pl-fault")), STEPS, "the module's loss, every step")
        vectors = {v["key"] for v in self.server.get("/api/v1/runs/pl-fault/keys")["vectors"]}
        self.assertTrue({"update_ratio", "attn_entropy", "residual_rms"} <= vectors, vectors)
        flagged = [a for a in self.alerts("pl-fault") if a["kind"] == "update_ratio"]
        self.assertTrue(flagged, self.alerts("pl-fault"))
        self.assertTrue(FAULT[0] <= flagged[0]["step"] <= FAULT[0] + 2, flagged[0])

    def test_clean_seeds_raise_nothing(self):
        for seed in range(1, 5):
            fit(f"pl-clean-{seed}", self.server.url, seed=seed)
            self.assertEqual(self.alerts(f"pl-clean-{seed}"), [], f"seed {seed}")

    def test_an_exception_in_fit_ends_the_run_crashed(self):
        class Broken(TinyLlama):
            def training_step(self, batch, batch_idx):
                if batch_idx == 3:
                    raise RuntimeError("a bad shard")
                return super().training_step(batch, batch_idx)
        hl = HlatLogger("pl-crash", url=self.server.url, token=TOKEN)
        trainer = lightning.Trainer(max_steps=20, logger=hl, callbacks=[hl], log_every_n_steps=1, accelerator="cpu",
                                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                    default_root_dir=tempfile.mkdtemp(prefix="hlat-lightning-"))
        with self.assertRaisesRegex(RuntimeError, "a bad shard"):
            trainer.fit(Broken(0), torch.utils.data.DataLoader(Motifs(0, 80), batch_size=4))
        self.assertEqual(self.server.runs()["pl-crash"]["status"], "crashed")

    def test_a_halt_from_the_page_stops_fit_with_a_checkpoint(self):
        name = "pl-halt"

        presser = self.server.halt_after(name)  # as the page's Halt button, once the run has 10 steps
        trainer, folder = fit(name, self.server.url, steps=400)
        presser.join()
        self.assertLess(trainer.global_step, 400, "the halt did not stop fit()")
        self.assertTrue(os.path.exists(os.path.join(folder, f"hlat-halt-step={trainer.global_step}.ckpt")),
                        os.listdir(folder))
        self.assertEqual(self.server.runs()[name]["status"], "halted")


if __name__ == "__main__":
    unittest.main()
