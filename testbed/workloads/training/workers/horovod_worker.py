"""The Horovod worker that runs *inside* a node (one per host), started by training/horovod.py
with the environment Horovod's own launcher would give it (rank, size, Gloo rendezvous on the
management path, HOROVOD_GLOO_IFACE=eth0 so every ring byte crosses the shaped links).

synthetic: real float32 gradient tensors with the layer sizes of the profile; compute is
  emulated per layer. Backward walks the layers from last to first and hands each layer's
  gradient to Horovod as soon as its compute ends (allreduce_async_, tensor fusion on); the
  next forward waits per layer for that layer's reduced gradient, or for all of them first
  with `barrier`.
real: trains a small CNN on random data with hvd.DistributedOptimizer.

Start and stop are common to all ranks. A worker initialises (imports, hvd.init, one line-up
allreduce), writes a `.ready` marker, waits for the orchestrator's go file and starts its
first iteration at the common t0, so no rank's ramp-up lands in the measured window. At the
end of the run the orchestrator sends SIGUSR1 to every worker; the ranks do not act on it
alone (one rank stopping early would leave the others blocked in an allreduce): each iteration
reduces a one-element stop flag (max over ranks) alongside its gradients, and every rank stops
after the same iteration. Then each writes a `.done` marker and keeps its exporter up for a
final scrape, until SIGTERM.

Every iteration is appended to a CSV as it ends, so a killed run keeps its records, and
counted by a Prometheus exporter on the management address when `--metrics` is given. The
start and end columns are wall-clock times (shared by all processes); duration, compute and
wait are measured on the monotonic clock.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from testbed.core.tcpstats import own_sockets
from testbed.core.window import wait_for_go

FIELDS = ["worker", "rank", "iteration", "start", "end", "duration_s", "compute_s", "wait_s"]
FINISH = threading.Event()  # set by SIGUSR1: start no new iteration


def sockets_file(records: Path) -> Path:
    """Where a worker writes its sockets' reads (SocketReads), beside its records."""
    return records.with_suffix(".sockets.json")


class Recorder:
    """Each iteration to the worker's CSV (wall clock) and, in scenario time (divided by the
    scenario's time_scale), to its Prometheus histogram."""

    def __init__(
        self,
        path: Path,
        worker: str,
        rank: int,
        metrics: dict[str, Any] | None,
        time_scale: float = 1.0,
    ) -> None:
        self.f = open(path, "w", newline="")  # noqa: SIM115 - lives as long as the process
        self.w = csv.writer(self.f)
        self.w.writerow(FIELDS)
        self.f.flush()
        self.worker, self.rank = worker, rank
        self.metrics = metrics
        self.time_scale = time_scale

    def add(self, i: int, start: Stamp, end: Stamp, compute: float) -> None:
        took = end.mono - start.mono
        self.w.writerow(
            [
                self.worker,
                self.rank,
                i,
                f"{start.wall:.6f}",
                f"{end.wall:.6f}",
                f"{took:.6f}",
                f"{compute:.6f}",
                f"{max(0.0, took - compute):.6f}",
            ]
        )
        self.f.flush()
        if self.metrics is not None:
            self.metrics["iteration"].labels(self.worker).observe(took / self.time_scale)
            self.metrics["iterations"].labels(self.worker).inc()


class Stamp:
    """One instant on both clocks: wall time places it on the run's timeline, the monotonic
    clock measures durations."""

    __slots__ = ("mono", "wall")

    def __init__(self) -> None:
        self.wall = time.time()
        self.mono = time.monotonic()


class SocketReads:
    """This worker's TCP sockets (tcpstats.own_sockets: the collective library's connections,
    which the worker never sees) read at the measured window's start and stop, written to
    `path` as JSON ({"start": ..., "stop": ...}) for the controller to count per class. A
    thread waits for the edges; `finish` (called as the job ends) takes the stop read then if
    the job ended before it, so a short job still writes its counters."""

    def __init__(self, start: float, stop: float, path: Path) -> None:
        self.edges, self.path = (start, stop), path
        self.reads: dict[str, Any] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._run, name="socket-reads", daemon=True).start()

    def _read(self, edge: str) -> None:
        with self.lock:
            if edge in self.reads:
                return
            self.reads[edge] = own_sockets()
            if edge == "stop":
                self.path.write_text(json.dumps(self.reads))

    def _run(self) -> None:
        for edge, at in zip(("start", "stop"), self.edges, strict=True):
            time.sleep(max(0.0, at - time.time()))
            self._read(edge)

    def finish(self) -> None:
        self._read("start")
        self._read("stop")


