"""The `machines:` section: one run's network spread over several machines (issue 76).

A scenario names the machines it may use (Swarm nodes, by hostname) and, optionally, pins a
switch or a host to one of them; partition.py places the rest (a switch with its hosts, a
graph partition weighted by the links' rates) and lists the links the placement cuts, each of
which becomes a VXLAN tunnel between two machines. `testbed validate` prints the placement
and its cut. With `emulate`, every machine is a namespace here and the run is real (tunnels,
admission's probe of the machines' network); across real machines `up` and `sweep` refuse
the section in one line until the agents that build each machine's part exist
(docs/swarm.md says what is left).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, field_validator, model_validator

from testbed.core.fields import STRICT, FieldProblem, Rate

VXLAN_OVERHEAD = 50  # bytes: outer IPv4 20 + UDP 8 + VXLAN 8 + the inner Ethernet header 14
DOCKER_VXLAN_PORT = 4789  # Docker overlay networks' (and the IANA) VXLAN port


def _machine(value: Any) -> Any:
    """A machine given by its name alone: `[a, b]` for `[{name: a}, {name: b}]`."""
    return {"name": value} if isinstance(value, str) else value


class Machine(BaseModel):
    model_config = STRICT

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        max_length=253,
        description="a Swarm node's hostname (`docker node ls`)",
    )
    gpus: int = Field(
        0,
        ge=0,
        le=64,
        description="the GPUs it has: the hosts of a training job with gpus are placed only on "
        "machines that have some",
    )


class Machines(BaseModel):
    """Where the run's nodes go: `nodes` the machines, `place` the pins; the rest is placed
    by a partition of the switch graph (scenario/partition.py)."""

    model_config = STRICT

    nodes: list[Annotated[Machine, BeforeValidator(_machine)]] = Field(
        min_length=1,
        max_length=64,
        description="the machines the run may use, by Swarm node name, e.g. [gpu1, gpu2] or "
        "[{name: gpu1, gpus: 8}, ...]",
    )
    place: dict[str, str] = Field(
        default_factory=dict,
        description="pins: a switch or host name → a machine's name (a switch takes its "
        "unpinned hosts with it), e.g. {leaf1: gpu1, h9: gpu2}",
    )
    vxlan_port: int = Field(
        14789,
        ge=1024,
        le=65535,
        description="the UDP port of the tunnels of cut links (containerlab's default; not "
        "4789, Docker's overlay networks')",
    )
    underlay_mtu: int = Field(
        1500,
        ge=1280,
        le=9216,
        description="the MTU of the machines' own network: the emulated links' (topology.mtu) "
        f"must fit under it less VXLAN's {VXLAN_OVERHEAD} bytes",
    )
    emulate: bool = Field(
        False,
        description="build every machine's part on this one, each machine a network namespace "
        "joined to the others by an underlay (unshaped unless underlay_rate): the cut links' "
        "tunnels and the placement run for real, without other machines (tests, benchmarks; "
        "runtime netns)",
    )

    underlay_rate: Rate | None = Field(
        None,
        ge=1_000_000,
        description="with emulate: each emulated machine's link to the others shaped to this "
        "rate each way, on this machine's clock (not dilated: it stands for the machines' own "
        "network); admission then probes what it carries (default: unshaped)",
    )

    @field_validator("vxlan_port")
    @classmethod
    def _not_dockers(cls, v: int) -> int:
        if v == DOCKER_VXLAN_PORT:
            raise ValueError(
                f"{v} is Docker's overlay VXLAN port: the Swarm's own tunnels would take the "
                "frames; keep the default 14789 or another free port"
            )
        return v

    @model_validator(mode="after")
    def _names(self) -> Machines:
        if self.underlay_rate is not None and not self.emulate:
            raise FieldProblem(
                ("underlay_rate",),
                "shapes the emulated machines' network: it needs emulate: true (real machines' "
                "network is probed as it is); remove underlay_rate",
            )
        seen: set[str] = set()
        for i, m in enumerate(self.nodes):
            if m.name in seen:
                raise FieldProblem(("nodes", i, "name"), f"{m.name!r} is given twice")
            seen.add(m.name)
        for node, machine in self.place.items():
            if machine not in seen:
                raise FieldProblem(
                    ("place", node),
                    f"{machine!r} is not one of machines.nodes ({', '.join(sorted(seen))})",
                )
        return self

    def names(self) -> list[str]:
        return [m.name for m in self.nodes]

    def gpus_of(self, name: str) -> int:
        return next(m.gpus for m in self.nodes if m.name == name)
