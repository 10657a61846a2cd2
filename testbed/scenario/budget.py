"""The machine's link budget: what its emulated links can carry, and whether a scenario asks
for more (issue 33).

A shaped link is only as fast as the CPU that moves its packets. Asked for more, it does not
fail: it carries less than its rate, the queues that should fill at a port stay empty, and
the results look plausible. Measured on a 2-core VM, incast in real time at rates the machine
could not carry in aggregate showed no collapse at all, where the same scenario dilated showed
the collapse of the literature. So every `testbed up` compares the scenario's peak demand
with what the machine was measured to carry (budget_probe.py, once per boot and link mode):

- one flow: a single host link at line rate, against what one TCP flow carried through two
  shaped links of this machine;
- all hosts: every host a workload uses sending at line rate at once (an all-reduce ring, an
  incast's senders, web search's bursts at their worst), against what eight flows carried at
  once (8 hosts in a ring).

Both in wire bits per second of this machine's clock: the scenario's rates over time_scale.

And the CPU (issue 74): those bulk flows batch their packets, every core busy, at about 3.5 ns
of CPU a wire byte on the 2-core development VM; a dilated run's workloads send at a tenth of
a link's rate, packet by packet, each waking its process: a thesis cell at ×100 cost 32–35
ns a byte (R = 2 and R = 4, both schemes, 2026-12-07). At ×50 the link budget said 27 would
fit, yet the R = 4 run asked 1.2 of the machine's cores, ran 83 % busy, its iterations 47 %
longer and 1 % of its flows over 70 ms late. So each workload kind with a `probe` is measured
too (budget_probe.kind_cost: the kind alone on 8 hosts at 100 Mbit/s, CPU seconds per wire
byte), and the scenario's demand on the CPU is each instance's mean payload rate (its kind's
`work`, over TCP's framing) times its kind's cost: CPU seconds per scenario second. At K it
keeps the machine `cpu_busy` = (that / K + RUN_CORES) / cores; the load is that over
CPU_TARGET. A real-mode job's compute is the machine's own, not dilated: its cores
(`cpu_fixed_cores`, the kind's `fixed_cpu`) are added as they are at K, fewer at a larger K
only because the job's ring then takes longer on this machine's clock (which changes the job's
compute-to-network ratio: the warning says so).

Where either load exceeds 1 the run warns before it starts, naming the time_scale that fits
(K times the larger load, rounded up), and `link_budget` in the summary says so for
`expect:`; `time_scale: auto` runs at that K (1 when it fits in real time). The budget is a
measurement of loaded paths, so it is a guide, not a proof: the physics checks of each run
still judge what happened.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.core.paths import ack_efficiency
from testbed.core.state import STATE_DIR
from testbed.core.units import format_rate
from testbed.scenario.resolve import with_overrides
from testbed.workloads import kinds

if TYPE_CHECKING:
    from testbed.scenario.schema import Scenario

BUDGET_CACHE = STATE_DIR / ".link-budget"  # no .json: all_states() reads those
# Below this much wire rate in all (this machine's clock), a scenario is not worth the probe's
# seconds: the 2-core development VM's exact-mode budget was 1.83 Gbit/s in one flow and 3.61
# in eight (2026-11-27), the H100 machine's 2.33 and 10.7
SURE_BPS = 1e9
# ... and below this much, its workloads' processes: at the 32–43 ns a wire byte that web
# search and training cost the 2-core VM, 100 Mbit/s at line rate on every host is 0.2 cores
SURE_CPU_BPS = 1e8
PROBE_VERSION = 3  # a testbed that measures differently measures again (3: the kinds' CPU)
# The busiest a run's predicted CPU may keep the machine. Thesis cells at ×100 held every
# physics and flow-start check at 0.60–0.80 predicted (R = 4 and R = 2 "low" 0.60–0.65,
# R = 2 "same" 0.77–0.80); at ×50 R = 4 asked 1.2 and broke. The probes predicted the cells
# 4–15 % under what they cost, so 0.7 keeps the cells that held at ×100 and names ×83 for R = 4.
CPU_TARGET = 0.7
# What a run costs whatever its K: the orchestrator's half-second counter polls and
# Prometheus' scrapes, 0.03–0.05 cores each during the thesis cells (2026-12-07, per process)
RUN_CORES = 0.08


@dataclass(frozen=True)
class Budget:
    """What this machine's shaped path carried, wire bits/s of its own clock, in one mode."""

    mode: str  # topology.link_mode
    one_flow_bps: float
    all_flows_bps: float  # eight flows at once
    flows: int = 8
    probe_rate_bps: int = 0  # the links' rate in the probe: a budget that reached it is a floor
    cores: int = 0  # the machine's CPUs
    kind_costs: dict[str, float] = field(default_factory=dict)  # CPU s per wire byte, per kind


