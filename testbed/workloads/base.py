"""What every workload instance of a scenario has, whatever its kind: a kind, when it runs inside
the run, and (for the kinds that choose) its hosts and the class its packets are marked for.
The kinds' own configurations extend these (linkcheck/spec.py, training/spec.py, ...)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from testbed.core.fields import STRICT, Duration, FieldProblem
from testbed.core.profile import Dscp


def refuse_moved(data: Any, keys: tuple[str, ...]) -> Any:
    """Fields that moved to `measure:` get a message that says where, not "unknown field"."""
    if isinstance(data, dict):
        for k in keys:
            if k in data:
                raise FieldProblem(
                    (k,),
                    f"moved: one measured window serves the whole run; set measure.{k} "
                    "at the top level of the scenario instead",
                )
    return data


class WorkloadConfig(BaseModel):
    """One named instance of a workload kind in `workloads:`."""

    model_config = STRICT

    kind: str = Field(description="the workload kind (`testbed kinds` lists them)")
    start: Duration = Field(
        0.0,
        ge=0,
        description="when the instance starts, after the run's common start (t0); its work "
        "before the measured window opens is left out as everyone's is",
    )
    stop: Duration | None = Field(
        None,
        gt=0,
        description="when it stops starting new work, after t0 (default: the end of the run)",
    )

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        data = refuse_moved(data, ("warmup", "cooldown"))
        if isinstance(data, dict) and "derived" in data:
            # A resolved scenario shows its derived values; they are recomputed from the
            # inputs on every load, so a changed link rate or host count re-derives them.
            data = {k: v for k, v in data.items() if k != "derived"}
        return data


class Placement(BaseModel):
    """Resolved when the scenario is loaded: the class and DSCP a workload's packets carry."""

    model_config = STRICT

    tc_class: str
    dscp: int


class Placed(WorkloadConfig):
    """An instance that runs on a chosen set of hosts and marks its packets."""

    hosts: list[str] | None = Field(None, description="hosts that take part (default: all)")
    tc_class: str | None = Field(
        None, description="traffic class to mark the packets for (its first DSCP); or give dscp"
    )
    dscp: Dscp | None = Field(
        None, description="DSCP to mark the packets with, instead of tc_class"
    )
