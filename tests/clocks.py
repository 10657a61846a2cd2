"""A clock for unit tests of the pacer and the compute clock (horovod_worker.Pacer's and
Clock's `clock`): time moves only when the code under test sleeps or the test moves it, so
every slot and every carried oversleep is judged exactly. On the
real clock a sleep on a busy machine overshoots by more than ON_SLOT (2 ms of a 0.2 s slot)
or a skip limit, and in a CI run with half the CPU stolen an iteration that had waited for its
slot was counted late (2026-12-01). The integration tests pace on the real clock."""

from __future__ import annotations


class StepClock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    perf_counter = time

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)
