"""A training job's `policy:`: how the class its traffic is marked for changes while it runs
(issue 32). A policy is declared here (its fields, refused in one line when wrong) with its
runner (a "module:attribute" loaded when the job runs, as a kind's controller is), so the
schema knows every policy without importing what runs them. Adding one: a model and a runner
module, and one line in POLICIES.

- static (the default): the job's one class, fixed at load, as every run before policies.
- adaptive: a slowdown budget spent against each iteration's deadline (the thesis' ch. 6
  "adaptive priority", at the granularity every backend carries: the whole job). Each
  iteration starts in the job's own class; once it has run for its compute time plus `budget`
  of the iteration time the model predicts for the job alone (`testbed predict`), what is
  left of it (the exposed tail of a late iteration) goes to class `to`, and the next
  iteration starts back in the job's class. Budget 0 gives every iteration's tail priority;
  a large one never escalates ("all low").
- layers: classes per transfer (P3's idea, the thesis' ch. 6 "priorities per layer or per
  fused buffer"): the fused buffers that hold the first `first` layers (or the first layers
  holding `share` of the model's bytes), which the next forward needs first, are reduced in
  class `to`, the rest in the job's own. A class needs connections of its own, so this runs on
  torch-ddp's scheduled loop (one Gloo process group per class, each on an address of its
  own); Horovod sends every buffer over one set of connections and cannot carry it.
- tail: a class per transfer too, for the buffers whose reduction is exposed: those that the
  model of the job alone (`testbed predict`, from the job's own profile and schedule) has
  still reducing when backward ends, the bytes that set the iteration time.
- interleave: jobs that take turns (CASSINI, NSDI'24): the jobs with this policy share one
  period and each starts its iterations at an offset in it, computed from the jobs' own
  models so that their network phases do not overlap (training/policies/interleave.py). A given
  offset is kept as given; today's `start` only shifts a job's first iteration, which drifts.
  Any backend: it acts on when iterations start, not on their traffic. With `classes`, the
  group is also ranked as by-ratio ranks (slots keep the phases apart, classes decide the
  collisions a late phase still makes).
- by-ratio: job-level priority, Crux-style (SIGCOMM'24): the jobs with this policy are ranked
  by compute-to-network ratio, and the most compute-intensive job, which idles the most
  compute per byte it waits for, gets the first of `classes`, the next the second, and so on
  (the rest share the last). Resolved at load: the job's class is the policy's, fixed for the
  run (training/policies/ranking.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, Field

from testbed.core.fields import STRICT, Duration, Percent


class StaticPolicy(BaseModel):
    """The job's one class (tc_class or dscp), fixed for the whole run."""

    model_config = STRICT

    kind: Literal["static"] = "static"


class AdaptivePolicy(BaseModel):
    """Each iteration in the job's class until it has run for its compute time plus `budget`
    of the predicted iteration time; then its traffic goes to `to` until the iteration ends."""

    model_config = STRICT

    kind: Literal["adaptive"] = "adaptive"
    budget: Percent = Field(
        2.0,
        ge=0,
        le=1000,
        description="the slowdown an iteration may take in the job's own class before its "
        "remaining traffic goes to `to`: a share of the iteration time predicted for the job "
        "alone (0%: every iteration's exposed tail escalates)",
    )
    to: str = Field(
        "high",
        description="the class a late iteration's traffic goes to: one of the tc profile's, "
        "of higher priority than the job's own",
    )


class LayersPolicy(BaseModel):
    """The buffers of the first layers (input side) in class `to`, the rest in the job's."""

    model_config = STRICT

    kind: Literal["layers"] = "layers"
    first: int | None = Field(
        None,
        ge=1,
        description="the buffers holding any of the first k layers (input side) go to `to`; "
        "give first or share",
    )
    share: Percent | None = Field(
        None,
        gt=0,
        le=100,
        description="as first, with k the fewest first layers that hold this share of the "
        "model's bytes",
    )
    to: str = Field(
        "high",
        description="the class of those buffers: one of the tc profile's, of higher priority "
        "than the job's own",
    )

    def first_layers(self, sizes: list[int]) -> int:
        """k: `first`, or the fewest first layers holding `share` of the bytes `sizes`."""
        if self.first is not None:
            return self.first
        assert self.share is not None
        want, held = self.share / 100 * sum(sizes), 0
        for k, size in enumerate(sizes, 1):
            held += size
            if held >= want * (1 - 1e-9):
                return k
        return len(sizes)


class TailPolicy(BaseModel):
    """The buffers the model has still reducing when backward ends in class `to`."""

    model_config = STRICT

    kind: Literal["tail"] = "tail"
    to: str = Field(
        "high",
        description="the class of the exposed buffers: one of the tc profile's, of higher "
        "priority than the job's own",
    )