@dataclass(frozen=True)
class Demand:
    one_flow_bps: float  # one host link at line rate, this machine's clock
    all_flows_bps: float  # every host a workload uses, at line rate at once
    hosts: int


def demand(s: Scenario, held: bool = False) -> Demand:
    """The scenario's peak demand on the machine, in wall-clock bits/s (scenario rates / K).
    A held run (`up --hold`) may use every host: the user's own tools run there."""
    every = [f"h{i + 1}" for i in range(s.topology.hosts)]
    used: set[str] = set(every) if held else set()
    for w in s.workloads.values():
        used |= kinds.get(w.kind).serving(w, every)
    n = len(used)
    rate = s.topology.link_rate / float(s.time_scale)
    return Demand(rate, n * rate, n)


def cpu_demand(s: Scenario, b: Budget) -> dict[str, float]:
    """CPU seconds per second of scenario time each workload instance costs this machine:
    its mean wire bytes per second (its kind's `work` over TCP's framing) times its kind's
    cost a byte. A kind without a probe (linkcheck: bulk flows, the link probe's own) is the
    link side's alone, and one not measured yet is left out."""
    framing = ack_efficiency(s.topology.mtu, s.topology.tcp_segment)
    out = {}
    for name, w in s.workloads.items():
        kind = kinds.get(w.kind)
        cost = b.kind_costs.get(priced_as(w))
        if kind.work is not None and cost is not None:
            out[name] = kind.work(w, s) / framing / 8 * cost
    return out


def fixed_cores(s: Scenario, k: float) -> dict[str, float]:
    """Cores each workload instance's undilated work (a real model's compute) keeps busy at
    time_scale `k`; instances with none are left out."""
    out = {}
    for name, w in s.workloads.items():
        fixed = kinds.get(w.kind).fixed_cpu
        if fixed is not None and (cores := fixed(w, s, k)) > 0:
            out[name] = cores
    return out


def priced_as(w: Any) -> str:
    """The kind whose CPU-cost probe prices workload instance `w`: its kind's `priced_as`
    (a horovod job on backend torch-ddp: torch-ddp, whose processes they are), else its own."""
    kind = kinds.get(w.kind)
    return kind.priced_as(w) if kind.priced_as is not None else w.kind


def probed_kinds(s: Scenario) -> list[str]:
    """The kinds whose CPU-cost probes price the scenario's workloads."""
    return sorted(
        {priced_as(w) for w in s.workloads.values() if kinds.get(priced_as(w)).probe is not None}
    )


def needs_measuring(s: Scenario, held: bool = False) -> bool:
    """Whether a run of `s` must know the budget: it asks more than SURE_BPS of the machine,
    or its probed kinds more than SURE_CPU_BPS, or it asks for the budget itself (time_scale:
    auto, an expect: on link_budget)."""
    if s.time_scale == "auto" or any(c.strip().startswith("link_budget") for c in s.expect):
        return True
    asked = demand(s, held).all_flows_bps
    return asked > SURE_BPS or (asked > SURE_CPU_BPS and bool(probed_kinds(s)))


