"""Policy `interleave` (policies.py): training jobs that share a fabric take turns on it,
CASSINI-style (Rajasekaran et al., NSDI'24). Each job's iteration has a phase that needs the
network (its reductions) and one that does not (compute); jobs whose network phases coincide
share the link and each is slowed, jobs whose phases alternate each run as if alone.

The plan (pure, unit-tested by hand): every job's iteration time alone and its network arcs
come from its event model (predict.network_arcs). The group's period P is the longest of
those times, stretched by the policy's `margin`; a job that fits its iteration into P more
than once runs n = ⌊P / (its time × (1 + margin))⌋ iterations a period (CASSINI's unified
circle, with harmonic periods only). The jobs are placed on a circle of length P one at a
time, the most network first (then by name), each at the offset, on a grid of P / 720, where
its arcs (n copies, P / n apart) overlap the arcs already placed the least; the earliest such
offset wins. An offset the user gives is placed first, as given. Where every job runs once a
period, none is given and nothing overlaps, the jobs keep that order and the free time of the
period is shared out equally between their network phases (a phase that runs longer than its
model then eats into a gap, not into the next job's phase).

The workers keep to the plan (horovod_worker.Pacer): iteration i of a job starts no earlier
than t0 + P + offset + i · P / n. The grid begins one period after t0 because every worker of
every job wakes at t0 (window.wait_for_go): a job whose first slot was t0 itself began it up to
75 ms late on this 2-core machine (2026-12-05, 1 run of 3), beyond its gap, and its phase ran
into the next job's for the rest of the run. What a late iteration does is the policy's `late`:
`catch-up` starts it at once and keeps its place on the grid, so the slack that the margin
leaves brings the job back onto it, a little each iteration; `skip` gives up the slots it
began late by beyond the job's gap (the least free time the plan leaves between the end of one
of the job's network arcs and the start of another job's on the circle: the lateness past which
its phase would run into another job's), decided on the stop vote so that every rank gives up
the same ones (Pacer), before the iteration after the late one (the one after that for Horovod
without a barrier); `hold` (torch-ddp's own schedule only) gives them up before the late
iteration's own network phase, on a vote sent as the iteration begins and read before its first
reduction (Pacer.hold), the phase waiting for the slot it gives up for. Catching up costs
nothing while the lateness stays within the gap and collides beyond it; skipping costs a slot
and collides only until the vote is read; holding costs the same slot and does not collide. The
iteration's recorded time includes any wait for its slot: the job's throughput, not only its
busy time. The summary counts, from rank 0's pace log, the iterations that began on their slot
and the slots the job skipped, and from its records how much of its gap its own phases used
up (phase_overrun).

What the plan assumes: every job of the group shares one bottleneck (placing them apart costs
nothing if they do not), and the model's arcs alone are what the jobs do (compute emulated
per layer; the workers' own overheads come out of the margin, and out of the gaps: the
summary's phase_overrun_s says how much). A period the policy gives (`period`, e.g. from the
jobs' measured iterations alone) replaces the model's; the free time is shared out of it the
same way."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.workloads.training.policies import group
from testbed.workloads.training.policies.ranking import rank_in
from testbed.workloads.training.workers.horovod_worker import pace_file

GRID = 720  # offsets tried per period


@dataclass(frozen=True)
class Profile:
    """A job as the plan sees it: its iteration time alone and its network arcs (start, end)
    from the start of its iteration, in seconds."""

    name: str
    iteration_s: float
    arcs: tuple[tuple[float, float], ...]
    offset_s: float | None = None  # given by the user; None: the plan chooses

    @property
    def network_s(self) -> float:
        return sum(b - a for a, b in self.arcs)


@dataclass(frozen=True)
class Slot:
    """Where a job runs: its iterations start at offset_s + i · slot_s (from the run's t0)."""

    period_s: float  # the group's period P
    per_period: int  # n: the job's iterations per period
    offset_s: float
    overlap_s: float  # of its network time per period, how much the plan could not separate
    gap_s: float = 0.0  # how late it may start before an arc runs into another job's (_gaps)

    @property
    def slot_s(self) -> float:
        return self.period_s / self.per_period


def period(profiles: list[Profile], margin: float, given: float | None = None) -> float:
    """P: `given`, or the longest iteration alone, stretched by `margin` (a fraction)."""
    return given if given is not None else max(p.iteration_s for p in profiles) * (1 + margin)


def _bins(arcs: tuple[tuple[float, float], ...], shift: float, step: float, n: int) -> list[int]:
    """The grid bins (mod GRID) that the arcs cover when shifted by `shift`, `n` copies."""
    out: list[int] = []
    for m in range(n):
        for a, b in arcs:
            lo = round((a + shift + m * GRID * step / n) / step)
            hi = max(lo + 1, round((b + shift + m * GRID * step / n) / step))
            out.extend(k % GRID for k in range(lo, hi))
    return out


def plan(
    profiles: list[Profile], margin: float, given_period: float | None = None
) -> dict[str, Slot]:
    """Each job's slot (the module's docstring says how)."""
    big_p = period(profiles, margin, given_period)
    step = big_p / GRID
    busy = [0] * GRID  # how many placed jobs' arcs cover each bin
    order = sorted(profiles, key=lambda p: (p.offset_s is None, -p.network_s, p.name))
    out: dict[str, Slot] = {}
    for p in order:
        n = max(1, math.floor(big_p / (p.iteration_s * (1 + margin)) + 1e-9))
        if p.offset_s is not None:
            shift = p.offset_s
        else:
            width = GRID // n  # copies repeat every period / n: no need to try further
            shift = step * min(
                range(width), key=lambda k: sum(busy[b] for b in _bins(p.arcs, k * step, step, n))
            )
        bins = _bins(p.arcs, shift, step, n)
        overlap = sum(busy[b] for b in bins) * step
        for b in bins:
            busy[b] += 1
        out[p.name] = Slot(big_p, n, shift, overlap)
    return _gaps(profiles, _spread(profiles, out, big_p))


def _gaps(profiles: list[Profile], slots: dict[str, Slot]) -> dict[str, Slot]:
    """Each slot with its gap: the least time, on the circle, from the end of one of the job's
    arcs (every copy) to the start of another job's arc: how late the job's iteration may
    start before one of its arcs runs into another job's (its own arcs move together). No
    gap where one of its arcs already overlaps another job's (the plan could not separate
    them); a job with no other job's arcs to meet has its whole slot. The plan places on a
    grid of P / GRID, so arcs that meet or overlap by less than a step count as touching."""
    arcs = {
        p.name: [
            (s.offset_s + m * s.slot_s + a, s.offset_s + m * s.slot_s + b)
            for m in range(s.per_period)
            for a, b in p.arcs
        ]
        for p in profiles
        for s in (slots[p.name],)
    }
    out = {}
    for name, s in slots.items():
        others = [y for other, ys in arcs.items() if other != name for y in ys]
        mine = arcs.get(name, [])
        gap = s.slot_s if not others or not mine else _least_gap(mine, others, s.period_s)
        out[name] = dataclasses.replace(s, gap_s=min(gap, s.slot_s))
    return out


def _least_gap(
    mine: list[tuple[float, float]], others: list[tuple[float, float]], period: float
) -> float:
    """The least forward distance on a circle of `period` from an end of `mine` to a start
    of `others`; 0 where an arc of one overlaps an arc of the other by more than a grid
    step."""
    tol = period / GRID
    least = period
    for xs, xe in mine:
        for ys, ye in others:
            if (ys - xs) % period < xe - xs - tol or (xs - ys) % period < ye - ys - tol:
                return 0.0  # they overlap
            d = (ys - xe) % period
            least = min(least, 0.0 if d > period - tol else d)
    return least


def _spread(profiles: list[Profile], slots: dict[str, Slot], big_p: float) -> dict[str, Slot]:
    """With one iteration a period each, no offset given and no overlap, the same order
    around the period with the free time shared out equally between the jobs' network
    phases: placed end to end, a phase that runs a little longer than its model (TCP's
    ramp, the workers' own overheads) would run into the next job's."""
    if any(p.offset_s is not None or not p.arcs for p in profiles) or any(
        s.per_period != 1 or s.overlap_s > 0 for s in slots.values()
    ):
        return slots
    span = {p.name: (min(a for a, _ in p.arcs), max(b for _, b in p.arcs)) for p in profiles}
    gap = (big_p - sum(b - a for a, b in span.values())) / len(profiles)
    if gap < 0:  # a job's phases enclose another's: keep the greedy placement
        return slots
    first = min(profiles, key=lambda p: slots[p.name].offset_s)  # the first placed: offset 0
    home = slots[first.name].offset_s + span[first.name][0]

    def around(p: Profile) -> float:
        return (slots[p.name].offset_s + span[p.name][0] - home) % big_p

    out, at = {}, home
    for p in sorted(profiles, key=around):
        a, b = span[p.name]
        out[p.name] = Slot(big_p, 1, (at - a) % big_p, 0.0)
        at += b - a + gap
    return out


ON_SLOT = 0.01  # an iteration that begins within this share of a slot after it is on it


def keeping(rows: list[dict[str, str]], slot_s: float) -> dict[str, Any]:
    """How a worker kept to its slots, from its pace log (horovod_worker.Pacer; rows whose
    slot lies in the window): the share of iterations that began on their slot (within
    ON_SLOT of it), and the slots it skipped (`late: skip`; a job that catches up keeps one
    slot an iteration, however late, so its lateness shows in the share only)."""
    if not rows:
        return {"on_slot_share": None, "slots_missed": 0}
    on = sum(_on_slot(r, slot_s) for r in rows)
    slots = [int(r["slot"]) for r in rows]
    missed = sum(max(0, b - a - 1) for a, b in itertools.pairwise(slots))
    return {"on_slot_share": on / len(rows), "slots_missed": missed}


def _on_slot(row: dict[str, str], slot_s: float) -> bool:
    """Whether a pace log's row began within ON_SLOT of its slot."""
    return float(row["began"]) - float(row["slot_time"]) <= ON_SLOT * slot_s


def phase_overrun(rows: list[dict[str, str]], slot_s: float, arc_end_s: float) -> float | None:
    """How much of its gap a job's own phases use up: over the iterations that began on their
    slot (rows: its pace log, each with the iteration's `end` from its records where it has
    ended), the median of how much later than the plan's last network arc (`arc_end_s` from
    the iteration's start) the iteration ended. The plan's arcs are the model's; what the workers add to a transfer
    (agreement rounds, TCP's ramp) is not in them, and a phase that ends later than planned
    runs into the next job's when its iteration begins later than the gap less this. None
    without an iteration on its slot."""  # fmt: skip
    over = [
        float(r["end"]) - float(r["began"]) - arc_end_s
        for r in rows
        if "end" in r and _on_slot(r, slot_s)
    ]
    return statistics.median(over) if over else None


class Interleave:
    """The runner of one job of the group: the workers pace themselves (worker_config); it
    reports the plan and, from rank 0's pace log, how the job kept to it."""

    def __init__(
        self,
        name: str,
        slots: dict[str, Slot],
        network_s: float,
        late: str = "catch-up",
        records: Path | None = None,
        ranked: tuple[int, str] | None = None,
        arc_end_s: float | None = None,
    ) -> None:
        """`records`: rank 0's iteration records (its slots beside them:
        horovod_worker.pace_file); `ranked`: with the policy's classes, the job's rank by
        compute-to-network ratio and the class it gave; `arc_end_s`: the end of the job's last
        network arc in the plan, from the start of its iteration."""
        self.name, self.slots, self.slot = name, slots, slots[name]
        self.network_s, self.late, self.records = network_s, late, records
        self.arc_end_s = arc_end_s
        self.ranked = ranked

    def worker_config(self) -> dict[str, Any]:
        s = self.slot
        first = s.period_s + s.offset_s  # one period's lead for every job: the offsets hold
        pace = {"offset_s": first, "period_s": s.slot_s, "skip_after_s": self.skip_after_s}
        return {"pace": {**pace, "hold": self.late == "hold"}}

    @property
    def skip_after_s(self) -> float | None:
        """With `late: skip` or `hold`, the lateness past which the job gives up slots
        (Pacer.agree, Pacer.hold): the gap, but never under ON_SLOT of the slot (phases that
        touch would otherwise give a slot away for a few microseconds of lateness). None when
        the job catches up."""
        if self.late == "catch-up":
            return None
        return max(self.slot.gap_s, ON_SLOT * self.slot.slot_s)

    def tick(self, now: float) -> None:
        pass  # the workers keep to their slots themselves

    def section(self, t0: float, t1: float) -> dict[str, Any]:
        s = self.slot
        return {
            "kind": "interleave",
            "jobs": len(self.slots),
            "period_s": s.period_s,
            "slot_s": s.slot_s,
            "offset_s": s.offset_s,
            "network_s": self.network_s,
            "planned_overlap_s": s.overlap_s / s.per_period,
            "gap_s": s.gap_s,
            "late": self.late,
            "skip_after_s": self.skip_after_s,
            "rank": self.ranked[0] if self.ranked else None,
            "to": self.ranked[1] if self.ranked else None,
            **self._kept(t0, t1),
        }

    def _kept(self, t0: float, t1: float) -> dict[str, Any]:
        """keeping() and phase_overrun() over rank 0's slots inside [t0, t1)."""
        rows: list[dict[str, str]] = []
        if self.records is not None and pace_file(self.records).exists():
            with open(pace_file(self.records), newline="") as f:
                every = list(csv.DictReader(f))
            done: dict[int, str] = {}
            if self.records.exists():
                with open(self.records, newline="") as f:
                    done = {int(r["iteration"]): r["end"] for r in csv.DictReader(f)}
            rows = [  # a worker's i-th slot is its iteration i
                {**r, "end": done[i]} if i in done else r
                for i, r in enumerate(every)
                if t0 <= float(r["slot_time"]) < t1
            ]
        over = None
        if self.arc_end_s is not None:
            over = phase_overrun(rows, self.slot.slot_s, self.arc_end_s)
        return {
            **keeping(rows, self.slot.slot_s),
            "phase_overrun_s": over,
            "gap_left_s": None if over is None else self.slot.gap_s - over,
        }

    def warning(self) -> str | None:
        s = self.slot
        if len(self.slots) < 2:
            return "policy interleave has no other job to take turns with (give it to two or more)"
        if s.overlap_s > 0.05 * self.network_s * s.per_period:
            return (
                f"policy interleave could not keep its network phase apart from the others': "
                f"{s.overlap_s / s.per_period * 1e3:.3g} ms of its "
                f"{self.network_s * 1e3:.3g} ms overlap in the plan (the jobs' network phases "
                "together exceed the period)"
            )
        return None

    def address_classes(self) -> dict[str, str]:
        return {}  # the job's sockets are all in its own class

    def close(self) -> None:
        pass


def plan_for(s: Any) -> tuple[list[Profile], dict[str, Slot]]:
    """The group of scenario `s` (every training job whose policy is interleave) and its
    slots, at the largest margin any of them asks for. Every job's runner computes the same
    plan from the same scenario; the loader computes it too, to check given offsets."""
    from testbed.workloads.training.model.predict import network_arcs

    jobs, margin, given = [], 0.0, None
    for name, w in group(s, "interleave").items():
        it, arcs = network_arcs(name, s)
        jobs.append(Profile(name, it, tuple(arcs), w.policy.offset))
        margin = max(margin, w.policy.margin / 100)
        given = w.policy.period if w.policy.period is not None else given
    return jobs, plan(jobs, margin, given)


def start(job: Any) -> Interleave:
    """The runner of training job `job` (horovod.HorovodJob) whose policy is interleave: the
    plan on this machine's clock (the scenario the machine runs, dilated)."""
    profiles, slots = plan_for(job.s)
    mine = next(p for p in profiles if p.name == job.name)
    ranked = None
    if job.cfg.policy.classes is not None:  # the loader gave the job its class (groups.py)
        ranked = (rank_in(job.s, "interleave", job.name)[0], job.cfg.d.tc_class)
    return Interleave(
        job.name,
        slots,
        mine.network_s,
        late=job.cfg.policy.late,
        records=job.records_of(job.hosts()[0]),
        ranked=ranked,
        arc_end_s=max((b for _, b in mine.arcs), default=None),
    )
