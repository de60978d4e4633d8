"""The replica check on a real DistributedDataParallel job (2 processes, gloo): one rank's
gradient all-reduce skips one tensor (a comm hook) and replica_mismatch names that tensor
within one check interval, halting both ranks at the same step; a clean job raises nothing."""
import datetime
import faulthandler
import json
import os
import socket
import tempfile
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from support import ServerTestCase, TOKEN
import hlat
import hlat.torch

CHECK_EVERY = 5
FAULT_STEP = 7
STEPS = 30


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


def worker(rank, world, port, url, name, fault, out_dir):
    faulthandler.dump_traceback_later(40, exit=True)  # a hang fails with every thread's stack, not silently
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)  # the same initial weights on both ranks, as DDP broadcasts anyway
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
    model = torch.nn.parallel.DistributedDataParallel(net)
    state = {"step": 0}
    if fault:
        model.register_comm_hook(state, skipping_hook(net[2].weight, fault_rank=1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    run = hlat.init(name, url=url, token=TOKEN, max_lag_steps=1)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own data, as in data parallelism
    stopped = None
    for step in range(STEPS):
        state["step"] = step
        x = torch.randn(64, 16, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), x[:, :1] - x[:, 1:2])
        opt.zero_grad()
        loss.backward()
        opt.step()
        try:
            if step % CHECK_EVERY == 0:
                hlat.torch.check_replicas(run, model, step)
            run.log({"loss": loss.detach(), "grad_norm": hlat.torch.grad_norms(model, per_tensor=False)["grad_norm"]},
                    step=step)
        except hlat.HaltRequested:
            stopped = step
            break
    run.finish()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"stopped": stopped}, f)
    dist.destroy_process_group()
    # Interpreter teardown of a spawned gloo worker hung about one run in three (after
    # this function returned, in torch's spawn wrapper); the results are written.
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ReplicaCheck(ServerTestCase):
    def launch(self, name, fault):
        out = tempfile.mkdtemp(prefix="hlat-ddp-")
        mp.spawn(worker, args=(2, free_port(), self.server.url, name, fault, out), nprocs=2, join=True)
        result = []
        for r in range(2):
            with open(os.path.join(out, f"rank{r}.json")) as f:
                result.append(json.load(f)["stopped"])
        return result

    def test_a_skipped_tensor_is_named_within_one_check(self):
        stopped = self.launch("ddp-bug", fault=True)
        alerts = self.server.get("/api/v1/runs/ddp-bug/alerts")["alerts"]
        self.assertEqual([a["kind"] for a in alerts], ["replica_mismatch"], alerts)
        self.assertIn('"module.2.weight"', alerts[0]["message"])
        self.assertIn("rank 1 differs from rank 0", alerts[0]["message"])
        self.assertLessEqual(alerts[0]["step"], FAULT_STEP + CHECK_EVERY)
        self.assertEqual(stopped[0], stopped[1], "both ranks stop at the same step")
        self.assertIsNotNone(stopped[0])
        self.assertLessEqual(stopped[0] - alerts[0]["step"], 2)

    def test_a_clean_job_raises_nothing(self):
        self.assertEqual(self.launch("ddp-clean", fault=False), [None, None])
        self.assertEqual(self.server.get("/api/v1/runs/ddp-clean/alerts")["alerts"], [])
        points = self.server.get("/api/v1/runs/ddp-clean/series?key=replica_mismatch")["points"]
        self.assertEqual([p[1] for p in points], [0.0] * (STEPS // CHECK_EVERY))


if __name__ == "__main__":
    unittest.main()