def assess(s: Scenario, budget: Budget, held: bool = False) -> dict[str, Any]:
    """The summary's `link_budget` (scenario units: the budget times K, what the machine can
    carry of this scenario at its time_scale): `link_load` the larger demand/budget ratio,
    `cpu_busy` the share of the machine's CPUs the workloads are predicted to keep busy at
    this K (`cpu_s_per_s`, CPU seconds per scenario second, over K, and the run's own
    RUN_CORES, over the cores), `cpu_load` that
    over CPU_TARGET, `load` the larger of the two and `fitting_time_scale` the K at which both
    fit (None: none up to MOST_K does)."""
    d = demand(s, held)
    k = float(s.time_scale)
    link_load = max(d.one_flow_bps / budget.one_flow_bps, d.all_flows_bps / budget.all_flows_bps)
    per = cpu_demand(s, budget)
    fixed = fixed_cores(s, k)
    cores = budget.cores or os.cpu_count() or 1
    busy = (sum(per.values()) / k + sum(fixed.values()) + RUN_CORES) / cores
    load = max(link_load, busy / CPU_TARGET)
    cpu_k = cpu_time_scale(
        sum(per.values()), cores, lambda kk: sum(fixed_cores(s, kk).values()) if fixed else 0.0
    )
    return {
        "mode": budget.mode,
        "one_flow_bps": round(budget.one_flow_bps * k),
        "all_flows_bps": round(budget.all_flows_bps * k),
        "demand_one_flow_bps": round(d.one_flow_bps * k),
        "demand_all_flows_bps": round(d.all_flows_bps * k),
        "hosts": d.hosts,
        "link_load": round(link_load, 3),
        "cores": cores,
        "cpu_s_per_s": round(sum(per.values()), 2),
        "cpu_by_workload": {n: round(v, 2) for n, v in per.items()},
        "cpu_fixed_cores": round(sum(fixed.values()), 2),
        "cpu_busy": round(busy, 3),
        "cpu_load": round(busy / CPU_TARGET, 3),
        "load": round(load, 3),
        "fitting_time_scale": (
            None if cpu_k is None else max(fitting_time_scale(k, link_load), cpu_k)
        ),
    }


def fitting_time_scale(k: float, load: float) -> float:
    """The smallest whole K' at which the load fits: K × load rounded up, at least 1 (real
    time). Below K when the scenario fits with room: a thesis cell at K = 100 with a load of
    0.22 would fit at 23, in a quarter of the time."""
    return float(max(1, math.ceil(k * load - 1e-9)))


MOST_K = 100_000  # the largest time_scale the CPU search tries (a 12 s run: two weeks)


def cpu_time_scale(
    cpu_s_per_s: float, cores: int, fixed: Callable[[float], float] = lambda k: 0.0
) -> float | None:
    """The smallest whole K at which the workloads' CPU seconds per scenario second over K,
    the run's own RUN_CORES and the `fixed(K)` cores of undilated work keep the machine at
    most CPU_TARGET busy; None when none up to MOST_K does. Without fixed work it is one
    division; with it, a search up from there (both terms fall as K grows)."""
    room = CPU_TARGET * cores - RUN_CORES
    if room <= 0:
        return None
    k = max(1, math.ceil(cpu_s_per_s / room - 1e-9))
    while k <= MOST_K:
        if cpu_s_per_s / k + fixed(k) <= room + 1e-9:
            return float(k)
        k = k + 1 if k < 1000 else math.ceil(k * 1.01)
    return None


def with_fitting_scale(s: Scenario, b: Budget, held: bool = False) -> Scenario:
    """`time_scale: auto` resolved: the smallest K at which the scenario fits the budget."""
    if s.time_scale != "auto":
        return s
    k = assess(with_overrides(s, {"time_scale": 1}), b, held)["fitting_time_scale"]
    if k is None:  # nothing fits (the warning says so): the largest K tried
        k = float(MOST_K)
    return with_overrides(s, {"time_scale": k}, source=f"{s.name} (time_scale: auto → {k:g})")


