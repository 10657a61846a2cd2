"""torch-ddp's scheduled loop (ddp_schedule.py) without a network: its plans and choices by
hand, and its agreement between ranks whose readiness differs, on an in-process collective
that matches calls by order as Gloo does and fails on a mismatch."""

from __future__ import annotations

import csv
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from testbed.workloads.training.workers import ddp_schedule
from testbed.workloads.training.workers.ddp_schedule import Plan, choose, plan_for
from testbed.workloads.training.workers.horovod_worker import Pacer
from tests.clocks import StepClock
from tests.needs import need

MB = 1_000_000


def _cfg(sizes_mb: list[float], **kw: Any) -> dict[str, Any]:
    layers = [[f"l{j}", int(s * MB / 4), 0.001, 0.002] for j, s in enumerate(sizes_mb)]
    return {"layers": layers, "queue": "fifo", "fusion": "static", "fusion_threshold": 3 * MB,
            "bucket_cap": 25 * 2**20, "barrier": True, **kw}  # fmt: skip


def test_static_units_come_from_the_last_layer_down_in_readiness_order():
    # 1, 1, 2, 1, 1 MB under 3 MB, last layer down: 4+3 (2 MB) + 2 would be 4 → closed; 2+1
    # (3 MB ≤ 3) ; 0 alone
    p = plan_for(_cfg([1, 1, 2, 1, 1]))
    assert p.units == ((3, 4), (1, 2), (0,))
    assert p.nbytes == (2 * MB, 3 * MB, 1 * MB)
    assert not p.agree  # fifo over fixed buffers: the order alone decides
    assert plan_for(_cfg([1, 1], fusion="dynamic")).units == ((1,), (0,))
    assert plan_for(_cfg([1, 1], queue="priority")).agree


def test_priority_takes_the_lowest_layer_among_the_agreed_ready():
    p = Plan(((4,), (3,), (2,), (1,), (0,)), (MB,) * 5, "priority", "static", 0)
    assert choose(p, agreed=3, reduced=set()) == [2]  # layers 4, 3, 2 ready: 2 first
    assert choose(p, agreed=3, reduced={2}) == [1]  # then 3
    fifo = Plan(p.units, p.nbytes, "fifo", "static", 0)
    assert choose(fifo, agreed=3, reduced=set()) == [0]  # the earliest ready: layer 4


def test_dynamic_fusion_takes_queue_order_while_it_fits():
    # as predict._reduce: the first, then the next ones in queue order while ≤ the threshold
    p = Plan(((4,), (3,), (2,), (1,), (0,)), (MB, MB, 2 * MB, MB, MB), "fifo", "dynamic", 2 * MB)
    assert choose(p, agreed=5, reduced=set()) == [0, 1]  # 4 + 3 = 2 MB; + 2 MB would not fit
    prio = Plan(p.units, p.nbytes, "priority", "dynamic", 2 * MB)
    assert choose(prio, agreed=5, reduced=set()) == [4, 3]  # layers 0 and 1
    assert choose(prio, agreed=2, reduced=set()) == [1, 0]  # only 4 and 3 agreed ready


class FakeGroup:
    """Collectives matched by call order across rank threads, as Gloo matches them: the i-th
    call of every rank must carry the same number of elements, or the test fails."""

    def __init__(self, world: int, torch: Any, seconds_per_mb: float) -> None:
        self.world, self.torch, self.spm = world, torch, seconds_per_mb
        self.cv = threading.Condition()
        self.calls: dict[int, list[Any]] = {}
        self.results: dict[int, Any] = {}
        self.mismatch: list[str] = []

    def rank(self, r: int) -> FakeDist:
        return FakeDist(self, r)

    def reduce(self, i: int, r: int, t: Any, op: Any) -> None:
        with self.cv:
            got = self.calls.setdefault(i, [])
            got.append((r, t.clone(), op))
            if len(got) == self.world:
                if len({(x.numel(), o) for _, x, o in got}) != 1:
                    self.mismatch.append(f"call {i}: {[(q, x.numel(), o) for q, x, o in got]}")
                stack = self.torch.stack([x for _, x, _ in got])
                out = stack.min(0).values if op == "min" else stack.sum(0)
                self.results[i] = out
                self.cv.notify_all()
            deadline = time.monotonic() + 10
            while i not in self.results:
                assert time.monotonic() < deadline, f"rank {r} stuck in call {i}"
                self.cv.wait(0.5)
        if op != "min":  # the link: time in proportion to the bytes
            time.sleep(t.numel() * 4 / MB * self.spm)
        t.copy_(self.results[i])