class EndGuess:
    """Whether the iteration `lag` iterations after the one that started at `started` would
    start after the run's end (`deadline`). Judged from the longest of the last `KEEP`
    iteration lengths, not from the last alone: lengths vary by a tenth from one iteration to
    the next on a shared machine (254 then 284 ms at 250 ms of compute, measured here), and a
    guess from the last length let an iteration start after the end in one run of three. The
    job may stop up to about one iteration before the run's end instead: inside the cool-down
    when that is at least an iteration long; with a shorter one the window loses at most its
    last iteration."""

    KEEP = 8

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.starts: deque[float] = deque(maxlen=self.KEEP + 1)

    def late(self, started: float, lag: int) -> bool:
        self.starts.append(started)
        if self.deadline is None or len(self.starts) < 2:
            return False
        longest = max(b - a for a, b in itertools.pairwise(self.starts))
        return started + lag * longest >= self.deadline


class StopVote:
    """The collective stop: each iteration reduces max(local "stop") over the ranks, submitted
    with the first gradient of backward so it travels with that iteration's reductions. The
    decision to start an iteration reads the vote of `lag` iterations before, which every rank
    reads alike, so all ranks stop after the same iteration. With a barrier that vote is already
    complete (lag 1); without one, the previous iteration's reductions may still be running, so
    the decision uses the one before (lag 2) and never waits on the wire.

    A rank votes "stop" on SIGUSR1, or when the iteration the vote decides would start after
    the run's end (`deadline`, judged by EndGuess): the job then stops about at the end of the
    run on its own, as the load generators stop starting flows, instead of `lag` iterations
    after the orchestrator asks."""

    def __init__(
        self,
        hvd: Any,
        torch: Any,
        lag: int,
        deadline: float | None = None,
        pacer: Pacer | None = None,
    ) -> None:
        """`pacer`: its slots ride on the vote (Pacer.agree)."""
        self.hvd, self.torch, self.lag = hvd, torch, lag
        self.end = EndGuess(deadline)
        self.pacer = pacer or NO_PACE
        self.handles: deque[tuple[int, Any]] = deque()

    def submit(self, i: int, started: float) -> None:
        """`started`: the wall time at which iteration i started."""
        late = self.end.late(started, self.lag)
        vote = [1.0 if FINISH.is_set() or late else 0.0, *map(float, self.pacer.vote_of(i))]
        handle = self.hvd.allreduce_async(
            self.torch.tensor(vote), name=f"stop.{i}", op=self.hvd.Max
        )
        self.handles.append((i, handle))

    def stop(self) -> bool:
        if len(self.handles) < self.lag:
            return False
        i, handle = self.handles.popleft()
        flag, slot, lateness = self.hvd.synchronize(handle).tolist()
        self.pacer.agree(i, int(slot), lateness)
        return flag > 0


class Clock:
    """Emulated compute: sleep per layer, carrying oversleep into the next layer so the
    total compute per iteration stays what the profile says. Only into a layer that follows
    at once: time spent waiting between two layers (for gradients, for the network) would
    have passed in the ideal timeline too, so it pays the debt off first; carried across a
    wait, oversleep would shorten the next compute below what was asked for."""

    def __init__(self, clock: Any = time) -> None:
        """`clock`: what has perf_counter() and sleep(); a unit test's own clock
        (tests/clocks.py) judges the carry exactly, where a real sleep overshoots under steal."""
        self.clock = clock
        self.debt = 0.0
        self.last = 0.0  # when the last compute ended

    def compute(self, seconds: float) -> None:
        if seconds <= 0:
            return
        now = self.clock.perf_counter()
        self.debt = max(0.0, self.debt - (now - self.last))
        end = now + seconds - self.debt
        if end > now:
            self.clock.sleep(end - now)
        self.last = self.clock.perf_counter()
        self.debt = max(0.0, self.last - end)


def pace_file(records: Path) -> Path:
    """Where a worker logs its slots (Pacer), beside its records."""
    return records.with_suffix(".pace.csv")