def warning(s: Scenario, section: dict[str, Any]) -> str | None:
    """One line when the scenario asks more of the machine than it carries: its links, or
    its workloads' processes."""
    if section["load"] <= 1:
        return None
    if section["cpu_load"] > section["link_load"] or section["fitting_time_scale"] is None:
        return _cpu_warning(s, section)
    k = float(s.time_scale)
    one = section["demand_one_flow_bps"] / section["one_flow_bps"]
    every = section["demand_all_flows_bps"] / section["all_flows_bps"]
    what = (
        f"one host link at line rate ({format_rate(section['demand_one_flow_bps'] / k)} on this "
        f"machine's clock) where one flow carried {format_rate(section['one_flow_bps'] / k)}"
        if one >= every
        else f"{section['hosts']} hosts at line rate at once "
        f"({format_rate(section['demand_all_flows_bps'] / k)} on this machine's clock) where "
        f"eight flows carried {format_rate(section['all_flows_bps'] / k)} together"
    )
    fast = {
        "exact": " or topology.link_mode: exact-gso (frames, faster) or fast",
        "exact-gso": " or topology.link_mode: fast",
    }.get(section["mode"], "")
    return (
        f"link budget: this scenario may ask for {what} in link_mode {section['mode']} "
        f"(load {section['load']:.2f}): its links would carry less than their rate and its "
        f"queues would not fill as a switch's do; time_scale: {section['fitting_time_scale']:g} "
        f"fits (time_scale: auto picks it){fast} (docs/time-dilation.md#the-link-budget)"
    )


def _cpu_warning(s: Scenario, section: dict[str, Any]) -> str:
    costs = ", ".join(f"{n} {v:g}" for n, v in section["cpu_by_workload"].items())
    fixed = fixed_cores(s, float(s.time_scale))
    if fixed:
        costs += "; real compute, cores on this machine's clock, not dilated: " + ", ".join(
            f"{n} {v:.2f}" for n, v in fixed.items()
        )
    k = section["fitting_time_scale"]
    fits = (
        f"time_scale: {k:g} fits (time_scale: auto picks it)"
        if k is not None
        else f"no time_scale up to {MOST_K} fits"
    )
    if fixed and k is not None:
        fits += (
            ", but a real model's compute does not dilate: at a larger time_scale its share of "
            "an iteration shrinks (fewer workers or threads, a smaller real_model, or GPU "
            "hosts keep it)"
        )
    return (
        f"link budget: this scenario's workloads would keep this machine's {section['cores']} "
        f"CPUs {section['cpu_busy']:.0%} busy at time_scale {float(s.time_scale):g} (CPU "
        f"seconds per scenario second: {costs}; over {CPU_TARGET:.0%} flows start late and "
        f"iterations stretch); {fits} (docs/time-dilation.md#the-link-budget)"
    )


def _identity() -> str:
    """What the budget can change with: the boot (and with it the kernel) and the CPUs."""
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return f"{boot} cpus={os.cpu_count()} v{PROBE_VERSION}"


def cached(mode: str) -> Budget | None:
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        doc = json.loads(BUDGET_CACHE.read_text())
        if doc["identity"] == _identity():
            return Budget(**doc["modes"][mode])
    return None


def keep(budget: Budget) -> None:
    """Kept beside the kernel probe's answer until the next boot."""
    with contextlib.suppress(OSError):
        doc: dict[str, Any] = {"identity": _identity(), "modes": {}}
        with contextlib.suppress(OSError, ValueError):
            old = json.loads(BUDGET_CACHE.read_text())
            if old.get("identity") == doc["identity"]:
                doc["modes"] = old.get("modes", {})
        doc["modes"][budget.mode] = asdict(budget)
        BUDGET_CACHE.parent.mkdir(parents=True, exist_ok=True)
        tmp = BUDGET_CACHE.with_suffix(f".{os.getpid()}")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(BUDGET_CACHE)