class FakeDist:
    """One rank's torch.distributed: the calls it makes, numbered."""

    class ReduceOp:
        MIN = "min"

    def __init__(self, group: FakeGroup, r: int) -> None:
        self.group, self.r, self.n = group, r, 0

    def get_world_size(self) -> int:
        return self.group.world

    def all_reduce(self, t: Any, op: Any = None) -> None:
        self.n += 1
        self.group.reduce(self.n - 1, self.r, t, op)


class Rows:
    def __init__(self) -> None:
        self.rows: list[tuple[int, float, float]] = []

    def add(self, i: int, start: Any, end: Any, compute: float) -> None:
        self.rows.append((i, end.mono - start.mono, compute))


def _run_ranks(n: int, rank: Callable[[int], None], group: FakeGroup) -> None:
    """rank(0) … rank(n − 1), each in its own thread, as the ranks of one job; fails on any
    rank's error or on collectives that did not match."""
    errors: list[BaseException] = []

    def run(r: int) -> None:
        try:
            rank(r)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and not group.mismatch, (errors, group.mismatch)


@pytest.mark.parametrize(
    ("queue", "fusion", "barrier"),
    [("priority", "static", False), ("fifo", "dynamic", True), ("priority", "dynamic", False),
     ("fifo", "static", False)],
)  # fmt: skip
def test_ranks_agree_on_every_buffer_though_their_readiness_differs(queue, fusion, barrier):
    """Three ranks, rank r's compute starting r × 7 ms late (a layer is 1 ms forward, 2 ms
    backward): a buffer's readiness differs between ranks by more than its ring time, yet
    every collective matches, every rank does every iteration, and none is faster than its
    compute (less the 2 ms of oversleep the Clock may carry over)."""
    torch = need("torch", "torch is installed by install.sh")
    group = FakeGroup(3, torch, seconds_per_mb=0.004)
    cfg = _cfg([0.5, 1, 0.25, 1, 0.5, 2, 0.25], queue=queue, fusion=fusion, barrier=barrier,
               fusion_threshold=1.5 * MB, iterations=4)  # fmt: skip
    rows = [Rows() for _ in range(3)]

    def rank(r: int) -> None:
        time.sleep(0.007 * r)
        ddp_schedule.scheduled(cfg, group.rank(r), torch, rows[r], deadline=None)  # type: ignore[arg-type]

    _run_ranks(3, rank, group)
    compute = sum(x[2] + x[3] for x in cfg["layers"])
    for r in range(3):
        assert [i for i, _, _ in rows[r].rows] == [0, 1, 2, 3]
        assert all(took >= c - 0.002 and c == pytest.approx(compute) for _, took, c in rows[r].rows)


def test_ranks_that_began_an_iteration_on_different_slots_meet_on_the_same_slots(tmp_path):
    """Policy interleave on the thesis' schedule: rank 1's pacer starts a slot ahead of rank
    0's (as after a lateness judged differently), slots every 60 ms. The slot rides on the
    first round's vote, so from the iteration after the one whose vote is read, both ranks
    begin on the same slot; without the agreement they would stay one apart."""
    torch = need("torch", "torch is installed by install.sh")
    group = FakeGroup(2, torch, seconds_per_mb=0.004)
    cfg = _cfg([0.25, 0.25], queue="priority", fusion="static", barrier=False, iterations=5)
    t0 = StepClock().time()  # each rank on its own clock (tests/clocks.py)
    pace = {"pace": {"offset_s": 0.0, "period_s": 0.06, "skip_after_s": 0.01}}
    pacers = [Pacer(pace, t0, tmp_path / f"{r}.csv", clock=StepClock(t0)) for r in range(2)]
    pacers[1].slot = 1

    def rank(r: int) -> None:
        ddp_schedule.scheduled(cfg, group.rank(r), torch, Rows(), None, pacer=pacers[r])  # type: ignore[arg-type]

    _run_ranks(2, rank, group)
    for p in pacers:
        p._file.close()
    slots = [
        [int(x["slot"]) for x in csv.DictReader((tmp_path / f"{r}.csv").open())] for r in range(2)
    ]
    assert slots[0][0] == 0 and slots[1][0] == 1, slots
    assert slots[0][1:] == slots[1][1:], slots  # iteration 0's vote is read before iteration 1
