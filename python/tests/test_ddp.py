"""The client in a real DistributedDataParallel job (2 processes, gloo), written as nanoGPT
writes its W&B lines: only rank 0 calls run.log, every rank calls run.should_stop(step) (the
one collective of the client's halt, never inside log). A clean job runs to its end; a halt
pressed through the API stops both ranks at the same step within 2 steps; and under global
gradient clipping, one rank whose all-reduce skips one tensor is named by that tensor when the
replica check runs between backward and clipping (after the step, clipping spreads the
difference to every parameter)."""
import datetime
import faulthandler
import json
import os
import re
import sys
import tempfile
import time
import unittest
import urllib.request

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from support import ServerTestCase, TOKEN, free_port
import hlat
import hlat.torch

CHECK_EVERY = 5
FAULT_STEP = 7
HALT_AT = 10
STEPS = 30
CLIP = 0.05  # small enough that every step is clipped: one tensor's gradient changes the scale of all


def skipping_hook(target, fault_rank):
    """Averages each bucket like DDP's default hook, except that on fault_rank, from FAULT_STEP
    on, one tensor keeps its local gradient: an all-reduce bug that the loss curve hides."""
    def hook(state, bucket):
        buf = bucket.buffer()
        buf.div_(dist.get_world_size())
        local = buf.clone()
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def keep_local(f):
            out = f.value()[0]
            if dist.get_rank() == fault_rank and state["step"] >= FAULT_STEP:
                offset = 0
                for p in bucket.parameters():
                    if p is target:
                        out[offset:offset + p.numel()] = local[offset:offset + p.numel()]
                    offset += p.numel()
            return out
        return fut.then(keep_local)
    return hook


def press_halt(url, name):
    req = urllib.request.Request(f"{url}/api/v1/runs/{name}/halt", data=b"", method="POST",
                                 headers={"X-HLAT-Token": TOKEN})
    urllib.request.urlopen(req).read()


def worker(rank, world, port, url, name, scenario, out_dir):
    faulthandler.dump_traceback_later(40, exit=True)  # a hang fails with every thread's stack, not silently
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)  # the same initial weights on both ranks, as DDP broadcasts anyway
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
    model = torch.nn.parallel.DistributedDataParallel(net)
    state = {"step": 0}
    if scenario == "fault":
        model.register_comm_hook(state, skipping_hook(net[2].weight, fault_rank=1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    run = hlat.init(name, url=url, token=TOKEN, max_lag_steps=1)  # every rank; only rank 0 talks to hlat
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own data, as in data parallelism
    stopped, agree_s = None, []
    for step in range(STEPS):
        state["step"] = step
        x = torch.randn(64, 16, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), x[:, :1] - x[:, 1:2])
        opt.zero_grad()
        loss.backward()
        if step % CHECK_EVERY == 0:
            hlat.torch.check_replicas(run, model, step)  # every rank, between backward and clipping
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        if rank == 0:  # nanoGPT's `if master_process:` block
            if scenario == "halt" and step == HALT_AT:
                press_halt(url, name)
            run.log({"loss": loss.detach(), "grad_norm": norm}, step=step)
        t0 = time.perf_counter()
        stop = run.should_stop(step)  # every rank: the ranks agree, and all leave at this step
        agree_s.append(time.perf_counter() - t0)
        if stop:
            stopped = step
            break
    run.finish()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"stopped": stopped, "should_stop_us": 1e6 * sorted(agree_s)[len(agree_s) // 2]}, f)
    dist.destroy_process_group()
    # Interpreter teardown of a spawned gloo worker hung about one run in three (after
    # this function returned, in torch's spawn wrapper); the results are written.
    os._exit(0)


class RankZeroLogging(ServerTestCase):
    def launch(self, name, scenario):
        out = tempfile.mkdtemp(prefix="hlat-ddp-")
        mp.spawn(worker, args=(2, free_port(), self.server.url, name, scenario, out), nprocs=2, join=True)
        result = []
        for r in range(2):
            with open(os.path.join(out, f"rank{r}.json")) as f:
                ended = json.load(f)
            result.append(ended["stopped"])
            print(f"\n    {name} rank {r}: should_stop took {ended['should_stop_us']:.0f} us (median)", file=sys.stderr)
        return result

    def test_a_clean_job_logging_from_rank_0_only_runs_to_its_end(self):
        self.assertEqual(self.launch("ddp-clean", "clean"), [None, None])
        self.assertEqual(self.server.get("/api/v1/runs/ddp-clean/alerts")["alerts"], [])
        self.assertEqual(self.server.steps("ddp-clean"), list(range(STEPS)))
        self.assertEqual(self.server.steps("ddp-clean", "replica_mismatch"), list(range(0, STEPS, CHECK_EVERY)))
        points = self.server.get("/api/v1/runs/ddp-clean/series?key=replica_mismatch")["points"]
        self.assertEqual([p[1] for p in points], [0.0] * (STEPS // CHECK_EVERY))
        self.assertEqual(self.server.runs()["ddp-clean"]["status"], "finished")

    def test_a_halt_pressed_on_the_page_stops_both_ranks_at_the_same_step(self):
        stopped = self.launch("ddp-halt", "halt")
        print(f"\n    halt pressed at step {HALT_AT}; the ranks stopped at steps {stopped}", file=sys.stderr)
        self.assertEqual(stopped[0], stopped[1], "both ranks stop at the same step")
        self.assertIsNotNone(stopped[0])
        self.assertLessEqual(stopped[0] - HALT_AT, 2)
        self.assertEqual(self.server.runs()["ddp-halt"]["status"], "halted")

    def test_a_skipped_tensor_is_named_under_global_clipping(self):
        stopped = self.launch("ddp-bug", "fault")
        alerts = self.server.get("/api/v1/runs/ddp-bug/alerts")["alerts"]
        self.assertEqual([a["kind"] for a in alerts], ["replica_mismatch"], alerts)
        message = alerts[0]["message"]
        self.assertIn("rank 1 differs from rank 0 in 1 gradient tensor(s)", message)
        self.assertEqual(re.search(r'first "([^"]+)"', message).group(1), "module.2.weight", message)
        self.assertLessEqual(alerts[0]["step"], FAULT_STEP + CHECK_EVERY)
        self.assertEqual(stopped[0], stopped[1], "both ranks stop at the same step")
        self.assertIsNotNone(stopped[0])
        self.assertLessEqual(stopped[0] - alerts[0]["step"], 2)


if __name__ == "__main__":
    unittest.main()
