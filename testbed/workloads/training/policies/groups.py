"""What training policies derive across jobs, once every job of the scenario is resolved
(the kind's `resolve_group`, called by testbed.scenario.resolve): the classes of by-ratio, and of
interleave when it gives `classes` (ranking.py), and interleave's given offsets, checked
against the group's period (interleave.py). Each needs every job of its group, which no
single job's resolve sees."""

from __future__ import annotations

from typing import Any

from testbed.core.fields import FieldProblem
from testbed.core.units import format_duration
from testbed.workloads.training.policies import group as jobs_with
from testbed.workloads.training.policies.interleave import plan_for
from testbed.workloads.training.policies.ranking import classes


def resolve(s: Any) -> None:
    _rank(s, "by-ratio")
    _rank(s, "interleave")
    _check_period(s)
    _check_offsets(s)


def _rank(s: Any, kind: str) -> None:
    """Policy by-ratio, or interleave with `classes`: each job of the group its class, into
    its derived block."""
    group = jobs_with(s, kind)
    if not any(w.policy.classes is not None for w in group.values()):
        return  # interleave without classes: each job keeps its own
    lists = {_listed(w.policy.classes): n for n, w in group.items()}
    if len(lists) > 1:
        (a, first), (b, second) = list(lists.items())[:2]
        raise FieldProblem(
            ("workloads", second, "policy", "classes"),
            f"{_shown(b)} differs from {first}'s {_shown(a)}: the jobs of policy {kind} rank "
            "against each other, so every one gives the same classes",
        )
    ratios = [(n, w.d.compute_to_network_ratio) for n, w in group.items()]
    for n, cls in classes(ratios, list(next(iter(lists)))).items():
        group[n].derived.tc_class = cls
        group[n].derived.dscp = s.tc_profile.cls(cls).mark


def _listed(names: list[str] | None) -> tuple[str, ...]:
    return tuple(names or ())


def _shown(names: tuple[str, ...]) -> str:
    return str(list(names)) if names else "none (its own class)"


def _check_period(s: Any) -> None:
    """Policy interleave: a given period is the same on every job that gives one, and no
    shorter than the longest iteration alone by the model (a job that cannot fit its
    iteration into the period falls behind its slots for good)."""
    group = jobs_with(s, "interleave")
    given = {n: w.policy.period for n, w in group.items() if w.policy.period is not None}
    if not given:
        return
    (first, value), *rest = given.items()
    for n, other in rest:
        if other != value:
            raise FieldProblem(
                ("workloads", n, "policy", "period"),
                f"{format_duration(other)} differs from {first}'s {format_duration(value)}: the "
                "jobs of policy interleave share one period, so every one that gives it gives "
                "the same",
            )
    profiles, _ = plan_for(s)
    longest = max(profiles, key=lambda p: p.iteration_s)
    if value < longest.iteration_s:
        raise FieldProblem(
            ("workloads", first, "policy", "period"),
            f"{format_duration(value)} is shorter than {longest.name}'s iteration alone "
            f"({format_duration(longest.iteration_s)} by its model: `testbed predict`); give "
            "at least that, or leave it out to have it computed",
        )


def _check_offsets(s: Any) -> None:
    """Policy interleave: a given offset lies within the job's slot of the group's period."""
    group = jobs_with(s, "interleave")
    if not any(w.policy.offset is not None for w in group.values()):
        return
    _, slots = plan_for(s)
    for n, w in group.items():
        offset, slot = w.policy.offset, slots[n]
        if offset is not None and offset >= slot.slot_s:
            raise FieldProblem(
                ("workloads", n, "policy", "offset"),
                f"{format_duration(offset)} is beyond {n}'s slot of "
                f"{format_duration(slot.slot_s)} (the group's period "
                f"{format_duration(slot.period_s)}"
                + (f" / {slot.per_period} iterations" if slot.per_period > 1 else "")
                + "); give less, or leave it out to have it computed",
            )
