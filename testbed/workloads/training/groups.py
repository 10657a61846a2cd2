"""What training policies derive across jobs, once every job of the scenario is resolved
(the kind's `resolve_group`, called by testbed.resolve): by-ratio's classes (ranking.py) and
interleave's given offsets, checked against the group's period (interleave.py). Both need
every job of their group, which no single job's resolve sees."""

from __future__ import annotations

from typing import Any

from testbed.fields import FieldProblem
from testbed.units import format_duration
from testbed.workloads.training.interleave import plan_for
from testbed.workloads.training.policies import group as jobs_with
from testbed.workloads.training.ranking import classes


def resolve(s: Any) -> None:
    _rank(s)
    _check_offsets(s)


def _rank(s: Any) -> None:
    """Policy by-ratio: each job of the group its class, into its derived block."""
    group = jobs_with(s, "by-ratio")
    if not group:
        return
    lists = {tuple(w.policy.classes): n for n, w in group.items()}
    if len(lists) > 1:
        (a, first), (b, second) = list(lists.items())[:2]
        raise FieldProblem(
            ("workloads", second, "policy", "classes"),
            f"{list(b)} differs from {first}'s {list(a)}: the jobs of policy by-ratio rank "
            "against each other, so every one gives the same classes",
        )
    ratios = [(n, w.d.compute_to_network_ratio) for n, w in group.items()]
    for n, cls in classes(ratios, list(next(iter(lists)))).items():
        group[n].derived.tc_class = cls
        group[n].derived.dscp = s.tc_profile.cls(cls).mark


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
