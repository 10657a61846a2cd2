"""The torch.distributed (DDP) worker that runs inside a node, one per host, started by
training/ddp.py: the second training backend beside Horovod, with the same records, markers,
start and stop protocol (see horovod_worker.py).

Rendezvous: a TCP store that the controller serves in the root namespace on the management
bridge's address, so only the collectives' traffic crosses the shaped links; Gloo's pairs use
the data interface (GLOO_SOCKET_IFNAME=eth0), NCCL's its socket transport on it.

synthetic: real float32 gradients with the layer sizes of the profile, compute emulated per
  layer, reduced the way DistributedDataParallel reduces them: parameters in reverse order are
  packed into buckets (the first one at most 1 MiB, as DDP's first bucket, the others at most
  `bucket_cap` bytes); during backward a bucket's allreduce starts as soon as the last of its
  layers has its gradient, and the optimizer step (the next forward) waits for every bucket.
  Any other schedule (queue: priority, barrier: false, fusion: static or dynamic), which DDP
  cannot run, is ddp_schedule.py's loop.
real: DistributedDataParallel around a small CNN on random data (CPU), bucket_cap_mb from the
  scenario.

Stop: as Horovod's, a MAX allreduce per iteration carries each rank's "stop" vote (SIGUSR1,
or the next iteration would start after the run's end) and, under policy interleave, the slot
it began that iteration at and how late (horovod_worker.Pacer), read one iteration later, so
every rank stops after the same iteration and the ranks keep to the same slots.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from testbed.core.window import wait_for_go
from testbed.workloads.training.model.models import buckets_for
from testbed.workloads.training.workers.ddp_schedule import scheduled
from testbed.workloads.training.workers.horovod_worker import (
    FINISH,
    NO_PACE,
    Clock,
    EndGuess,
    Pacer,
    Recorder,
    SocketReads,
    Stamp,
    install_stop_signals,
    pace_file,
    real_model,
    sockets_file,
)


class StopVote:
    """horovod_worker.StopVote's, with the same slot riding on it (Pacer.agree)."""

    def __init__(
        self,
        dist: Any,
        torch: Any,
        deadline: float | None,
        device: Any = None,
        pacer: Pacer = NO_PACE,
    ) -> None:
        self.dist, self.torch = dist, torch
        self.end = EndGuess(deadline)
        self.device = device  # nccl reduces CUDA tensors only
        self.pacer = pacer
        self.pending: deque[tuple[int, Any, Any]] = deque()
        self.early: tuple[int, Any, Any] | None = None

    def announce(self, i: int) -> None:
        """`late: hold` (Pacer.hold): how late this rank began iteration i, a MAX over the
        ranks sent as it begins, so the reduction runs during the iteration's compute and
        every rank reads it before the network phase (hold())."""
        if not self.pacer.holds:
            return
        t = self.torch.tensor([self.pacer.vote_of(i)[1]], device=self.device)
        work = self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, async_op=True)
        self.early = (i, work, t)

    def hold(self) -> None:
        """Before the iteration's first reduction: its agreed lateness to Pacer.hold."""
        if self.early is None:
            return
        i, work, t = self.early
        self.early = None
        work.wait()
        self.pacer.hold(i, float(t.item()))

    def submit(self, i: int, started: float) -> None:
        late = self.end.late(started, lag=1)
        vote = [1.0 if FINISH.is_set() or late else 0.0, *map(float, self.pacer.vote_of(i))]
        t = self.torch.tensor(vote, device=self.device)
        work = self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, async_op=True)
        self.pending.append((i, work, t))

    def stop(self) -> bool:
        if not self.pending:
            return False
        i, work, t = self.pending.popleft()
        work.wait()
        flag, slot, lateness = t.tolist()
        self.pacer.agree(i, int(slot), lateness)
        return flag > 0


def class_groups(
    cfg: dict[str, Any], dist: Any, torch: Any, store: Any, rank: int, world: int
) -> list[Any]:
    """The process group of each class the policy adds (policies.LayersPolicy), a Gloo group
    on this worker's address for that class, so its connections, and only they, carry that
    class's DSCP (marking.mark_addresses). Built directly: `dist.new_group` ignores Gloo's
    options, so every group would bind the default address. The connecting side keeps its
    primary source address; the rules match the destination for it."""
    spec = cfg.get("transfer_classes")
    if not spec:
        return []
    gloo = dist.ProcessGroupGloo
    opts = gloo._Options()
    opts._devices = [gloo.create_device(hostname=spec["addresses"][rank])]
    opts._timeout = datetime.timedelta(minutes=30 * cfg.get("time_scale", 1.0))
    group = gloo(dist.PrefixStore("class-1/", store), rank, world, opts)
    group.allreduce([torch.zeros(1)]).wait()  # every rank is connected
    return [group]


