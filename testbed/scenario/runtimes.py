"""What a scenario may say about runtimes, below the scenario (as workloads/kinds.py is for
workload kinds): each runtime's name, what a host is under it, and the model of its options
section, a top-level key named after the runtime (`docker:`). registry.py maps the same names
to the runtimes themselves (a unit test checks that the two agree). Adding a runtime: its
module, one line in registry.py, one line here; the schema, the reference and the errors
follow from these lines."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from testbed.core.fields import STRICT, Size


class DockerOptions(BaseModel):
    """How hosts are made with `runtime: docker`. Limits apply to each host's container."""

    model_config = STRICT

    image: str | None = Field(
        None, description="node image (default: testbed's own, built by `testbed images build`)"
    )
    build: bool = Field(True, description="build the default node image when it is missing")
    cpus: float | None = Field(None, gt=0, le=1024, description="CPU limit per host (cores)")
    memory: Size | None = Field(
        None, ge=16 * 2**20, description="memory limit per host, e.g. 2GiB (no swap beyond it)"
    )


@dataclass(frozen=True)
class Declared:
    name: str
    host: str  # what a host is under this runtime, for the schema's description
    options: type[BaseModel] | None = None  # its section's model; None: no section
    about: str = ""  # what the section holds, for the schema's description
    emulates_machines: bool = False  # builds machines.emulate's machines (namespaces)


DECLARED = (
    Declared("netns", "a network namespace", emulates_machines=True),
    Declared("docker", "a Docker container", DockerOptions, "container options"),
)
DEFAULT = DECLARED[0].name


def names() -> tuple[str, ...]:
    return tuple(d.name for d in DECLARED)


def emulating_machines() -> tuple[str, ...]:
    """The runtimes that build emulated machines (machines.emulate)."""
    return tuple(d.name for d in DECLARED if d.emulates_machines)


def with_options() -> tuple[Declared, ...]:
    return tuple(d for d in DECLARED if d.options is not None)
