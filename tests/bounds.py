"""The one place where a slow machine may excuse a missed bound.

A test on real traffic bounds rates and times by what the links and the compute allow. On this
2-core VM the hypervisor sometimes takes CPU away (steal), and a sender that is not scheduled
sends nothing: a rate comes out low, a time long. Only those two kinds of bound can be missed
for the machine's sake, so only they go through `rate_at_least` and `time_at_most`. Every other
check (a class, a count, a route, an upper bound on a rate, physics) is a plain `assert` and
fails whatever the steal.

A missed bound is excused only when the steal of the run's own measured window (summary
`host_cpu`, read at the window's edges) explains it: with `cores` CPUs and a share `steal` of
all their time stolen, one process can have lost at most `cores × steal` of the window (all of
it taken from the CPU it ran on), so a rate can fall short by at most that fraction and a time
stretch by at most 1 / (1 − that). Below STEAL_LIMIT nothing is excused. An excused bound raises
SlowMachine: the test is run once more from scratch (pytest-rerunfailures, for this exception
only), and if it is excused again it is reported as skipped, "excused: ...", and counted;
`.ci/run` fails when more than 3 tests of a run were excused (tests/conftest.py).
"""

from __future__ import annotations

import os
from typing import Any

STEAL_LIMIT = 0.02  # of the machine's CPU time over the window: the one threshold


class SlowMachine(Exception):
    """A lower bound on a rate or an upper bound on a time missed by no more than the steal of
    the measurement's own window can explain."""


def _cpu(where: dict[str, Any]) -> tuple[float, int]:
    """(steal share, cores) from a summary or its host_cpu section (hostcpu.between's shape)."""
    cpu = where.get("host_cpu", where)
    steal = cpu.get("steal")
    return (steal if isinstance(steal, float) else 0.0), int(
        cpu.get("cores") or os.cpu_count() or 1
    )


def lost_share(where: dict[str, Any]) -> float:
    """The largest share of the window one process can have lost to steal (0 below the limit)."""
    steal, cores = _cpu(where)
    return 0.0 if steal < STEAL_LIMIT else min(1.0, cores * steal)


def rate_at_least(value: float, bound: float, where: dict[str, Any], what: str) -> None:
    """`value` ≥ `bound`, a rate; `where`: the run's summary (or a host_cpu dict) that measured
    it. Raises AssertionError, or SlowMachine when the steal explains the shortfall."""
    if value >= bound:
        return
    short = 1 - value / bound if bound > 0 else 1.0
    steal, cores = _cpu(where)
    lost = lost_share(where)
    line = (
        f"{what}: {value:.6g} < {bound:.6g}, {short:.1%} short; the hypervisor took {steal:.1%} "
        f"of {cores} cores over the window, which explains at most {lost:.1%}"
    )
    if short <= lost:
        raise SlowMachine(line)
    raise AssertionError(line)


def time_at_most(value: float, bound: float, where: dict[str, Any], what: str) -> None:
    """`value` ≤ `bound`, a time; as rate_at_least, a process that lost a share `lost` of the
    window to steal can take up to 1 / (1 − lost) as long."""
    if value <= bound:
        return
    over = value / bound - 1 if bound > 0 else float("inf")
    steal, cores = _cpu(where)
    lost = lost_share(where)
    stretch = float("inf") if lost >= 1 else lost / (1 - lost)
    line = (
        f"{what}: {value:.6g} > {bound:.6g}, {over:.1%} over; the hypervisor took {steal:.1%} "
        f"of {cores} cores over the window, which explains at most {stretch:.1%}"
    )
    if over <= stretch:
        raise SlowMachine(line)
    raise AssertionError(line)