def synthetic(
    cfg: dict[str, Any],
    dist: Any,
    torch: Any,
    rec: Recorder,
    deadline: float,
    groups: list[Any] | None = None,
    pacer: Pacer = NO_PACE,
) -> None:
    schedule = (cfg.get("fusion", "buckets"), cfg.get("queue", "fifo"), cfg["barrier"])
    if schedule != ("buckets", "fifo", True) or groups:  # a schedule DDP cannot run
        return scheduled(cfg, dist, torch, rec, deadline, groups, pacer)
    layers = cfg["layers"]  # [name, params, forward_s, backward_s], input to output
    plan = buckets_for([int(x[1]) for x in layers], int(cfg["bucket_cap"]))
    device = torch.device(cfg.get("device", "cpu"))
    flat = [
        torch.ones(sum(int(layers[j][1]) for j in b), dtype=torch.float32, device=device)
        for b in plan
    ]
    last_of = {b[-1]: k for k, b in enumerate(plan)}  # backward reaches a bucket's last layer
    world = dist.get_world_size()
    clock = Clock()
    vote = StopVote(dist, torch, deadline, device, pacer)
    limit = cfg.get("iterations")
    i = 0
    while limit is None or i < limit:
        if vote.stop():
            break
        start = Stamp()
        pacer.wait()  # its slot (policy interleave): the wait is part of the iteration
        vote.announce(i)
        compute = 0.0
        for _, _, fwd, _ in layers:
            clock.compute(fwd)
            compute += fwd
        works = []
        for j in range(len(layers) - 1, -1, -1):
            clock.compute(layers[j][3])
            compute += layers[j][3]
            k = last_of.get(j)
            if k is not None:
                if not works:
                    vote.hold()
                works.append(dist.all_reduce(flat[k], async_op=True))
                if k == 0:
                    vote.submit(i, start.wall)
        for w in works:  # DDP's finalize: the step needs every averaged gradient
            w.wait()
        for t in flat:
            t.div_(world)
        if device.type == "cuda":  # wait() only orders the GPU's streams: the CPU must wait
            torch.cuda.synchronize()
        rec.add(i, start, Stamp(), compute)
        i += 1


def layer_hook(model: Any, layers: list[int], group: Any, dist: Any, torch: Any) -> Any:
    """Policy layers in real mode: a DDP communication hook that reduces the gradients of the
    model's layers `layers` (its modules with parameters, in forward order: models.
    REAL_MODELS) over the class's Gloo group (class_groups), whose connections carry the
    class's DSCP, and the rest of each bucket over the job's own group. A bucket is a flat
    buffer of its parameters' gradients in `bucket.parameters()` order; each run of
    consecutive parameters of one class is a slice of it, reduced in place, so the class
    carries exactly those layers' bytes whatever DDP's buckets hold. Every rank sees the same
    buckets in the same order, so each group's collectives line up across ranks."""
    owners = [m for m in model.modules() if list(m.parameters(recurse=False))]
    chosen = {p.data_ptr() for j in layers for p in owners[j].parameters(recurse=False)}
    world = dist.get_world_size()

    def hook(_state, bucket):  # type: ignore[no-untyped-def]  # DDP checks annotations: none
        buf = bucket.buffer().div_(world)
        runs: list[list[Any]] = []  # [start, end, in class]
        at = 0
        for p in bucket.parameters():
            cls = p.data_ptr() in chosen
            if runs and runs[-1][2] == cls:
                runs[-1][1] = at + p.numel()
            else:
                runs.append([at, at + p.numel(), cls])
            at += p.numel()
        futures = [
            (
                group.allreduce([buf[a:b]]) if cls else dist.all_reduce(buf[a:b], async_op=True)
            ).get_future()
            for a, b, cls in runs
        ]
        return torch.futures.collect_all(futures).then(lambda _: buf)

    return hook


