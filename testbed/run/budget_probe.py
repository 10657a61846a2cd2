"""Measure the machine's link budget (budget.py) with testbed's own runs: linkcheck bulk
flows through links shaped at a rate no machine here reaches, so that the machine, not the
shaper, is what holds them. One flow h1 → h2, then eight at once (8 hosts in a ring), 2 s of
measured window each, in the link mode asked for; about 10 s per mode, once per boot.

And each workload kind's CPU cost (kind_cost), the first time a scenario with that kind asks:
the kind alone (its `probe` entry) on 8 hosts whose links run at 100 Mbit/s of this machine's
clock, the rate of a thesis cell's links at ×100, where packets come one by one as in every
dilated run; the machine's busy CPU seconds over the measured window per wire byte its hosts'
uplinks carried. About 10 s a kind, kept with the link budget until the next boot."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from testbed.run.orchestrator import run
from testbed.scenario import budget
from testbed.scenario.budget import Budget
from testbed.scenario.resolve import load_scenario_data
from testbed.scenario.schema import Scenario
from testbed.workloads import kinds

log = logging.getLogger(__name__)

PROBE_RATE = 100_000_000_000  # 100 Gbit/s per direction: above what any machine here carries
FLOWS = 8
KIND_HOSTS = 8
KIND_LINK = "100mbit"  # wall rate, as a thesis cell's 10 Gbit/s at ×100
CARRIED_AT_LEAST = 0.2  # of the load a kind's probe asks (heavy-tailed flow sizes vary)


def _uplinks_bps(summary: dict[str, Any]) -> float:
    """Wire bits/s the hosts' uplinks carried together over the measured window."""
    return sum(
        c["rate_bps"] or 0
        for x in summary["links"]
        if x["direction"] == "up" and x["tier"] == "host"
        for c in x["classes"].values()
    )


def _run(data: dict[str, Any], what: str) -> dict[str, Any]:
    return _run_scenario(load_scenario_data(data, what))


def _run_scenario(s: Scenario) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tb-budget-") as d:
        return run(s, out=Path(d) / "run").summary


def probe_data(kind: str, mode: str) -> dict[str, Any]:
    """The scenario of `kind`'s CPU-cost probe: the kind alone (its `probe` entry) on
    KIND_HOSTS hosts at KIND_LINK, 6 s with a 1 s warm-up."""
    return {
        "name": f"cpu-cost-{kind}",
        "duration": "6s",
        "measure": {"warmup": "1s", "cooldown": "0s", "drain": "0.5s"},
        "metrics": {"prometheus": "off"},
        "topology": {"hosts": KIND_HOSTS, "link_rate": KIND_LINK, "link_mode": mode},
        "tc_profile": "fifo",
        "workloads": {kind: kinds.get(kind).probe()},  # type: ignore[misc]
    }


def kind_cost(kind: str, mode: str) -> float:
    """CPU seconds a wire byte of `kind` costs this machine in `mode` (module docstring).
    A probe whose hosts carried under CARRIED_AT_LEAST of the load its kind's `work` asks
    measured its setup, not its work, and is refused rather than kept until the next boot."""
    s = load_scenario_data(probe_data(kind, mode), f"the {kind} CPU-cost probe")
    summary = _run_scenario(s)
    wire = _uplinks_bps(summary)
    if summary["status"] != "ok" or wire <= 0:
        raise RuntimeError(
            f"the {kind} CPU-cost probe carried nothing ({summary['status']}: "
            f"{summary.get('error')})"
        )
    asked = asked_bps(s)
    if wire < CARRIED_AT_LEAST * asked:
        raise RuntimeError(
            f"the {kind} CPU-cost probe carried {wire / 1e6:.3g} Mbit/s of the "
            f"{asked / 1e6:.3g} its workload asks: its probe() measures its setup, not its work"
        )
    cpu = summary["host_cpu"]
    return float(cpu["busy"] * cpu["cores"] * 8 / wire)


def asked_bps(s: Scenario) -> float:
    """Payload bits/s the scenario's workloads ask for together (their kinds' `work`)."""
    return sum(
        kinds.get(w.kind).work(w, s) or 0.0  # type: ignore[misc]
        for w in s.workloads.values()
        if kinds.get(w.kind).work is not None
    )


def _carried(hosts: int, mode: str) -> float:
    """Wire bits/s the hosts' uplinks carried together over the measured window."""
    data = {
        "name": "link-budget",
        "duration": "2s",
        "measure": {"warmup": "0.5s", "cooldown": "0s"},
        "metrics": {"prometheus": "off"},
        "topology": {"hosts": hosts, "link_rate": PROBE_RATE, "link_mode": mode},
        "tc_profile": "fifo",
        "workloads": {"linkcheck": {"pattern": "single" if hosts == 2 else "ring",
                                    "short": False}},
    }  # fmt: skip
    return _uplinks_bps(_run(data, "the link-budget probe"))


def measure(mode: str) -> Budget:
    one = _carried(2, mode)
    many = _carried(FLOWS, mode)
    return Budget(mode, one, many, FLOWS, PROBE_RATE, os.cpu_count() or 1)


def machine_budget(mode: str, progress: Callable[[str], None] | None = None) -> Budget:
    """This machine's budget in `mode`: kept since this boot, or measured now (and kept)."""
    b = budget.cached(mode)
    if b is None:
        if progress is not None:
            progress(f"measuring this machine's link budget ({mode} links, once per boot)")
        b = measure(mode)
        budget.keep(b)
        log.info(
            "link budget (%s): one flow %.2f Gbit/s, %d flows %.2f Gbit/s",
            mode, b.one_flow_bps / 1e9, b.flows, b.all_flows_bps / 1e9,
        )  # fmt: skip
    return b


def with_kind_costs(
    b: Budget, wanted: list[str], progress: Callable[[str], None] | None = None
) -> Budget:
    """`b` with the CPU cost of every kind in `wanted`: kept since this boot, or measured now
    (and kept)."""
    missing = [k for k in wanted if k not in b.kind_costs]
    if not missing:
        return b
    costs = dict(b.kind_costs)
    for kind in missing:
        if progress is not None:
            progress(f"measuring what {kind} costs this machine's CPU (once per boot)")
        costs[kind] = kind_cost(kind, b.mode)
        log.info("CPU cost (%s, %s): %.1f ns a wire byte", kind, b.mode, costs[kind] * 1e9)
    b = replace(b, kind_costs=costs)
    budget.keep(b)
    return b


def for_run(
    s: Scenario, progress: Callable[[str], None] | None = None, held: bool = False
) -> tuple[Scenario, Budget | None]:
    """What `up` and `sweep` do before a run: the budget of the scenario's link mode, and
    the scenario with `time_scale: auto` resolved. A scenario that asks less than
    budget.SURE_BPS of the machine in all is held to a budget kept since this boot, and
    measures none (no budget: None) unless it asks for one (`time_scale: auto`, or an
    `expect:` on link_budget)."""
    mode = s.topology.link_mode
    if budget.needs_measuring(s, held):
        b: Budget | None = machine_budget(mode, progress)  # kept, or measured now
    else:
        b = budget.cached(mode)
    if b is None:
        return s, None
    b = with_kind_costs(b, budget.probed_kinds(s), progress)
    return budget.with_fitting_scale(s, b, held), b
