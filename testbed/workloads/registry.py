"""Workload kinds, registered by name (as containerlab registers node kinds).

A kind is what a scenario's `workloads.<name>.kind` names: its configuration (a pydantic
model, checked with the scenario), how its derived values are resolved, the shape of its
summary section (every number with its unit, for `expect:` and time dilation), and, by
reference, the controller that runs it, the module that reports it and its optional hooks.
References are "module:attribute" strings, loaded when a run, a report or a check needs them:
the schema knows every kind without importing a controller, and a kind's controller imports
what it needs from below (runtime, metrics) without anything below importing it.

Adding a kind is a package under testbed/workloads/ (its spec, controller, node program and
report) plus one line in kinds.py, which registers the built-in kinds and is what the rest of
testbed reads them through. Nothing else in testbed names a kind. Its report module provides
reporting.ReportHooks (a unit test checks every registered kind); an open-loop node program
(requests of N bytes at drawn times) can build on flows.py, as web search's and incast's do.

Units in `summary`: "s" seconds of scenario time, "wall" seconds of this machine's clock (not
dilated), "bps" bits/s, "hz" events per second, "B" bytes, "pct" percent, "1" a plain number;
a dict is a nested section, {"*": unit} any key, a one-element list a list of that shape.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Kind:
    name: str
    config: type[Any]  # a workloads.base.WorkloadConfig subclass: the instance's fields
    controller: str  # "module:callable": (name, cfg, ctx) → the run's controller of one instance
    summary: Mapping[str, Any]  # the summary section's shape and units (see above)
    summary_of: Callable[[Any], Mapping[str, Any]] | None = (
        None  # (cfg) → the shape of this instance's section, where its fields leave parts out
    )
    report: str | None = None  # "module": the kind's report hooks (reporting.ReportHooks)
    resolve: Callable[..., None] | None = None  # (cfg, scenario, base_dir, ordinal, place): derived
    dilate: Callable[[Any, float], dict[str, Any]] | None = None  # (cfg, K): wall-clock fields
    resolve_group: str | None = (
        None  # "module:callable" (scenario): what it derives across its instances once each
        # is resolved; may refuse (FieldProblem with the path from the scenario's root)
    )
    preflight: str | None = None  # "module:callable" (name, cfg, scenario) → warnings; may refuse
    predict: str | None = None  # "module:callable" (name, scenario) → the event model's figures
    predictable: Callable[[Any], bool] | None = None  # (cfg): whether `predict` knows it
    devices: str | None = None  # "module:callable" (cfg, hosts) → GPUs per host name
    servers: Callable[[Any, list[str]], set[str]] | None = (
        None  # (cfg, every host) → the hosts its servers listen on at cfg.port (see serving)
    )
    binaries: tuple[str, ...] = ()  # host tools its controller runs (checked before a run)
    metrics: str | None = None  # "module:callable" () → (registry, metrics) its nodes export
    files: tuple[str, ...] = ()  # its fields that name a file (a sweep point hashes the content)
    records: Callable[[str], str] | None = (
        None  # (name) → its merged records' file in the run folder
    )
    record_durations: tuple[str, ...] = ()  # their duration columns (a wall-clock twin each)
    work: Callable[[Any, Any], float] | None = (
        None  # (cfg, scenario) → the mean payload bits/s (scenario time) its hosts send in
        # all, what its processes cost this machine's CPU (budget.py); none: line rate
    )
    fixed_cpu: Callable[[Any, Any, float], float] | None = (
        None  # (cfg, scenario, K) → the cores its undilated work keeps busy at time_scale K
        # (a real model's compute is this machine's own: budget.py); none: nothing
    )
    priced_as: Callable[[Any], str] | None = (
        None  # (cfg) → the kind whose CPU-cost probe prices it (a horovod job on backend
        # torch-ddp costs what torch-ddp's does); none: its own
    )
    probe: Callable[[], dict[str, Any]] | None = (
        None  # () → its workloads entry in the CPU-cost probe (budget_probe.py); none: it
        # costs what the link probe's bulk flows cost
    )
    hosts_field: bool = True  # takes `hosts`, `tc_class`/`dscp` (the common placement)
    default_class: str = (
        "highest"  # its class when none is named: highest, or the profile's default
    )
    doc: str = ""
    models: tuple[type[Any], ...] = ()  # its fields' own models, in the reference under it
    aliases: tuple[str, ...] = field(default_factory=tuple)

    def serving(self, cfg: Any, every: list[str]) -> set[str]:
        """The hosts an instance's servers listen on at its `port`: its hosts (every host
        when it names none), unless the kind's `servers` says otherwise (a host it serves from
        besides them). Two instances may not share a port on one of them (resolve.py)."""
        if self.servers is not None:
            return self.servers(cfg, every)
        return set(getattr(cfg, "hosts", None) or every)


KINDS: dict[str, Kind] = {}  # filled by the kinds' spec modules; read through kinds.py


def register(kind: Kind) -> Kind:
    if kind.name in KINDS:
        raise ValueError(f"workload kind {kind.name!r} is registered twice")
    KINDS[kind.name] = kind
    return kind


def load(ref: str) -> Any:
    """A "module:attribute" reference of a kind, imported now."""
    module, _, attr = ref.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj
