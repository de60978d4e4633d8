"""Every rank logs (issue 54): in a job of 3 processes (gloo) whose main rank is the last (a
pipeline's last stage, which holds the loss: hlat.init(main_rank=2)), every rank calls
run.log_rank with its step's compute seconds and run.log with a number of its own; the main rank
sends the run's loss. The server keeps one value per rank and step under rank/<key> (the page's
per-rank charts), the loss once a step, and the straggler detector sees a rank slowed 4x: alerted
within its 5 steps, naming that rank; the same job with no slow rank raises nothing."""
import datetime
import faulthandler
import json
import os
import tempfile
import time
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from support import ServerTestCase, TOKEN, free_port
import hlat

WORLD = 3
MAIN = 2
STEPS = 40
SLOW_RANK, SLOW_FROM = 1, 20
WORK_S = 0.01


def worker(rank, port, url, name, slow, out_dir):
    faulthandler.dump_traceback_later(60, exit=True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    run = hlat.init(name, url=url, token=TOKEN, main_rank=MAIN)
    for step in range(STEPS):
        t0 = time.perf_counter()
        time.sleep(WORK_S * (4 if slow and rank == SLOW_RANK and step >= SLOW_FROM else 1))  # the step's compute
        compute = time.perf_counter() - t0
        run.log_rank({"compute_s": compute}, step=step)
        if rank == MAIN:
            run.log({"loss": 5.0 - step / STEPS}, step=step)   # the run's own: the last stage's loss
        else:
            run.log({"stage_loss": float(rank)}, step=step)    # elsewhere, log() is this rank's
        if run.should_stop(step):
            break
    run.finish()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"done": True}, f)
    dist.destroy_process_group()
    os._exit(0)  # see test_ddp.py: a spawned gloo worker's teardown may hang


class EveryRankLogs(ServerTestCase):
    def launch(self, name, slow):
        out = tempfile.mkdtemp(prefix="hlat-ranks-")
        mp.spawn(worker, args=(free_port(), self.server.url, name, slow, out), nprocs=WORLD, join=True)
        for r in range(WORLD):
            self.assertTrue(os.path.exists(os.path.join(out, f"rank{r}.json")), f"rank {r} did not finish")

    def rank_points(self, name, key):
        """{rank: [steps]} of a per-rank key."""
        reply = self.server.get(f"/api/v1/runs/{name}/rank_series?key={key}")
        return {int(rank): [p[0] for p in points] for rank, points in reply["ranks"].items()}, reply

    def test_each_ranks_numbers_arrive_once_and_a_slow_rank_is_named(self):
        self.launch("ranks-slow", slow=True)
        self.assertEqual(self.server.steps("ranks-slow"), list(range(STEPS)), "the main rank's loss, once a step")
        keys = self.server.get("/api/v1/runs/ranks-slow/keys")["rank_keys"]
        self.assertIn("rank/compute_s", keys)
        self.assertIn("rank/stage_loss", keys)
        points, reply = self.rank_points("ranks-slow", "rank/compute_s")
        self.assertEqual(sorted(points), list(range(WORLD)), reply)
        for rank in range(WORLD):
            self.assertEqual(points[rank], list(range(STEPS)), f"rank {rank}'s compute_s, once a step")
        stage, reply = self.rank_points("ranks-slow", "rank/stage_loss")
        self.assertEqual(sorted(stage), [0, 1], "log() on the main rank is the run's, not a rank's")
        alerts = [a for a in self.server.get("/api/v1/runs/ranks-slow/alerts")["alerts"] if a["kind"] == "straggler"]
        self.assertTrue(alerts, "no straggler alert")
        self.assertIn(f"rank {SLOW_RANK} is a straggler", alerts[0]["message"])
        self.assertTrue(SLOW_FROM <= alerts[0]["step"] <= SLOW_FROM + 5, alerts[0])

    def test_no_slow_rank_raises_nothing(self):
        self.launch("ranks-even", slow=False)
        raised = [a for a in self.server.get("/api/v1/runs/ranks-even/alerts")["alerts"] if a["severity"] != "info"]
        self.assertEqual(raised, [])


if __name__ == "__main__":
    unittest.main()
