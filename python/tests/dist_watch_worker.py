"""One rank of a small LLaMA trained with hlat.torch.watch in one of torchtitan's layouts, as a
user launches it: `torchrun --nproc-per-node N dist_watch_worker.py LAYOUT OUT.json [options]`.

LAYOUT: single (one process), fsdp (FSDP2 over every rank), tp (TP over every rank), fsdp_tp
(2 x 2: dp x tp), pp (one pipeline stage a rank, GPipe over 2 micro-batches). Every layout trains
on the same global batch of the same data from the same initial weights, so the watch's
statistics must equal the single process's. Without --url the run is a recorder: rank 0 writes
the watch's resolved keys per step, and every rank the number of collectives each
optimizer.step() issued, to OUT.json (OUT.rankR.json). With --url, each of --runs
(NAME:SEED[:FAULT_START:FAULT_LENGTH],...: the learning rate x30 over the fault's steps) is an hlat
run on that server, one after the other in this one launch.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import hlat  # noqa: E402
import hlat.torch  # noqa: E402
from hlat._records import to_lines  # noqa: E402
from titan_llama import CONFIG, Transformer, fully_shard_model, loss_fn, stage_of, tensor_parallel  # noqa: E402

BATCH = 4
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
               "broadcast_object_list", "reduce_scatter_tensor", "reduce", "gather", "scatter", "all_to_all",
               "all_to_all_single", "barrier")  # not send/recv: P2POp checks it is given dist.isend itself


class Recorder:
    """A run that keeps what it is given (rank 0's), resolved at the end as the sender would."""
    disabled = False

    def __init__(self, rank):
        self.rank, self.records, self.events = rank, [], []
        self.mismatches = {}

    def event(self, kind, detail, step):
        if self.rank == 0:
            self.events.append([kind, step, detail])

    def record(self, values, step):
        if self.rank == 0:
            self.records.append((step, dict(values)))

    def log(self, values, step):
        self.record(values, step)

    def should_stop(self, step):
        return False

    def finish(self):
        pass

    def steps(self):
        lines, _, dropped, _ = to_lines(self.records)
        assert not dropped, dropped
        return {r["step"]: r for r in map(json.loads, lines)}


class Counter:
    """Counts torch.distributed's collectives while `on`."""

    def __init__(self):
        self.on, self.count = False, 0
        for name in COLLECTIVES:
            original = getattr(dist, name, None)
            if original is not None:
                setattr(dist, name, self._wrap(original))

    def _wrap(self, original):
        def counted(*args, **kwargs):
            if self.on:
                self.count += 1
            return original(*args, **kwargs)
        return counted


def data(seed, steps):
    """Per step a global batch (BATCH sequences of seq + 1 tokens) repeating short random motifs:
    learnable, so the loss falls."""
    g = torch.Generator().manual_seed(1000 + seed)
    for _ in range(steps):
        motif = torch.randint(0, CONFIG["vocab"], (BATCH, 4), generator=g)
        yield motif.repeat(1, CONFIG["seq"] // 4 + 1)[:, : CONFIG["seq"] + 1]


def build(layout, rank, world):
    """The model (this rank's part), its data-parallel coordinate and size, and for pp the schedule."""
    from torch.distributed.device_mesh import init_device_mesh
    model = Transformer(seed=0)
    if layout == "single":
        return model, 0, 1, None, None
    if layout == "fsdp":
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
        fully_shard_model(model, mesh)
        return model, rank, world, None, mesh
    if layout == "tp":
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
        tensor_parallel(model, mesh)
        return model, 0, 1, None, mesh
    if layout == "fsdp_tp":
        mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
        tensor_parallel(model, mesh["tp"])
        fully_shard_model(model, mesh["dp"])
        return model, mesh.get_coordinate()[0], world // 2, None, mesh
    if layout == "pp":
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
        stage = PipelineStage(stage_of(model, rank, world), rank, world, torch.device("cpu"))
        model.pipeline_stage = stage  # the watch skips its metadata probe
        return model, 0, 1, ScheduleGPipe(stage, n_microbatches=2, loss_fn=loss_fn), None
    raise SystemExit(f"unknown layout {layout}")


def train(args, run, rank, world, counter):
    model, dp_rank, dp_size, schedule, mesh = build(args.layout, rank, world)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    stage = getattr(model, "pipeline_stage", None)
    watch = hlat.torch.watch(run, model, opt, tensor_sample=None, mesh=mesh, pipeline_stage=stage)
    collectives = []
    for step, tokens in enumerate(data(args.seed, args.steps)):
        lr = args.lr * min(1.0, (step + 1) / 10)
        if args.fault and args.fault[0] <= step < args.fault[0] + args.fault[1]:
            lr *= 30
        for group in opt.param_groups:
            group["lr"] = lr
        rows = slice(dp_rank * BATCH // dp_size, (dp_rank + 1) * BATCH // dp_size)
        x, y = tokens[rows, :-1], tokens[rows, 1:]
        loss = None
        if schedule is None:
            loss = loss_fn(model(x), y)
            loss.backward()
            if args.check_replicas:
                replicas(args, model, run, step, rank)
        elif rank == 0:
            schedule.step(x)
        elif rank == world - 1:
            losses = []
            schedule.step(target=y, losses=losses)
            loss = torch.stack(losses).mean()
        else:
            schedule.step()
        counter.on, counter.count = True, 0
        opt.step()
        counter.on = False
        collectives.append(counter.count)
        opt.zero_grad(set_to_none=True)
        if loss is not None:
            run.log({"loss": loss.detach()}, step=step)
        if run.should_stop(step):  # every rank, at the same step
            if args.checkpoint:
                save(model, opt, args.checkpoint)
            watch.close()
            return {"collectives": collectives, "stopped_at": step}
    watch.close()
    return {"collectives": collectives, "stopped_at": None}


def replicas(args, model, run, step, rank):
    """hlat.torch.check_replicas between backward and the step; with --corrupt R, rank R's
    gradient of a weight TP keeps whole (a replica on every tp rank) is off by 1e-3 at step 1."""
    if step == 1 and rank == args.corrupt:
        grad = dict(model.named_parameters())["layers.0.attention_norm.weight"].grad
        local = grad.to_local() if hasattr(grad, "to_local") else grad
        local.add_(1e-3)
    run.mismatches[step] = hlat.torch.check_replicas(run, model, step)


def save(model, opt, folder):
    """A halted run's checkpoint, as torchtitan writes one: torch.distributed.checkpoint, every
    rank its shards."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    model_state, optimizer_state = get_state_dict(model, opt)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=folder)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("layout")
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--url")
    parser.add_argument("--token")
    parser.add_argument("--runs", default="")
    parser.add_argument("--checkpoint", help="where a halted run saves its checkpoint")
    parser.add_argument("--check-replicas", action="store_true")
    parser.add_argument("--corrupt", type=int, default=-1, help="the rank whose replica goes wrong at step 1")
    args = parser.parse_args()
    args.fault = None
    torch.set_num_threads(1)
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    counter = Counter()
    out = {}
    if args.url:
        for spec in args.runs.split(","):
            name, seed, *fault = spec.split(":")
            args.seed, args.fault = int(seed), tuple(map(int, fault)) if fault else None
            # A 10-step warm-up: the update-ratio detector may look from step 20 (its default
            # of 100 suits warm-ups of hundreds of steps).
            run = hlat.init(name, url=args.url, token=args.token, precision="fp32",
                            detectors={"update_ratio": {"warmup_steps": 20}})
            out[name] = train(args, run, rank, world, counter)
            run.finish()
    else:
        run = Recorder(rank)
        out.update(train(args, run, rank, world, counter))
        if rank == 0:
            out["steps"] = run.steps()
            out["events"], out["mismatches"] = run.events, run.mismatches
    path = args.out if rank == 0 else f"{args.out}.rank{rank}.json"
    with open(path, "w") as f:
        json.dump(out, f)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
