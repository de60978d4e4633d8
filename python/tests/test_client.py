"""The Python client against a real `hlat serve`: a PyTorch LM trained through it with an
injected lr spike is halted by the detector within 2 steps; a halt pressed through the API
stops a clean loop the same way; the causality probe flags a leaking mask before step 1."""
import math
import unittest

import torch

from support import Server, TinyLM, TOKEN, batches
import hlat
import hlat.torch


def train(run, model, steps, spike_at=None, lr=3e-3, on_step=None):
    """A plain loop with the client's ~6 added lines. Returns the step at which it stopped."""
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    data = batches()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * (300.0 if step == spike_at else 1.0)
        seq = next(data)
        logits = model(seq[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), seq[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        norms = hlat.torch.grad_norms(model)                       # hlat: pre-clip norms, no host sync
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if on_step:
            on_step(step)
        try:
            run.log({"loss": loss.detach(), "lr": opt.param_groups[0]["lr"], **norms,
                     **hlat.torch.param_norm(model)}, step=step)   # hlat: raises HaltRequested
        except hlat.HaltRequested:
            return step
    return None


class ClientEndToEnd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def init(self, name, **kw):
        return hlat.init(name, url=self.server.url, token=TOKEN, max_lag_steps=1, **kw)

    def test_lr_spike_is_alerted_and_halts_the_loop(self):
        run = self.init("spike", config={"model": "tiny"}, precision="fp32",
                        detectors={"grad_spike": {"policy": "halt"}})
        stopped = train(run, TinyLM(), 80, spike_at=40)
        run.finish()
        alerts = self.server.get("/api/v1/runs/spike/alerts")["alerts"]
        spikes = [a for a in alerts if a["kind"] == "grad_spike"]
        self.assertTrue(spikes, f"no grad_spike alert in {alerts}")
        self.assertGreaterEqual(spikes[0]["step"], 40)
        self.assertIsNotNone(stopped, "the loop was not halted")
        self.assertLessEqual(stopped - spikes[0]["step"], 2, f"alert at {spikes[0]['step']}, loop stopped at {stopped}")
        runs = {r["name"]: r for r in self.server.get("/api/v1/runs")["runs"]}
        self.assertEqual(runs["spike"]["status"], "halted")
        self.assertEqual(runs["spike"]["precision"], "fp32")
        self.assertGreaterEqual(runs["spike"]["alerts"], 1)
        keys = self.server.get("/api/v1/runs/spike/keys")["keys"]
        self.assertIn("grad_norm/head.weight", keys, "per-tensor gradient norms arrive")
        self.assertIn("param_norm", keys)
        self.assertEqual(run.stats["retries"], 0)

    def test_halt_from_the_page_stops_a_clean_loop(self):
        run = self.init("pressed")
        pressed = {}

        def press(step):
            if step == 10:
                reply = self.server.post("/api/v1/runs/pressed/halt")
                self.assertIn("HaltRequested", reply["halt"])
                pressed["step"] = step

        stopped = train(run, TinyLM(), 60, on_step=press)
        run.finish()
        self.assertIsNotNone(stopped)
        self.assertLessEqual(stopped - pressed["step"], 2)
        self.assertEqual(self.server.get("/api/v1/runs/pressed/alerts")["alerts"], [], "a clean run raises nothing")
        runs = {r["name"]: r for r in self.server.get("/api/v1/runs")["runs"]}
        self.assertEqual(runs["pressed"]["status"], "halted")

    def test_system_metrics_fill_the_pages_system_panel(self):
        system = hlat.torch.SystemMetrics()
        sum(i * i for i in range(300000))  # some CPU time to measure
        values = system()
        self.assertGreater(values["cpu_pct"], 1.0)
        self.assertGreater(values["rss_mb"], 10.0)  # an interpreter with torch loaded
        run = self.init("system")
        run.log({"loss": 2.0, **values}, step=0)
        run.finish()
        keys = self.server.get("/api/v1/runs/system/keys")["keys"]
        self.assertTrue({"cpu_pct", "rss_mb"} <= set(keys), keys)

    def test_nonfinite_values_are_kept(self):
        run = self.init("nan", detectors={"nonfinite": {"policy": "warn"}})
        for step in range(5):
            run.log({"loss": float("nan") if step == 3 else 1.0, "grad_norm": math.inf if step == 4 else 1.0}, step=step)
        run.finish()
        alerts = self.server.get("/api/v1/runs/nan/alerts")["alerts"]
        self.assertEqual([a["step"] for a in alerts], [3, 4])
        self.assertIn("not finite", alerts[0]["message"])
        points = self.server.get("/api/v1/runs/nan/series?key=loss")["points"]
        self.assertEqual(len(points), 5)
        self.assertIsNone(points[3][1], "NaN is stored (and served as null)")

    def test_causality_probe_flags_a_leaking_mask_before_step_one(self):
        torch.manual_seed(0)
        leaky = self.init("leaky")
        with self.assertRaises(hlat.HaltRequested) as caught:
            hlat.torch.probe_causality(leaky, TinyLM(leak=True).eval(), vocab_size=64, seq_len=32)
        self.assertIn("information_leak", caught.exception.reason)
        leaky.finish()
        alerts = self.server.get("/api/v1/runs/leaky/alerts")["alerts"]
        self.assertEqual([a["kind"] for a in alerts], ["information_leak"])

        sound = self.init("sound")
        self.assertEqual(hlat.torch.probe_causality(sound, TinyLM().eval(), vocab_size=64, seq_len=32), 0.0)
        stopped = train(sound, TinyLM(), 5)
        self.assertIsNone(stopped)
        sound.finish()
        self.assertEqual(self.server.get("/api/v1/runs/sound/alerts")["alerts"], [])


if __name__ == "__main__":
    unittest.main()