class InterleavePolicy(BaseModel):
    """Iterations started on a period shared with the other interleaved jobs, at an offset."""

    model_config = STRICT

    kind: Literal["interleave"] = "interleave"
    offset: Duration | None = Field(
        None,
        ge=0,
        description="when in the group's period this job's iterations start (default: "
        "computed so that the jobs' network phases overlap least); less than its slot",
    )
    margin: Percent = Field(
        5.0,
        ge=0,
        le=100,
        description="the group's period is the longest iteration alone stretched by this "
        "much: the slack that brings a late iteration back onto its slot (the group takes "
        "the largest any job gives)",
    )
    period: Duration | None = Field(
        None,
        gt=0,
        description="the group's period, given (e.g. from the jobs' measured iterations "
        "alone: the model leaves out the workers' own overheads); default: the longest "
        "iteration alone by the model, stretched by `margin`. Every job of the group that "
        "gives one gives the same, at least the longest iteration alone by the model",
    )
    late: Literal["catch-up", "skip", "hold"] = Field(
        "catch-up",
        description="an iteration that starts late: `catch-up` starts it at once and the "
        "margin brings the job back onto its slots over the next iterations; `skip` gives up "
        "the slots an iteration began late by beyond the job's gap (the free time the plan "
        "leaves after the job's network arcs: a phase later than that would run into another "
        "job's), on every rank alike, from the next stop vote; `hold` gives them up before "
        "the late iteration's own network phase, which waits for the slot it would have had "
        "(torch-ddp with DDP's own schedule)",
    )
    classes: list[str] | None = Field(
        None,
        min_length=1,
        description="also give the interleaved jobs classes as policy by-ratio does, highest "
        "priority first by compute-to-network ratio (every job of the group the same list); "
        "default: each job's own tc_class",
    )


class ByRatioPolicy(BaseModel):
    """The job's class from its rank by compute-to-network ratio among the jobs with this
    policy: the highest ratio gets the first of `classes`."""

    model_config = STRICT

    kind: Literal["by-ratio"] = "by-ratio"
    classes: list[str] = Field(
        default_factory=lambda: ["high", "middle", "low"],
        min_length=1,
        description="the classes to hand out, highest priority first: the job of the highest "
        "compute-to-network ratio gets the first, the next job the second; jobs beyond the "
        "list share its last (every job of the group must give the same list)",
    )


@dataclass(frozen=True)
class Declared:
    name: str
    config: type[BaseModel]
    # "module:callable" (the job's controller) → its runner: tick(now), section(t0, t1),
    # warning(), worker_config(), close(); None: nothing runs (static)
    runner: str | None
    # the backends that carry it: a whole-job class is any backend's; a class per transfer
    # needs a connection set per class, which only torch-ddp's scheduled loop opens
    backends: tuple[str, ...] = ("horovod", "torch-ddp")
    switchable: bool = False  # the job's own mark changes while it runs (marking.set_mark)
    per_transfer: bool = False  # its classes are per buffer (training/policies/per_transfer.py)


POLICIES: dict[str, Declared] = {
    "static": Declared("static", StaticPolicy, None),
    "adaptive": Declared(
        "adaptive",
        AdaptivePolicy,
        "testbed.workloads.training.policies.adaptive:start",
        switchable=True,
    ),
    "layers": Declared(
        "layers",
        LayersPolicy,
        "testbed.workloads.training.policies.per_transfer:start",
        backends=("torch-ddp",),
        per_transfer=True,
    ),
    "tail": Declared(
        "tail",
        TailPolicy,
        "testbed.workloads.training.policies.per_transfer:start",
        backends=("torch-ddp",),
        per_transfer=True,
    ),
    "interleave": Declared(
        "interleave", InterleavePolicy, "testbed.workloads.training.policies.interleave:start"
    ),
    "by-ratio": Declared(
        "by-ratio", ByRatioPolicy, "testbed.workloads.training.policies.ranking:start"
    ),
}


def group(s: Any, kind: str) -> dict[str, Any]:
    """The training jobs of scenario `s` whose policy is `kind`, by name, in scenario order:
    a policy that acts across jobs (interleave, by-ratio) acts on this group."""
    return {n: w for n, w in s.workloads.of_kind("horovod", "torch-ddp")
            if w.policy.kind == kind}  # fmt: skip


def _named(value: Any) -> Any:
    """`policy: adaptive` is `policy: {kind: adaptive}` with every field at its default."""
    if isinstance(value, str):
        if value not in POLICIES:
            raise ValueError(f"must be one of {', '.join(POLICIES)}, got {value!r}")
        return {"kind": value}
    if isinstance(value, dict) and value.get("kind") not in POLICIES:
        raise ValueError(
            f"kind must be one of {', '.join(POLICIES)}, got {value.get('kind')!r} "
            "(e.g. policy: {kind: adaptive, budget: 2%})"
        )
    return value


Policy = Annotated[
    Union[tuple(d.config for d in POLICIES.values())],  # type: ignore[valid-type]  # noqa: UP007
    Field(discriminator="kind"),
    BeforeValidator(_named),
]
