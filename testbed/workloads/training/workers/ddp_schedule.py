"""torch-ddp's scheduled synthetic loop: the transfer schedules of `testbed predict`
(training/model/predict.py) run by real torch.distributed workers, for the schedules DDP itself
cannot run (`queue: priority`, `barrier: false`, `fusion: static | dynamic`). DDP's own
(buckets, fifo, barrier) stays ddp_worker.synthetic's.

Two threads per worker. The main thread emulates compute (horovod_worker.Clock: a sleep per
layer) and marks each buffer ready when backward reaches its lowest layer; the ring thread
issues every collective of the worker, one at a time, so one all-reduce is in flight, as in
the thesis' simulator (one buffer at a time, the next once every worker has finished the
current one), P3 and TicTac, and as predict.py models every queue: its link is a single,
non-preemptive server for fifo as for priority. fifo is therefore one in flight too (DDP's
own path may overlap two buckets on Gloo's threads; this one does not), so worker and model
agree.

- fusion: static = models.static_buffers (the thesis' ns-3 mapping, from the last layer down
  while ≤ fusion_threshold); buckets = models.buckets_for (DDP's); dynamic = every layer a
  unit, and when the ring frees, the agreed-ready units in queue order fused while ≤
  fusion_threshold (predict's dynamic).
- queue: fifo takes the earliest-ready unit, priority the one with the lowest layer.
- barrier: true, the next forward starts once every buffer is reduced; false, layer i's
  forward waits only for layer i's reduced gradients (and layer i − 1's forward, by order).
- classes (a policy giving transfers classes of their own, training/policies/per_transfer.py): a unit
  holding any of the layers it chose is reduced over the class's own process group (its
  connections marked with the class's DSCP: training/policies/per_transfer.py), the rest over the
  default one; still one in flight, so a job's classes never compete with each other.

Agreement. Gloo matches collectives by their order, so every rank must reduce the same buffer
at the same position, while readiness differs by milliseconds between ranks. Every rank makes
its buffers ready in the same order (backward, last layer first), so what a rank has ready is
a count of buffers in that order. Before a choice that depends on timing (priority, or
dynamic fusion), the ring thread all-reduces its local count with MIN: the result is what is
ready on every rank, and each rank applies the same deterministic choice (`choose`) to it.
That costs a small all-reduce's latency (about 2(N − 1) ring steps) per buffer, idle link
time the model does not have; once all of an iteration's buffers are agreed ready, later
choices need no round. fifo with fixed buffers is deterministic by construction (the next
buffer in readiness order, waited for locally; the collective waits for the slowest rank),
so it has one round per iteration only. That first round also carries each rank's stop vote
(min of −vote = −max) and the slot it began the iteration at and how late (policy
interleave: horovod_worker.Pacer), read before the next iteration starts, so every rank stops
after the same one and the ranks keep to the same slots. The worker prints its rounds and
their durations in its log when it ends.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from testbed.workloads.training.model.models import BYTES_PER_PARAM, buckets_for, static_buffers
from testbed.workloads.training.workers.horovod_worker import (
    FINISH,
    NO_PACE,
    Clock,
    EndGuess,
    Pacer,
    Recorder,
    Stamp,
)


@dataclass(frozen=True)
class Plan:
    """The units a worker reduces, in the order backward makes them ready (each one's layers
    ascending), and how the next all-reduce is chosen among the ready ones."""

    units: tuple[tuple[int, ...], ...]
    nbytes: tuple[int, ...]
    queue: str = "fifo"
    fusion: str = "static"
    threshold: float = 0.0
    # each unit's class: 0 the job's own, 1 the policy's (training/policies/per_transfer.py): a unit
    # holding any of the layers the policy chose
    classes: tuple[int, ...] = ()

    @property
    def agree(self) -> bool:
        """Whether a choice depends on what is ready (not only on the order)."""
        return self.queue == "priority" or self.fusion == "dynamic"


def plan_for(cfg: dict[str, Any]) -> Plan:
    """The worker's plan from its configuration (ddp.py's `worker_config`)."""
    params = [int(x[1]) for x in cfg["layers"]]
    sizes = [p * BYTES_PER_PARAM for p in params]
    fusion, threshold = cfg["fusion"], float(cfg["fusion_threshold"])
    if fusion == "buckets":
        groups = buckets_for(params, int(cfg["bucket_cap"]))
    elif fusion == "static":
        groups = static_buffers(sizes, threshold)
    else:
        groups = [[j] for j in range(len(params))]
    # a unit is ready when backward reaches its lowest layer: readiness order is its reverse
    units = tuple(sorted((tuple(sorted(g)) for g in groups), key=lambda u: -u[0]))
    nbytes = tuple(sum(sizes[j] for j in u) for u in units)
    chosen = set(cfg.get("transfer_classes", {}).get("layers", ()))
    classes = tuple(int(any(j in chosen for j in u)) for u in units)
    return Plan(units, nbytes, cfg["queue"], fusion, threshold, classes)


def class_bytes(plan: Plan) -> int:
    """The bytes of the units in the policy's class, per iteration (each reduced once)."""
    return sum(b for b, c in zip(plan.nbytes, plan.classes, strict=True) if c)


