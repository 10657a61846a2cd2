"""Seeds until decided: a sweep whose `seeds: {from, min, max, step, until: decided}` runs
`min` seeds, judges its aims (aggregate.verdicts), and adds `step` seeds at a time while any
aim is undecided, up to `max` seeds or the time `--budget` allows. Each round is an ordinary
sweep over the seeds so far, so finished points are skipped and a stopped sweep resumes like
any other (the rounds it had run finish at once).

Judging after every round and stopping on a decision is a sequential test: it decides a
little more often than a single 95 % test of the final seeds would, which is why `min` is
3 and a verdict is read with its interval, never alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.results.aggregate import record_verdicts
from testbed.results.sweep import (
    Outcome,
    Point,
    SeedPlan,
    SweepSpec,
    expand,
    finished_runs,
    recorded_wall,
)

RoundFn = Callable[[list[Point]], list[Outcome]]
KeepFn = Callable[[list[Point]], set[int] | None]  # --only's filter (None: every point)


@dataclass
class Decided:
    points: list[Point]
    outcomes: list[Outcome]
    seeds: int
    stopped: str  # decided | max | budget | failed
    verdicts: dict[str, Any]


def mean_wall(out: Path) -> float | None:
    """The mean wall time of the runs finished in the sweep folder `out` (None: none yet)."""
    walls = [w for p in finished_runs(out / "runs").values() if (w := recorded_wall(p)) > 0]
    return sum(walls) / len(walls) if walls else None


def round_cost(points: list[Point], out: Path, per_run: float | None) -> float | None:
    """What running the unfinished `points` would cost, at `per_run` seconds a run."""
    done = finished_runs(out / "runs")
    todo = sum(p.identity not in done for p in points)
    return None if per_run is None else todo * per_run


def open_aims(judged: list[dict[str, Any]], kept: list[Point] | None) -> list[dict[str, Any]]:
    """The undecided verdicts this invocation can still decide: with --only, those of the
    cells its points fall in (another cell's aim is that part's to decide, not this one's)."""

    def ours(cell: dict[str, str]) -> bool:
        return kept is None or any(all(p.labels.get(a) == v for a, v in cell.items()) for p in kept)

    return [j for j in judged if j["verdict"] == "undecided" and ours(j["cell"])]


def run_until_decided(
    spec: SweepSpec,
    sweep_file: Path,
    out: Path,
    run_round: RoundFn,
    budget_s: float | None = None,
    say: Callable[[str], None] = lambda _: None,
    keep: KeepFn = lambda _: None,
) -> Decided:
    """Rounds of seeds until every aim holds or misses, `max` seeds ran, or the next round
    would not fit in `budget_s` (this invocation's seconds; None: no limit). `keep`: the
    points --only keeps, so that a part run counts its own cost and its own aims."""
    plan = spec.seeds
    assert isinstance(plan, SeedPlan)
    t0 = time.monotonic()
    n = plan.min
    while True:
        points = expand(spec, sweep_file, plan.first(n))
        kept_ix = keep(points)
        kept = None if kept_ix is None else [p for p in points if p.index in kept_ix]
        if budget_s is not None:
            cost = round_cost(points if kept is None else kept, out, mean_wall(out))
            left = budget_s - (time.monotonic() - t0)
            if cost is not None and cost > left:
                say(f"seeds {plan.from_}–{plan.from_ + n - 1}: the round needs about "
                    f"{cost / 60:.0f} min, the budget has {max(left, 0) / 60:.0f} min left; "
                    "stopping")  # fmt: skip
                return _stop(spec, out, points, [], "budget")
        outcomes = run_round(points)
        if any(o.status == "failed" for o in outcomes):
            return _stop(spec, out, points, outcomes, "failed")
        v = record_verdicts(out, spec.name)
        still = open_aims(v["judged"], kept)
        if v["decided"] or (v["judged"] and not still):
            return _stop(spec, out, points, outcomes, "decided")
        if n >= plan.max:
            return _stop(spec, out, points, outcomes, "max")
        left_open = ", ".join(f"{j['aim']} ({j['value']}, {j['verdict']})" for j in still)
        n = min(n + plan.step, plan.max)
        say(f"after {len(v['seeds'])} seeds undecided: {left_open}; adding seeds up to {n}")


def _stop(
    spec: SweepSpec, out: Path, points: list[Point], outcomes: list[Outcome], why: str
) -> Decided:
    """The end of the rounds, kept in the sweep's record (`until` beside `verdicts`)."""
    v: dict[str, Any] = {}
    if (out / "sweep.json").is_file():
        v = record_verdicts(out, spec.name, until={"stopped": why})
    seeds = len(v.get("seeds", []))
    return Decided(points, outcomes, seeds, why, v)