def real(
    cfg: dict[str, Any],
    dist: Any,
    torch: Any,
    rec: Recorder,
    deadline: float,
    groups: list[Any] | None = None,
    pacer: Pacer = NO_PACE,
) -> None:
    """The real model's loop through DistributedDataParallel; `pacer`: policy interleave's
    slots, each iteration waiting for its own before its forward pass (the buckets' reductions
    run inside backward, so no later wait could hold them: late: hold is refused)."""
    nn = torch.nn
    device = torch.device(cfg.get("device", "cpu"))
    torch.manual_seed(cfg.get("seed", 1) + dist.get_rank())
    model, shape, classes = real_model(torch, device, cfg.get("real_model"))
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, bucket_cap_mb=int(cfg["bucket_cap"]) / 2**20
    )
    if groups:  # policy layers: its layers' gradients over the class's group
        layers = cfg["transfer_classes"]["layers"]
        ddp.register_comm_hook(None, layer_hook(model, layers, groups[0], dist, torch))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    bs = cfg.get("batch_size", 16)
    limit = cfg.get("iterations")
    vote = StopVote(dist, torch, deadline, device, pacer=pacer)
    i = 0
    while limit is None or i < limit:
        if vote.stop():
            break
        start = Stamp()
        pacer.wait()  # its slot (policy interleave): the wait is part of the iteration
        x = torch.randn(bs, *shape, device=device)
        y = torch.randint(0, classes, (bs,), device=device)
        opt.zero_grad()
        t0 = time.perf_counter()
        loss = loss_fn(ddp(x), y)
        loss.backward()  # DDP's bucket allreduces run during backward and are waited for here
        if device.type == "cuda":  # backward() returns once its kernels are queued
            torch.cuda.current_stream().synchronize()
        compute = time.perf_counter() - t0
        vote.submit(i, start.wall)
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        rec.add(i, start, Stamp(), compute)
        i += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ddp_worker")
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--store", required=True, help="ADDR:PORT of the TCP store (management)")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--metrics", help="ADDR:PORT for the Prometheus exporter")
    ap.add_argument("--go", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = json.loads(args.config.read_text())

    install_stop_signals()
    from testbed.core.exporters import start_node_exporter
    from testbed.workloads.training.workers.metrics import registry

    metrics = start_node_exporter(registry, args.metrics)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    device = torch.device(cfg.get("device", "cpu"))
    if device.type == "cuda":
        torch.cuda.set_device(0)  # CUDA_VISIBLE_DEVICES holds this worker's devices
    addr, port = args.store.rsplit(":", 1)
    store = dist.TCPStore(
        addr, int(port), args.world, False, timeout=datetime.timedelta(seconds=120)
    )
    backend = cfg.get("dist_backend", "gloo")
    # torch's own 30 minutes for a collective to finish, dilated like every workload clock
    timeout = datetime.timedelta(minutes=30 * cfg.get("time_scale", 1.0))
    dist.init_process_group(
        backend, store=store, rank=args.rank, world_size=args.world, timeout=timeout
    )
    rec = Recorder(args.out, args.worker, args.rank, metrics, cfg.get("time_scale", 1.0))
    print(f"worker {args.worker}: rank {args.rank} of {args.world}, {backend}, mode {cfg['mode']}")
    dist.all_reduce(torch.zeros(1, device=device))  # every rank is connected
    if device.type == "cuda":  # NCCL's all_reduce returns once queued: wait for the connection
        torch.cuda.synchronize()
    groups = class_groups(cfg, dist, torch, store, args.rank, args.world)
    args.out.with_suffix(".ready").touch()
    window = wait_for_go(args.go)
    sockets = SocketReads(window.start, window.stop, sockets_file(args.out))
    pacer = Pacer(cfg, window.t0, pace_file(args.out))
    if cfg["mode"] == "real":
        real(cfg, dist, torch, rec, deadline=window.end, groups=groups, pacer=pacer)
    else:
        synthetic(cfg, dist, torch, rec, deadline=window.end, groups=groups, pacer=pacer)
    sockets.finish()
    args.out.with_suffix(".done").touch()
    sys.stdout.flush()
    if metrics is not None:
        while True:  # keep the exporter up for the final scrape
            time.sleep(3600)
    os._exit(0)  # no destroy_process_group: peers may still be in their last collective


if __name__ == "__main__":
    sys.exit(main())
