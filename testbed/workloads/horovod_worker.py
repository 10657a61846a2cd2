"""The Horovod worker that runs *inside* a node (one per host), started by workloads/horovod.py
with the environment Horovod's own launcher would give it (rank, size, Gloo rendezvous on the
management path, HOROVOD_GLOO_IFACE=eth0 so every ring byte crosses the shaped links).

synthetic: real float32 gradient tensors with the layer sizes of the profile; compute is
  emulated per layer. Backward walks the layers from last to first and hands each layer's
  gradient to Horovod as soon as its compute ends (allreduce_async_, tensor fusion on); the
  next forward waits per layer for that layer's reduced gradient, or for all of them first
  with `barrier`.
real: trains a small CNN on random data with hvd.DistributedOptimizer.

Every iteration is appended to a CSV as it ends, so a killed run keeps its records, and
counted by a Prometheus exporter on the management address when `--metrics` is given.
At the end of the run the orchestrator sends SIGUSR1: the worker starts no new iteration, writes
a `.done` marker and keeps its exporter up for a final scrape, until SIGTERM.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

FIELDS = ["worker", "rank", "iteration", "start", "end", "duration_s", "compute_s", "wait_s"]
FINISH = threading.Event()  # set by SIGUSR1: start no new iteration


class Recorder:
    def __init__(self, path: Path, worker: str, rank: int, metrics: dict[str, Any] | None) -> None:
        self.f = open(path, "w", newline="")  # noqa: SIM115 - lives as long as the process
        self.w = csv.writer(self.f)
        self.w.writerow(FIELDS)
        self.f.flush()
        self.worker, self.rank = worker, rank
        self.metrics = metrics

    def add(self, i: int, start: float, end: float, compute: float) -> None:
        self.w.writerow(
            [
                self.worker,
                self.rank,
                i,
                f"{start:.6f}",
                f"{end:.6f}",
                f"{end - start:.6f}",
                f"{compute:.6f}",
                f"{max(0.0, end - start - compute):.6f}",
            ]
        )
        self.f.flush()
        if self.metrics is not None:
            self.metrics["iteration"].labels(self.worker).observe(end - start)
            self.metrics["iterations"].labels(self.worker).inc()


class Clock:
    """Emulated compute: sleep per layer, carrying oversleep into the next layer so the
    total compute per iteration stays what the profile says."""

    def __init__(self) -> None:
        self.debt = 0.0

    def compute(self, seconds: float) -> None:
        if seconds <= 0:
            return
        end = time.perf_counter() + seconds - self.debt
        now = time.perf_counter()
        if end > now:
            time.sleep(end - now)
        self.debt = max(0.0, time.perf_counter() - end)


def synthetic(cfg: dict[str, Any], hvd: Any, torch: Any, rec: Recorder) -> None:
    layers = cfg["layers"]  # [name, params, forward_s, backward_s], input to output
    grads = [torch.ones(int(p), dtype=torch.float32) for _, p, _, _ in layers]
    handles: list[Any] = [None] * len(layers)
    clock = Clock()
    barrier = cfg["barrier"]
    limit = cfg.get("iterations")
    # Without a barrier an iteration ends where the next one starts (its gradients are waited
    # for during the next forward), so it is recorded one iteration late.
    pending: tuple[int, float, float] | None = None
    i = 0
    while (limit is None or i < limit) and not FINISH.is_set():
        start = time.time()
        if pending is not None:
            rec.add(pending[0], pending[1], start, pending[2])
            pending = None
        compute = 0.0
        for j, (_, _, fwd, _) in enumerate(layers):
            if handles[j] is not None:
                hvd.synchronize(handles[j])
                handles[j] = None
            clock.compute(fwd)
            compute += fwd
        for j in range(len(layers) - 1, -1, -1):
            clock.compute(layers[j][3])
            compute += layers[j][3]
            handles[j] = hvd.allreduce_async_(grads[j], name=f"grad.{j}", op=hvd.Average)
        if barrier or (limit is not None and i == limit - 1):
            for j, h in enumerate(handles):
                if h is not None:
                    hvd.synchronize(h)
                    handles[j] = None
            rec.add(i, start, time.time(), compute)
        else:
            pending = (i, start, compute)
        i += 1


def real(cfg: dict[str, Any], hvd: Any, torch: Any, rec: Recorder) -> None:
    nn = torch.nn
    device = torch.device(cfg.get("device", "cpu"))
    torch.manual_seed(cfg.get("seed", 1) + hvd.rank())
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10),
    ).to(device)  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    loss_fn = nn.CrossEntropyLoss()
    bs = cfg.get("batch_size", 16)
    limit = cfg.get("iterations")
    i = 0
    while (limit is None or i < limit) and not FINISH.is_set():
        start = time.time()
        x = torch.randn(bs, 3, 32, 32, device=device)
        y = torch.randint(0, 10, (bs,), device=device)
        opt.zero_grad()
        t0 = time.perf_counter()
        loss = loss_fn(model(x), y)
        loss.backward()
        compute = time.perf_counter() - t0
        opt.step()  # waits for the allreduced gradients
        rec.add(i, start, time.time(), compute)
        i += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="horovod_worker")
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--hostname", help="set this UTS namespace's hostname first (see DESIGN: Gloo)")
    ap.add_argument(
        "--metrics", help="ADDR:PORT for the Prometheus exporter (a management address)"
    )
    args = ap.parse_args(argv)
    if args.hostname:
        socket.sethostname(args.hostname)
    cfg = json.loads(args.config.read_text())

    def stop(_signum: int, _frame: object) -> None:
        # Records are flushed per iteration; Horovod's background thread must not hold us up.
        sys.stdout.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGUSR1, lambda _s, _f: FINISH.set())
    from testbed.metrics.exporters import start_node_exporter

    metrics = start_node_exporter("horovod", args.metrics)
    import torch

    torch.set_num_threads(1)
    import horovod.torch as hvd

    hvd.init()
    rec = Recorder(args.out, args.worker, hvd.rank(), metrics)
    print(
        f"worker {args.worker}: rank {hvd.rank()} of {hvd.size()}, mode {cfg['mode']}", flush=True
    )
    # line up the ranks before the first iteration
    hvd.allreduce(torch.zeros(1), name="start")
    if cfg["mode"] == "real":
        real(cfg, hvd, torch, rec)
    else:
        synthetic(cfg, hvd, torch, rec)
    args.out.with_suffix(".done").touch()
    if metrics is not None:
        while True:  # keep the exporter up for the final scrape (peers may be mid-iteration)
            time.sleep(3600)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