def choose(plan: Plan, agreed: int, reduced: set[int]) -> list[int]:
    """The units (positions in readiness order) the next all-reduce carries, given that the
    first `agreed` are ready on every rank: the queue's first, then, under dynamic fusion,
    the next ones in queue order while the buffer stays ≤ the threshold (predict._reduce) and
    in the first one's class (a buffer crosses one class's connections)."""
    eligible = [k for k in range(agreed) if k not in reduced]
    if plan.queue == "priority":
        eligible.sort(key=lambda k: plan.units[k][0])
    take, size = [eligible[0]], plan.nbytes[eligible[0]]
    if plan.fusion == "dynamic":
        for k in eligible[1:]:
            if size + plan.nbytes[k] > plan.threshold or (
                plan.classes and plan.classes[k] != plan.classes[take[0]]
            ):
                break
            take.append(k)
            size += plan.nbytes[k]
    return take


class Ring:
    """The ring thread: every collective of the worker, one in flight (see the module's
    docstring); the main thread marks readiness and waits on reductions through it."""

    def __init__(
        self, plan: Plan, n_layers: int, dist: Any, torch: Any, device: Any, groups: list[Any]
    ) -> None:
        """`groups`: the process group of each class after the job's own (the default)."""
        self.plan, self.dist, self.torch, self.device = plan, dist, torch, device
        self.groups = groups
        self.world = dist.get_world_size()
        self.offsets: list[int] = []  # each layer's place in the flat gradients (start())
        self.cv = threading.Condition()
        self.ready = 0  # units ready here in iteration `ready_iter`, in readiness order
        self.ready_iter = -1
        self.done = [-1] * n_layers  # the last iteration whose reduction of layer j ended
        self.flags: dict[int, tuple[bool, int, float]] = {}  # stop vote, slot, lateness here
        self.votes: dict[int, tuple[bool, int, float]] = {}  # agreed: any stop, the latest
        self.closing = False
        self.error: BaseException | None = None
        self.rounds: list[float] = []  # each agreement round's duration here
        self.flat: Any = None
        self.thread = threading.Thread(target=self._main, name="ring", daemon=True)

    def start(self, layer_params: list[int]) -> None:
        offsets = [0]
        for p in layer_params:
            offsets.append(offsets[-1] + p)
        self.offsets = offsets
        self.flat = self.torch.ones(offsets[-1], dtype=self.torch.float32, device=self.device)
        self.thread.start()

    # the main thread's side
    def mark(self, i: int, count: int, flag: tuple[bool, int, float] | None = None) -> None:
        """`flag`: with the first unit of iteration i, this rank's stop vote and the slot it
        began the iteration at and how late (horovod_worker.Pacer.vote_of)."""
        with self.cv:
            if flag is not None:
                self.flags[i] = flag
            self.ready_iter, self.ready = i, count
            self.cv.notify_all()

    def _wait(self, until: Any) -> None:
        with self.cv:
            while not until():
                if self.error is not None:
                    raise RuntimeError(f"the ring thread failed: {self.error!r}")
                self.cv.wait()

    def wait_layer(self, j: int, i: int) -> None:
        self._wait(lambda: self.done[j] >= i)

    def wait_all(self, i: int) -> None:
        self._wait(lambda: min(self.done) >= i)

    def stop_vote(self, i: int) -> tuple[bool, int, float]:
        """Iteration i's agreed vote: whether any rank votes to stop, the latest slot a rank
        began it at, and the most a rank began it late."""
        self._wait(lambda: i in self.votes)
        with self.cv:
            return self.votes.pop(i)

    def close(self) -> None:
        with self.cv:
            self.closing = True
            self.cv.notify_all()
        self.thread.join(timeout=60)

    # the ring thread's side
    def _main(self) -> None:
        try:
            it = 0
            while self._iteration(it):
                it += 1
        except BaseException as e:  # handed to the main thread's waits
            with self.cv:
                self.error = e
                self.cv.notify_all()

    def _local(self, it: int, reduced: set[int]) -> int | None:
        """Units ready here in iteration `it` once one of them is not reduced yet; None when
        closing with nothing left to do."""
        with self.cv:
            while True:
                local = self.ready if self.ready_iter == it else 0
                if any(k not in reduced for k in range(local)):
                    return local
                if self.closing:
                    return None
                self.cv.wait()

    def _iteration(self, it: int) -> bool:
        plan, n = self.plan, len(self.plan.units)
        reduced: set[int] = set()
        agreed = 0
        while len(reduced) < n:
            local = self._local(it, reduced)
            if local is None:
                return False
            if not reduced or (plan.agree and agreed < n):
                agreed = self._agree(it, local, first=not reduced)
            elif not plan.agree:
                agreed = local
            take = choose(plan, agreed, reduced)
            cls = plan.classes[take[0]] if plan.classes else 0
            self._reduce(sorted(j for k in take for j in plan.units[k]), cls)
            with self.cv:
                reduced.update(take)
                for k in take:
                    for j in plan.units[k]:
                        self.done[j] = it
                self.cv.notify_all()
        return True

    def _agree(self, it: int, local: int, first: bool) -> int:
        """MIN over the ranks of the ready count (and, in the first round, of −stop vote,
        −slot and −lateness in µs: any stop, the latest slot, the latest start)."""
        t0 = time.perf_counter()
        with self.cv:
            flag, slot, late = self.flags.pop(it, (False, 0, 0.0)) if first else (False, 0, 0.0)
        vote = [local, -1 if flag else 0, -slot, -round(late * 1e6)]
        t = self.torch.tensor(vote, dtype=self.torch.int64).to(self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MIN)
        agreed, stop, latest, late_us = t.tolist()
        self.rounds.append(time.perf_counter() - t0)
        if first:
            with self.cv:
                self.votes[it] = (stop < 0, -latest, -late_us / 1e6)
                self.cv.notify_all()
        return int(agreed)

    def _reduce(self, layers: list[int], cls: int = 0) -> None:
        """One all-reduce (sum, then / world: the average) of these layers' gradients, over
        class `cls`'s connections: a view of the flat gradients when the layers are adjacent,
        else a fused copy."""
        off = self.offsets
        runs: list[tuple[int, int]] = []
        for j in layers:
            if runs and runs[-1][1] == off[j]:
                runs[-1] = (runs[-1][0], off[j + 1])
            else:
                runs.append((off[j], off[j + 1]))
        views = [self.flat.narrow(0, a, b - a) for a, b in runs]
        buf = views[0] if len(views) == 1 else self.torch.cat(views)
        if cls:
            self.groups[cls - 1].allreduce([buf]).wait()
        else:
            self.dist.all_reduce(buf)
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()
        buf.div_(self.world)
        if len(views) > 1:
            at = 0
            for v in views:
                v.copy_(buf.narrow(0, at, v.numel()))
                at += v.numel()


