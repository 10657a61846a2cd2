"""Loading a scenario: the schema's check (scenario.py), then resolving what needs more of
testbed, each problem one line that names the field:

- every workload instance: its hosts exist, its class or DSCP, its kind's own checks and
  derived values (the thesis' ratios; workloads/<kind>/spec.py), its default ports;
- `expect:` parsed against what this scenario's summary will hold (expect.py);
- `time_scale`: what the dilated scenario (dilation.py) asks of this machine.

The resolved scenario is complete on its own: `scenario.yaml` in a run folder shows the
derived values and reloads to the same scenario.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.core.errors import ScenarioError
from testbed.core.fields import FieldProblem
from testbed.core.fields import path as field_path
from testbed.core.units import format_duration, format_rate
from testbed.scenario import dilation, expect
from testbed.scenario.schema import Scenario, apply_overrides, read_yaml, validate
from testbed.workloads import kinds
from testbed.workloads.base import Placement
from testbed.workloads.registry import load

RATE_FLOOR = 8_000  # bit/s: the lowest rate Topology accepts, and what HTB is tested at


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    return load_scenario_data(read_yaml(p), source=str(p), base_dir=p.resolve().parent)


def load_scenario_data(data: Any, source: str, base_dir: Path | None = None) -> Scenario:
    """Validate, then resolve; ScenarioError (one line, the field's path) on bad input."""
    s = validate(data, source, base_dir)
    try:
        resolve(s, base_dir)
    except FieldProblem as e:
        raise ScenarioError(f"{source}: {field_path(e.loc)}: {e.msg}") from None
    return s


def resolve(s: Scenario, base_dir: Path | None = None) -> None:
    """Fill in what the scenario derives, in place; FieldProblem names the field."""
    hosts = [f"h{i}" for i in range(1, s.topology.hosts + 1)]
    ordinals: dict[str, int] = {}
    for name, w in s.workloads.items():
        kind = kinds.get(w.kind)
        ordinal = ordinals.get(w.kind, 0)
        ordinals[w.kind] = ordinal + 1
        at = ("workloads", name)
        if w.stop is not None and w.stop <= w.start:
            raise FieldProblem((*at, "stop"), f"must come after start ({format_duration(w.start)})")
        if w.start >= s.duration:
            raise FieldProblem(
                (*at, "start"),
                f"{format_duration(w.start)} is not before the end of the run "
                f"({format_duration(s.duration)}); start it earlier or run longer",
            )
        if w.stop is not None and w.stop > s.duration:
            raise FieldProblem(
                (*at, "stop"),
                f"{format_duration(w.stop)} is after the end of the run ({format_duration(s.duration)})",
            )
        place = _placement(s, name, w, kind.default_class, hosts) if kind.hosts_field else None
        if kind.resolve is not None:
            try:
                kind.resolve(w, s, base_dir, ordinal=ordinal, place=place)
            except FieldProblem as e:
                raise FieldProblem((*at, *e.loc), e.msg) from None
    for kind in {w.kind: kinds.get(w.kind) for w in s.workloads.values()}.values():
        if kind.resolve_group is not None:  # derived across a kind's instances
            load(kind.resolve_group)(s)
    _refuse_shared_ports(s, hosts)
    try:
        expect.parse(s.expect, s)
    except expect.ExpectError as e:
        raise FieldProblem(("expect", e.index), e.msg) from None
    _check_dilation(s)
    if s.machines is not None:  # every pin names a node, every GPU host has GPUs
        machine_plan(s)


def machine_plan(s: Scenario) -> Any:
    """Where the scenario's nodes go on its machines (partition.place); FieldProblem."""
    from testbed.scenario.partition import place
    from testbed.scenario.topology import build_plan

    return place(s, build_plan(s, "000000"))


def _refuse_shared_ports(s: Scenario, every: list[str]) -> None:
    """Two instances whose servers would listen on one port of one host: the second would fail
    to bind only after the network is built."""
    taken: dict[int, tuple[str, set[str]]] = {}
    for name, w in s.workloads.items():
        port = getattr(w, "port", None)
        if port is None:
            continue
        on = kinds.get(w.kind).serving(w, every)
        if port in taken and taken[port][1] & on:
            raise FieldProblem(
                ("workloads", name, "port"),
                f"{port} is also {taken[port][0]}'s port on {', '.join(sorted(taken[port][1] & on))}; "
                "give one of them another port",
            )
        taken.setdefault(port, (name, on))


def _placement(s: Scenario, name: str, w: Any, default: str, hosts: list[str]) -> Placement:
    """The hosts an instance names exist, and the class and DSCP its packets carry."""
    at = ("workloads", name)
    for i, h in enumerate(w.hosts or []):
        if h not in hosts:
            raise FieldProblem(
                (*at, "hosts", i), f"{h!r} is not a host; hosts are h1 … h{len(hosts)}"
            )
        if h in w.hosts[:i]:
            raise FieldProblem((*at, "hosts", i), f"{h!r} is given twice")
    if w.hosts is not None and len(set(w.hosts)) < 2:
        raise FieldProblem((*at, "hosts"), "needs at least two distinct hosts")
    classes = s.tc_profile.class_names
    if w.tc_class is not None and w.dscp is not None:
        raise FieldProblem((*at, "dscp"), "give tc_class or dscp, not both")
    if w.tc_class is not None and (problem := s.tc_profile.unknown_class(w.tc_class)):
        raise FieldProblem((*at, "tc_class"), problem)
    if w.dscp is not None:
        return Placement(tc_class=s.tc_profile.class_of(w.dscp), dscp=w.dscp)
    cls = w.tc_class or (s.tc_profile.default if default == "default" else classes[0])
    return Placement(tc_class=cls, dscp=s.tc_profile.cls(cls).mark)


def _check_dilation(s: Scenario) -> None:
    """What K makes of the scenario must be something this machine can run: a shaper rate
    no lower than the schema's floor, a run of at most a day of real time, and a valid
    scenario in wall-clock units (a dilated delay, drain or interval beyond its field's limit
    is refused here, naming time_scale, not at run time)."""
    k = s.time_scale
    if k == 1 or k == "auto":  # auto: resolved with the machine's link budget (budget.py)
        return
    t = s.topology
    rates = {"host links": t.link_rate}
    if t.kind == "leaf-spine":
        rates["fabric links"] = t.fabric_link_rate
    for what, rate in rates.items():
        if rate / k < RATE_FLOOR:
            raise FieldProblem(
                ("time_scale",),
                f"{k:g} makes the {what} {format_rate(rate / k)} on this machine, below "
                f"{format_rate(RATE_FLOOR)}; use time_scale ≤ {rate / RATE_FLOOR:g}",
            )
    if s.duration * k > 24 * 3600:
        raise FieldProblem(
            ("time_scale",),
            f"{k:g} makes the run last {format_duration(s.duration * k)} on this machine, more "
            "than a day; lower time_scale or duration",
        )
    try:
        wall_scenario(s)
    except ScenarioError as e:
        why = str(e).split(": ", 1)[-1]
        raise FieldProblem(
            ("time_scale",), f"{k:g} makes, on this machine's clock, {why}"
        ) from None


def with_overrides(
    s: Scenario,
    overrides: dict[str, Any],
    source: str = "command line",
    base_dir: Path | None = None,
) -> Scenario:
    """`s` with dotted-path values replaced, re-resolved from its inputs (e.g.
    {"topology.link_rate": "1gbit"} re-derives compute times and arrival rates). Relative file
    names among the new values are taken from `base_dir`."""
    data = s.model_dump(mode="json")
    for field in ("prefix", "management_prefix"):  # defaults stay defaults: see preflight
        if field not in s.topology.model_fields_set:
            data["topology"].pop(field, None)
    return load_scenario_data(apply_overrides(data, overrides), source=source, base_dir=base_dir)


def wall_scenario(s: Scenario) -> Scenario:
    """The scenario the machine runs (dilation.py), itself when time_scale is 1; names,
    seeds and prefixes kept."""
    over = dilation.wall_overrides(s)
    return with_overrides(s, over, source=f"{s.name} (time_scale {s.time_scale:g})") if over else s
