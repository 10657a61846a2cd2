"""A run's summary (summary.json), declared once: every top-level key with its type, and the
unit of every number in it, as `Annotated` metadata. What reads units reads them here: time
dilation (which numbers are durations or rates, dilation.py) and `expect:` (what a check's
constant is, expect.py) through `units()`; the scenario's reserved instance names (a workload
instance may not be called like a summary key) through `KEYS`. A workload instance's own
section is its kind's (workloads/registry.py: `summary`), under the instance's name.

Units: s (seconds of scenario time), wall (seconds of this machine's clock), B (bytes), bps
(bits/s), hz (per second), pct (0-100), 1 (a count or a plain ratio). A value without a unit
(a name, a text, an epoch timestamp) is never dilated nor compared."""

from __future__ import annotations

import typing
from typing import Annotated, Any, TypedDict

from testbed.core import tcpstats

CLASS = "<class>"  # in a unit shape: any of the scenario's tc profile classes
AnyName = Annotated[str, "*"]  # a mapping's key that is any name (a workload instance's)

Seconds = Annotated[float, "s"]
WallSeconds = Annotated[float, "wall"]
Bytes = Annotated[int, "B"]
Bps = Annotated[float, "bps"]
Count = Annotated[int, "1"]
Hz = Annotated[float, "hz"]
Ratio = Annotated[float, "1"]


class ClassCounters(TypedDict):
    bytes: Bytes
    packets: Count
    drops: Count
    rate_bps: Bps
    packet_rate_hz: Hz


# one direction of one link, its counters per class of the tc profile (keyed by class name)
LinkRecord = TypedDict(
    "LinkRecord",
    {
        "node": str, "direction": str, "tier": str, "from": str, "to": str, "ifname": str,
        "netns": str, "rate_bps": Bps, "classes": dict[str, ClassCounters],
        # tc profile shared_limit: the arrivals it dropped, of any class (None without one)
        "shared_limit_drops": Count | None,
    },
)  # fmt: skip


class Window(TypedDict):
    t0: float  # epochs of this machine's clock
    start: float
    stop: float
    warmup_s: Seconds
    cooldown_s: Seconds
    span_s: Seconds
    drain_limit_s: Seconds
    edges_late_s: list[WallSeconds]  # how late the window's two edges were read


class HostCpu(TypedDict):
    cores: Count
    busy: Ratio
    steal: Ratio
    backlog_drops: Count  # the CPUs' receive backlogs, machine-wide (hostcpu.py)


class SetupSeconds(TypedDict):
    build: WallSeconds
    shape: WallSeconds
    workloads_ready: WallSeconds


class LinkBudget(TypedDict):  # budget.py; null where no budget was given
    one_flow_bps: Bps
    all_flows_bps: Bps
    demand_one_flow_bps: Bps
    demand_all_flows_bps: Bps
    hosts: Count
    link_load: Ratio
    cores: Count
    cpu_s_per_s: Ratio  # CPU seconds per scenario second, every workload together
    cpu_by_workload: dict[AnyName, Ratio]
    cpu_fixed_cores: Ratio  # real-mode jobs' compute: cores on this machine's clock, not dilated
    cpu_busy: Ratio
    cpu_load: Ratio
    load: Ratio
    fitting_time_scale: Count | None  # None: no time_scale fits (cpu_fixed_cores)


class Queues(TypedDict):  # run/metrics.py: the ports' queues together, sampled
    limit_packets: Count
    samples: Count
    samples_over_limit: Count
    max_packets: Count
    link: str | None


class Held(TypedDict):  # --hold; no unit: only a held run has it, so `expect:` names it not
    held_s: float  # on this machine's clock
    ended_by: str


TcpCounters = TypedDict(  # type: ignore[misc]  # tcpstats.py names them
    "TcpCounters", dict.fromkeys(tcpstats.WANTED.values(), Count)
)


class Summary(TypedDict, total=False):
    scenario: str
    run_id: str
    runtime: str
    duration_s: Seconds
    seed: int
    tc_profile: str
    topology: str
    tcp_congestion: str
    tcp_rto_min_s: Seconds | None
    tcp_rto_initial_s: Seconds | None  # None: the kernel's 1 s of real time
    tcp_rcvbuf_bytes: Bytes | None  # None: the machine's autotuning
    tcp_sndbuf_bytes: Bytes | None
    tcp_segment_bytes: Bytes | None  # None: the MTU's
    tcp_recovery: str  # linux | classic (topology.tcp_recovery)
    tcp_idle_restart: bool
    link_mode: str
    started_at: float
    window: Window
    host_cpu: HostCpu
    setup_s: SetupSeconds
    drain_s: WallSeconds
    links: list[LinkRecord]
    tcp: TcpCounters
    queues: Queues
    workloads: dict[str, str]  # instance → kind; each instance's section under its name
    metrics: dict[str, Any]  # Prometheus: where, how often, and its cross-check
    hold: Held
    status: str
    error: str | None
    warnings: list[str]
    teardown_s: WallSeconds
    link_budget: LinkBudget | None
    time_scale: Ratio
    wall: dict[str, Any]  # a dilated run's own durations on this machine's clock


KEYS = frozenset(Summary.__annotations__)


def _shape(tp: Any) -> Any:
    """The unit shape of a type: a unit, a dict of shapes, [shape] for a list, {CLASS: shape}
    for a mapping keyed by class name ({"*": shape} keyed by AnyName); None where nothing in
    it has a unit."""
    if typing.get_origin(tp) is Annotated:
        return next((m for m in tp.__metadata__ if isinstance(m, str)), None)
    if typing.is_typeddict(tp):
        hints = typing.get_type_hints(tp, include_extras=True)
        out = {k: s for k, v in hints.items() if (s := _shape(v)) is not None}
        return out or None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list and args:
        inner = _shape(args[0])
        return [inner] if inner is not None else None
    if origin is dict and len(args) == 2:
        inner = _shape(args[1])
        key = "*" if _shape(args[0]) == "*" else CLASS
        return {key: inner} if inner is not None else None
    if args:  # X | None
        found = [s for a in args if a is not type(None) and (s := _shape(a)) is not None]
        return found[0] if found else None
    return None


def units() -> dict[str, Any]:
    """Top-level key → its unit shape, for every key that holds a number with a unit."""
    return _shape(Summary) or {}
