"""Measure the machine's link budget (budget.py) with testbed's own runs: linkcheck bulk
flows through links shaped at a rate no machine here reaches, so that the machine, not the
shaper, is what holds them. One flow h1 → h2, then eight at once (8 hosts in a ring), 2 s of
measured window each, in the link mode asked for; about 10 s per mode, once per boot."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

from testbed import budget
from testbed.budget import Budget
from testbed.orchestrator import run
from testbed.resolve import load_scenario_data
from testbed.scenario import Scenario

log = logging.getLogger(__name__)

PROBE_RATE = 100_000_000_000  # 100 Gbit/s per direction: above what any machine here carries
FLOWS = 8


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
    s = load_scenario_data(data, "the link-budget probe")
    with tempfile.TemporaryDirectory(prefix="tb-budget-") as d:
        summary = run(s, out=Path(d) / "run").summary
    return sum(
        c["rate_bps"] or 0
        for x in summary["links"]
        if x["direction"] == "up" and x["tier"] == "host"
        for c in x["classes"].values()
    )


def measure(mode: str) -> Budget:
    one = _carried(2, mode)
    many = _carried(FLOWS, mode)
    return Budget(mode, one, many, FLOWS, PROBE_RATE)


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
    return budget.with_fitting_scale(s, b, held), b