class Pacer:
    """Policy interleave (training/policies/interleave.py): iteration i starts no earlier than its slot,
    t0 + offset + i · period, on the wall clock every job's workers share. A late iteration
    starts at once and keeps its index, so the slack between period and iteration time brings
    the job back onto its slot. Each iteration's slot goes to `log` (slot index, its time, when
    the iteration began, how late for that slot, slots skipped just before it). Without `pace`
    in the config it never waits.

    The ranks of a job must begin each iteration on the same slot: one that waits for a later
    slot than its peer makes the peer wait for it inside the all-reduce, and the peer then
    finishes late in turn. So nothing a rank sees only on its own clock moves its grid. What
    moves it rides on the per-iteration stop vote (a MAX over the ranks, `vote_of`), read
    one or two iterations later (`agree`), where every rank reads the same values:
    - the slot each rank began the iteration at: a rank behind the latest moves its grid on by
      the difference (a floor; the ranks start on one grid and nothing else moves it apart,
      so this only guards it);
    - with `skip_after_s` (`late: skip`), how late each rank began it: when the latest rank
      began it more than `skip_after_s` after its slot, less the slots given up since, every
      rank gives up the slots it was late by beyond that, before its next iteration.

    Judged on each rank's own clock instead (up to 2026-12-06), the ranks of a ring, which do
    not leave an all-reduce at the same moment, chose different slots near the limit: job b of
    examples/interleave.yaml under by-ratio's classes began 9 of its 78 iterations in one run
    on different slots on its two ranks, the one on the earlier slot waiting a period in the
    all-reduce each time (docs/results/interleave/README.md). The price of agreeing: slots are given
    up only when the late iteration's vote is read, before the next iteration (one iteration
    later; two for Horovod without a barrier, whose next iteration has begun by then), so the
    late iteration itself, and with lag 2 the next, run late (catching up). With `hold`
    (`late: hold`, torch-ddp's own loop) the lateness rides on a vote of its own, sent as the
    iteration begins and read before its first reduction (hold()), so the late iteration's
    phase waits for the slot it gives up for instead of running late."""

    def __init__(
        self, cfg: dict[str, Any], t0: float, log: Path | None = None, clock: Any = time
    ) -> None:
        """`clock`: what has time() and sleep(), the wall clock; a unit test's own clock
        judges the slots exactly, where a sleep on a busy machine overshoots."""
        self.clock = clock
        pace = cfg.get("pace")
        self.period = float(pace["period_s"]) if pace else None
        self.base = t0 + float(pace["offset_s"]) if pace else 0.0
        skip = pace.get("skip_after_s") if pace else None
        self.skip_after = None if skip is None else float(skip)
        self.holds = bool(pace and pace.get("hold")) and self.skip_after is not None
        self.slot = 0  # the next iteration's slot: base + slot · period
        self.iteration = 0  # the next iteration's index
        self.began: dict[int, tuple[int, float]] = {}  # iteration → (slot, lateness) until agreed
        self.skips: list[tuple[int, int]] = []  # (iteration it came before, slots given up)
        self.log = None
        if pace and log is not None:
            self._file = open(log, "w", newline="")  # noqa: SIM115 - lives as long as the process
            self.log = csv.writer(self._file)
            self.log.writerow(["slot", "slot_time", "began", "late_s", "skipped"])

    def wait(self) -> None:
        if self.period is None:
            return
        at = self.base + self.slot * self.period
        delay = at - self.clock.time()
        if delay > 0:
            self.clock.sleep(delay)
        began = self.clock.time()
        late = max(0.0, began - at)
        if self.log is not None:
            self.log.writerow(
                [self.slot, f"{at:.6f}", f"{began:.6f}", f"{late:.6f}", self.skipping]
            )
            self._file.flush()
        self.began[self.iteration] = (self.slot, late)
        self.iteration += 1
        self.slot += 1

    @property
    def skipping(self) -> int:
        """The slots given up before the next iteration (its pace log's `skipped`)."""
        return sum(n for at, n in self.skips if at == self.iteration)

    def vote_of(self, i: int) -> tuple[int, float]:
        """What this rank votes for iteration i: the slot it began it at and how late (0, 0.0
        without pacing)."""
        return self.began.get(i, (0, 0.0))

    def slot_of(self, i: int) -> int:
        """The slot iteration i began at (0 without pacing)."""
        return self.vote_of(i)[0]

    def agree(self, i: int, latest: int, late: float = 0.0) -> None:
        """Iteration i's vote read back: `latest`, the latest slot any rank began it at;
        `late`, the most any rank began it late. Behind `latest`, this rank's later iterations
        begin no earlier than a slot each after it: the next one at `latest` + (iterations
        since i), and those it has begun since count as begun there (so their votes do not move
        it again; the guard of the class docstring, which does not count slots given up since
        i). Then, with skip_after, the skip (the class docstring): the same on every rank,
        since every input is (the agreed vote, the iteration index, the slots given up)."""
        own = self.began.pop(i, None)
        if own is None:
            return
        if latest > own[0]:
            for k, (slot, lateness) in self.began.items():
                self.began[k] = (max(slot, latest + k - i), lateness)
            self.slot = max(self.slot, latest + self.iteration - i)
        if self.skip_after is None or self.period is None:
            return
        self.skips = [(at, n) for at, n in self.skips if at > i]  # given up after i began
        over = late - sum(n for _, n in self.skips) * self.period - self.skip_after
        if over > 0:
            self._give_up(over, self.period)

    def _give_up(self, over: float, period: float) -> int:
        """Give up the n = ⌈over / period⌉ slots a lateness of `over` beyond skip_after
        reaches into, before the next iteration; n."""
        n = math.ceil(over / period)
        self.slot += n
        self.skips.append((self.iteration, n))
        return n

    def hold(self, i: int, late: float) -> None:
        """`late: hold`: iteration i's lateness agreed before its network phase (the most any
        rank began it late, on a vote sent when it began: ddp_worker.StopVote.announce). Past
        `skip_after`, the rest of the iteration waits n = ⌈(late − skip_after) / period⌉
        periods less this rank's own lateness, so its phase runs where it would have had the
        iteration begun on slot + n; the slots in between are given up, counted as a skip
        before the next iteration (which agree() then does not give up again)."""
        if not self.holds or self.period is None or self.skip_after is None:
            return  # (holds implies both; the test tells the type checker)
        over = late - self.skip_after
        if over <= 0 or i not in self.began:
            return
        n = self._give_up(over, self.period)
        delay = n * self.period - self.began[i][1]  # (slot + n)'s time less when i began
        if delay > 0:
            self.clock.sleep(delay)