def scheduled(
    cfg: dict[str, Any],
    dist: Any,
    torch: Any,
    rec: Recorder,
    deadline: float | None,
    groups: list[Any] | None = None,
    pacer: Pacer = NO_PACE,
) -> None:
    """The iterations (see the module's docstring). Without a barrier an iteration ends where
    the next one starts, as horovod_worker's, so it is recorded one iteration late.
    `groups`: the process groups of the policy's classes (ddp_worker.class_groups)."""
    layers = cfg["layers"]  # [name, params, forward_s, backward_s], input to output
    plan = plan_for(cfg)
    position = {u[0]: k for k, u in enumerate(plan.units)}  # backward's last layer of a unit
    device = torch.device(cfg.get("device", "cpu"))
    ring = Ring(plan, len(layers), dist, torch, device, groups or [])
    ring.start([int(x[1]) for x in layers])
    clock, barrier, limit = Clock(), cfg["barrier"], cfg.get("iterations")
    pending: tuple[int, Stamp, float] | None = None
    end = EndGuess(deadline)
    i = 0
    try:
        while limit is None or i < limit:
            if i > 0:
                stop, latest, late = ring.stop_vote(i - 1)
                if stop:
                    break
                pacer.agree(i - 1, latest, late)
            start = Stamp()
            if pending is not None:
                rec.add(pending[0], pending[1], start, pending[2])
                pending = None
            pacer.wait()  # its slot (policy interleave): the wait is part of the iteration
            flag: tuple[bool, int, float] | None = (
                FINISH.is_set() or end.late(start.wall, lag=1),
                *pacer.vote_of(i),
            )
            compute = 0.0
            for j, (_, _, fwd, _) in enumerate(layers):
                ring.wait_layer(j, i - 1)
                clock.compute(fwd)
                compute += fwd
            for j in range(len(layers) - 1, -1, -1):
                clock.compute(layers[j][3])
                compute += layers[j][3]
                if j in position:
                    ring.mark(i, position[j] + 1, flag)
                    flag = None
            if barrier:
                ring.wait_all(i)
                rec.add(i, start, Stamp(), compute)
            else:
                pending = (i, start, compute)
            i += 1
        if pending is not None:
            ring.wait_all(pending[0])
            rec.add(pending[0], pending[1], Stamp(), pending[2])
    finally:
        ring.close()
    print(agreement_line(ring.rounds, i), flush=True)


def agreement_line(rounds: list[float], iterations: int) -> str:
    """What the agreement cost this rank: its rounds' durations include waiting for the
    slowest rank, so the shortest (the rank that came last) is nearest the pure latency."""
    r = sorted(rounds) or [0.0]
    return (
        f"agreement: {len(rounds)} rounds over {iterations} iterations, "
        f"min {r[0] * 1e3:.3f} ms, p50 {r[len(r) // 2] * 1e3:.3f} ms, "
        f"mean {sum(r) / len(r) * 1e3:.3f} ms"
    )