NO_PACE = Pacer({}, 0.0)


def small_cnn(torch: Any) -> Any:
    """The real mode's model (both backends): 25 578 float32 parameters."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10),
    )  # fmt: skip


def resnet18(torch: Any, width: int = 16, classes: int = 10) -> Any:
    """ResNet-18 in its CIFAR form at `width` channels (models.resnet18_layers lists its
    layers with parameters in this registration order)."""
    nn = torch.nn

    class Block(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self, c_in: int, c: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(c)
            self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(c)
            self.proj = None
            if stride != 1 or c_in != c:
                self.proj = nn.Sequential(nn.Conv2d(c_in, c, 1, stride, bias=False),
                                          nn.BatchNorm2d(c))  # fmt: skip

        def forward(self, x: Any) -> Any:
            out = torch.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return torch.relu(out + (x if self.proj is None else self.proj(x)))

    layers: list[Any] = [nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                         nn.ReLU()]  # fmt: skip
    c_in = width
    for stage in range(4):
        c = width * 2**stage
        layers += [Block(c_in, c, 1 if stage == 0 else 2), Block(c, c, 1)]
        c_in = c
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, classes)]
    return nn.Sequential(*layers)


REAL_BUILDERS = {"small-cnn": small_cnn, "resnet18-narrow": resnet18}


def real_model(
    torch: Any, device: Any, name: str | None = None
) -> tuple[Any, tuple[int, ...], int]:
    """The real mode's model, input shape and classes: `name` (models.REAL_MODELS), or with
    none, ResNet-50 (the thesis' model; 224×224, 1000 classes) on a GPU where torchvision is
    installed, else the small CNN (32×32, 10 classes), which a CPU core steps in well under a
    second."""
    from testbed.workloads.training.model.models import REAL_MODELS

    if name is None and device.type == "cuda":
        try:
            import torchvision  # type: ignore[import-untyped]
        except ImportError:
            print("real mode: no torchvision, so the small CNN on the GPU", flush=True)
        else:
            return torchvision.models.resnet50().to(device), (3, 224, 224), 1000
    name = name or "small-cnn"
    m = REAL_MODELS[name]
    return REAL_BUILDERS[name](torch).to(device), m.shape, m.classes


def install_stop_signals() -> None:
    """SIGUSR1: vote to stop (FINISH). SIGTERM: exit at once; records are flushed per
    iteration, and the backend's threads must not hold us up."""

    def stop(_signum: int, _frame: object) -> None:
        sys.stdout.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGUSR1, lambda _s, _f: FINISH.set())


def synthetic(
    cfg: dict[str, Any],
    hvd: Any,
    torch: Any,
    rec: Recorder,
    deadline: float | None = None,
    pacer: Pacer = NO_PACE,
) -> None:
    layers = cfg["layers"]  # [name, params, forward_s, backward_s], input to output
    device = torch.device(cfg.get("device", "cpu"))  # cuda: reduced by NCCL, not Gloo
    grads = [torch.ones(int(p), dtype=torch.float32, device=device) for _, p, _, _ in layers]
    handles: list[Any] = [None] * len(layers)
    clock = Clock()
    barrier = cfg["barrier"]
    vote = StopVote(hvd, torch, lag=1 if barrier else 2, deadline=deadline, pacer=pacer)
    limit = cfg.get("iterations")
    # Without a barrier an iteration ends where the next one starts (its gradients are waited
    # for during the next forward), so it is recorded one iteration late.
    pending: tuple[int, Stamp, float] | None = None
    i = 0
    while limit is None or i < limit:
        if vote.stop():
            break
        start = Stamp()
        if pending is not None:
            rec.add(pending[0], pending[1], start, pending[2])
            pending = None
        pacer.wait()  # its slot (policy interleave): the wait is part of the iteration
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
            if j == len(layers) - 1:
                vote.submit(i, start.wall)
        if barrier or (limit is not None and i == limit - 1):
            for j, h in enumerate(handles):
                if h is not None:
                    hvd.synchronize(h)
                    handles[j] = None
            rec.add(i, start, Stamp(), compute)
        else:
            pending = (i, start, compute)
        i += 1
    if pending is not None:  # without a barrier: finish the last iteration's reductions
        for h in handles:
            if h is not None:
                hvd.synchronize(h)
        rec.add(pending[0], pending[1], Stamp(), pending[2])


def real(
    cfg: dict[str, Any],
    hvd: Any,
    torch: Any,
    rec: Recorder,
    deadline: float | None = None,
    pacer: Pacer = NO_PACE,
) -> None:
    """The real model's loop; `pacer`: policy interleave's slots, each iteration waiting for
    its own before its forward pass, the slots riding on the stop vote (Pacer.agree)."""
    nn = torch.nn
    device = torch.device(cfg.get("device", "cpu"))
    torch.manual_seed(cfg.get("seed", 1) + hvd.rank())
    model, shape, classes = real_model(torch, device, cfg.get("real_model"))
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    loss_fn = nn.CrossEntropyLoss()
    bs = cfg.get("batch_size", 16)
    limit = cfg.get("iterations")
    vote = StopVote(hvd, torch, lag=1, deadline=deadline, pacer=pacer)
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
        loss = loss_fn(model(x), y)
        loss.backward()
        if device.type == "cuda":  # backward() returns once its kernels are queued; this
            torch.cuda.current_stream().synchronize()  # stream, not Horovod's NCCL one
        compute = time.perf_counter() - t0
        vote.submit(i, start.wall)
        opt.step()  # waits for the allreduced gradients
        if device.type == "cuda":
            torch.cuda.synchronize()
        rec.add(i, start, Stamp(), compute)
        i += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="horovod_worker")
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument(
        "--hostname", help="set this UTS namespace's hostname first (horovod.py: Hostname)"
    )
    ap.add_argument(
        "--metrics", help="ADDR:PORT for the Prometheus exporter (a management address)"
    )
    ap.add_argument("--go", type=Path, required=True, help="the orchestrator's go file")
    args = ap.parse_args(argv)
    if args.hostname:
        socket.sethostname(args.hostname)
    cfg = json.loads(args.config.read_text())

    install_stop_signals()
    from testbed.core.exporters import start_node_exporter
    from testbed.workloads.training.workers.metrics import registry

    metrics = start_node_exporter(registry, args.metrics)
    import torch

    torch.set_num_threads(1)
    import horovod.torch as hvd

    if cfg.get("device") == "cuda":
        torch.cuda.set_device(0)  # CUDA_VISIBLE_DEVICES holds this worker's devices
    hvd.init()
    rec = Recorder(args.out, args.worker, hvd.rank(), metrics, cfg.get("time_scale", 1.0))
    print(
        f"worker {args.worker}: rank {hvd.rank()} of {hvd.size()}, mode {cfg['mode']}", flush=True
    )
    hvd.allreduce(torch.zeros(1), name="start")  # every rank is connected (Gloo)
    if cfg.get("device") == "cuda":  # NCCL connects at its first GPU tensor: not in iteration 0
        hvd.allreduce(torch.zeros(1, device="cuda"), name="start.gpu")
        torch.cuda.synchronize()
    args.out.with_suffix(".ready").touch()
    window = wait_for_go(args.go)  # returns at the common t0
    sockets = SocketReads(window.start, window.stop, sockets_file(args.out))
    pacer = Pacer(cfg, window.t0, pace_file(args.out))
    if cfg["mode"] == "real":
        real(cfg, hvd, torch, rec, deadline=window.end, pacer=pacer)
    else:
        synthetic(cfg, hvd, torch, rec, deadline=window.end, pacer=pacer)
    sockets.finish()
    args.out.with_suffix(".done").touch()
    if metrics is not None:
        while True:  # keep the exporter up for the final scrape (peers may be mid-iteration)
            time.sleep(3600)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
