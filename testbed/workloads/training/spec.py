"""Training: a data-parallel job, one worker per host, as Horovod (ring-allreduce over Gloo, or
NCCL on GPUs) or torch.distributed's DistributedDataParallel. Two kinds share one
configuration: `horovod` (whose `backend` may still say torch-ddp, as scenarios written before
kinds did) and `torch-ddp`. Its configuration, derived values, summary shape and registration.

Derived values (thesis formulas 5.1, 5.2):
  bytes per iteration  = 2 (1 - 1/N) · model size                 (ring allreduce, N workers)
  R_cp_to_nw           = compute time · ring bottleneck rate / (bytes per iteration · 8)
Either compute time or R may be given, not both. The ring's bottleneck is the slowest link on
the path between consecutive workers (a host link on one switch; on an oversubscribed
leaf-spine, the fabric link a ring step crosses, shared by the steps that cross it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema

from testbed.core.addressing import with_class_addresses
from testbed.core.fields import Duration, FieldProblem, Size
from testbed.core.tcpstats import SOCKET_UNITS
from testbed.workloads.base import Placed, Placement
from testbed.workloads.registry import Kind, register
from testbed.workloads.training.model import models
from testbed.workloads.training.model.synthetic import fusion_of, real_layers
from testbed.workloads.training.policies import (
    POLICIES,
    ByRatioPolicy,
    InterleavePolicy,
    LayersPolicy,
    Policy,
    StaticPolicy,
    TailPolicy,
)

DEFAULT_COMPUTE_S = 0.9  # thesis Table 4.1


def _gpus(value: Any) -> Any:
    """`gpus`: a count (≥ 1), `all`, `auto`, or a list of distinct device ids."""
    ok = (
        value is None
        or value in ("all", "auto")
        or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)
        or (
            isinstance(value, list)
            and value
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
            and len(set(value)) == len(value)
        )
    )
    if not ok:
        raise ValueError(
            f"must be a count (1, 2, ...), all, auto or a list of distinct device ids "
            f"([0, 1]), got {value!r}"
        )
    return value


Gpus = Annotated[
    Any,
    BeforeValidator(_gpus),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1},
                {"enum": ["all", "auto"]},
                {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
                {"type": "null"},
            ]
        }
    ),
]


class HorovodDerived(Placement):
    """Values derived from a training job's inputs (thesis formulas 5.1 and 5.2)."""

    compute_time: Duration
    compute_to_network_ratio: float
    model_bytes: int
    bytes_per_iteration: int
    bottleneck_bps: int | None = Field(
        None, description="the slowest link of the ring's path (R_cp_to_nw is taken against it)"
    )


class HorovodWorkload(Placed):
    """A data-parallel training job, one worker per host: Horovod (ring-allreduce over Gloo)
    or torch.distributed's DistributedDataParallel (gloo on CPU, nccl on GPU)."""

    kind: Literal["horovod"] = "horovod"

    backend: Literal["horovod", "torch-ddp"] = Field(
        "horovod",
        description="horovod: Horovod workers (Gloo); torch-ddp: torch.distributed workers "
        "reducing DDP's gradient buckets (gloo on CPU, nccl on GPU)",
    )
    bucket_cap: Size = Field(
        25 * 2**20,
        gt=0,
        description="torch-ddp: DDP's bucket_cap_mb, the analogue of Horovod's fusion buffer "
        "(default 25 MiB, as DDP's)",
    )
    nccl_socket_threads: int | None = Field(
        None, ge=1, le=16,
        description="GPU runs: NCCL_SOCKET_NTHREADS (NCCL's default if unset); more threads "
        "and sockets make NCCL's share of a congested link larger against the background flows",
    )  # fmt: skip
    nccl_sockets_per_thread: int | None = Field(
        None, ge=1, le=16, description="GPU runs: NCCL_NSOCKS_PERTHREAD (NCCL's default if unset)"
    )
    gpus: Gpus = Field(
        None,
        description="GPUs per worker's host: a count, all, a list of device ids, or auto "
        "(use them when present, else CPU with a warning); unset: CPU",
    )

    mode: Literal["synthetic", "real"] = Field(
        "synthetic",
        description="synthetic: real gradients of a real model's layer sizes, compute emulated per "
        "layer; real: trains a real torch model (real_model)",
    )
    model: Literal["resnet50", "thesis-ns3"] = Field(
        "resnet50",
        description="layer sizes (synthetic mode): resnet50 (54 layers, 25.6 M parameters); "
        "thesis-ns3 (the thesis' ch. 5 model as its run script writes it: 50 layers in three "
        "steps, 25 × 444,444 B, 13 × 1,777,776 B, 12 × 5,333,328 B, and its own compute "
        "spread, docs/results/thesis-exact/README.md)",
    )
    profile: str | None = Field(
        None,
        description="a layer trace in the seed-002 shape (id name forward backward comm size) "
        "instead of model; path relative to the scenario",
    )
    profile_time_unit: Literal["ns", "us", "ms", "s"] = "us"
    model_size: Size | None = Field(None, gt=0, description="scale the layer sizes to this total")
    compute_time: Duration | None = Field(
        None, gt=0, description="compute per iteration (forward + backward); default 900ms"
    )
    compute_to_network_ratio: float | None = Field(
        None,
        gt=0,
        description="R_cp_to_nw = iteration compute time · link rate / (2(1-1/N) · model size · 8); "
        "sets compute_time",
    )
    barrier: bool = Field(
        True,
        description="forward waits for all reduced gradients (else layer i's forward waits for "
        "layer i's reduced gradients and layer i − 1's forward only); false: synthetic mode only",
    )
    queue: Literal["fifo", "priority"] = Field(
        "fifo",
        description="the order ready gradient buffers are reduced in, one all-reduce at a time: "
        "fifo (as they become ready), priority (lowest layer first, the layer the next forward "
        "needs first: the thesis' simulator, P3, TicTac; torch-ddp, synthetic mode)",
    )
    fusion: Literal["dynamic", "static", "buckets"] | None = Field(
        None,
        description="how gradients are fused into all-reduce buffers: dynamic (when the link "
        "frees, the ready ones in queue order up to fusion_threshold: Horovod's), static "
        "(fixed at start from the last layer down while ≤ fusion_threshold: the thesis' "
        "simulator), buckets (DDP's, of bucket_cap); static and buckets need torch-ddp in "
        "synthetic mode; unset: the backend's own (horovod dynamic, torch-ddp buckets)",
    )
    fusion_threshold: Size = Field(
        5_333_329, ge=0, description="Horovod's tensor fusion buffer; torch-ddp: fusion's buffer"
    )
    cycle_time: Duration = Field(0.001, gt=0, description="Horovod background cycle time")
    timeline: bool = Field(
        False,
        description="horovod backend: record rank 0's Horovod timeline (every tensor's "
        "negotiation and allreduce, every cycle; chrome://tracing) in the instance's folder, "
        "horovod-timeline.json, and split each measured iteration into Horovod's operations and "
        "its coordination (summary: timeline). Its times are this machine's clock. Costs rank 0 "
        "most of a core (Horovod's writer thread spins): for diagnosis, not timing",
    )
    iterations: int | None = Field(
        None, ge=1, description="stop after this many (default: run for the duration)"
    )
    device: Literal["cpu", "cuda"] = Field(
        "cpu",
        description="kept so that older scenarios load; the device follows gpus (device: cuda "
        "is refused: set gpus instead)",
    )
    batch_size: int = Field(16, ge=1, description="real mode: samples per step")
    real_model: Literal["small-cnn", "resnet18-narrow"] | None = Field(
        None,
        description="real mode: the model trained: small-cnn (25,578 parameters, 100 kB of "
        "gradients) or resnet18-narrow (ResNet-18 in its CIFAR form at 16 channels: 0.70 M "
        "parameters, 2.8 MB); unset: the small CNN, or ResNet-50 on GPUs with torchvision",
    )
    policy: Policy = Field(
        default_factory=StaticPolicy,
        description="how the job's traffic is classed: static (its one class, the default), "
        "adaptive (each iteration in its class until it runs late, then the rest of it in a "
        "higher class: `{kind: adaptive, budget: 2%, to: high}`) or layers (a class per "
        "transfer: the buffers of the first layers in a higher class, `{kind: layers, first: "
        "10, to: high}`; tail: the buffers the model has exposed after backward; both torch-ddp "
        "on CPU, single ToR). In mode real: layers and tail split DDP's buckets by layer in a "
        "communication hook, adaptive and by-ratio class the whole job (Horovod too), "
        "interleave paces the real loop's iterations onto its slots (late: catch-up or skip); "
        "tail, adaptive, by-ratio and interleave need compute_time",
    )

    derived: HorovodDerived | None = Field(
        None,
        description="written when the scenario is resolved; ignored on input",
        json_schema_extra={"readOnly": True},
    )

    @property
    def d(self) -> HorovodDerived:
        """The derived values (always there once the scenario has been loaded)."""
        assert self.derived is not None, "scenario not resolved"
        return self.derived


class TorchDdpWorkload(HorovodWorkload):
    """A data-parallel training job of torch.distributed workers (DistributedDataParallel):
    gloo on CPU, nccl on GPU. The same fields as `horovod`; `backend` is torch-ddp."""

    kind: Literal["torch-ddp"] = "torch-ddp"  # type: ignore[assignment]
    backend: Literal["horovod", "torch-ddp"] = Field(
        "torch-ddp", description="torch-ddp (the kind's own; horovod is refused here)"
    )


def ddp_default_schedule(w: HorovodWorkload) -> bool:
    """DDP's own schedule (its buckets in readiness order, every one before the next step):
    the torch-ddp worker runs DistributedDataParallel's way, not its scheduled loop."""
    return fusion_of(w) == "buckets" and w.queue == "fifo" and w.barrier


def _check_schedule(w: HorovodWorkload) -> None:
    """A schedule the backend cannot run, refused in one line naming the field."""
    if w.backend == "horovod":  # Horovod negotiates its own order and fuses dynamically
        if w.queue != "fifo":
            raise FieldProblem(
                ("queue",),
                "Horovod reduces in the order its ranks negotiate (fifo); queue: priority "
                "needs backend torch-ddp (kind: torch-ddp) in synthetic mode",
            )
        if fusion_of(w) != "dynamic":
            raise FieldProblem(
                ("fusion",),
                f"Horovod fuses dynamically; fusion: {w.fusion} needs backend torch-ddp "
                "(kind: torch-ddp) in synthetic mode",
            )
    if w.mode == "synthetic" and w.real_model is not None:
        raise FieldProblem(("real_model",), "real_model needs mode: real (the model it trains)")
    if w.mode == "real":  # the real model steps with its framework's own schedule
        for field in ("model_size", "profile"):
            if getattr(w, field) is not None:
                raise FieldProblem(
                    (field,),
                    "mode real trains a real model, whose layers are its own: "
                    "choose it with real_model (small-cnn or resnet18-narrow)",
                )
        if not w.barrier:
            raise FieldProblem(
                ("barrier",),
                "barrier: false needs mode: synthetic (a real model's optimizer step waits "
                "for every gradient)",
            )
        if w.backend == "torch-ddp" and not ddp_default_schedule(w):
            field = "queue" if w.queue != "fifo" else "fusion"
            raise FieldProblem(
                (field,),
                f"{field}: {getattr(w, field)} needs mode: synthetic (real mode runs "
                "DistributedDataParallel's own buckets, fifo)",
            )


REAL_NEEDS = {  # what a policy computes from the job's compute time (predict.py)
    "adaptive": "its deadline (the compute plus the budget's share of the iteration alone)",
    "tail": "the buffers still reducing when backward ends",
    "by-ratio": "its compute-to-network ratio, the job's rank",
    "interleave": "its slots (its iteration alone and when its network phases run)",
}


def _check_real_policy(w: HorovodWorkload, p: Any) -> None:
    """Mode real trains a real model whose layers are known (models.REAL_MODELS) but whose
    compute is its own: a policy computed from the compute needs it stated."""
    if isinstance(p, InterleavePolicy) and p.late == "hold":
        raise FieldProblem(
            ("policy", "late"),
            "late: hold needs mode: synthetic: it waits before the iteration's first "
            "reduction, which in a real model runs inside backward (DDP's buckets, Horovod's "
            "hooks); use late: skip or catch-up",
        )
    if p.kind in REAL_NEEDS and w.compute_time is None and w.compute_to_network_ratio is None:
        raise FieldProblem(
            ("compute_time",),
            f"policy {p.kind} in mode real needs compute_time: the real model's forward and "
            "backward time per iteration on this machine, in scenario time (the iteration "
            "time of the job alone on fast links), from which it computes "
            f"{REAL_NEEDS[p.kind]}",
        )


def _check_fields(w: HorovodWorkload) -> None:
    """Field combinations no backend runs, refused in one line naming the field."""
    if w.kind == "torch-ddp" and w.backend != "torch-ddp":
        raise FieldProblem(("backend",), "kind torch-ddp runs torch-ddp; remove backend")
    if w.backend == "torch-ddp" and w.timeline:
        raise FieldProblem(
            ("timeline",),
            "the timeline is Horovod's; torch-ddp has none (use backend: horovod, or remove "
            "timeline)",
        )
    if w.nccl_sockets_per_thread is not None:
        # NCCL's default is 0 helper threads on a NIC it cannot identify (a veth has
        # no PCI vendor), and it clamps threads × sockets to 64 (net_socket.cc)
        threads = w.nccl_socket_threads
        if threads is None:
            raise FieldProblem(
                ("nccl_sockets_per_thread",),
                "needs nccl_socket_threads too: on the emulated links NCCL starts no "
                "socket threads of its own, so sockets per thread alone change nothing",
            )
        if threads * w.nccl_sockets_per_thread > 64:
            raise FieldProblem(
                ("nccl_sockets_per_thread",),
                f"nccl_socket_threads × nccl_sockets_per_thread is "
                f"{threads * w.nccl_sockets_per_thread}; NCCL uses at most 64 sockets",
            )
    if w.device == "cuda":
        # gpus decides the devices, their CUDA_VISIBLE_DEVICES and NCCL's host ids; a
        # bare device: cuda would put every worker on GPU 0 with none of that
        raise FieldProblem(
            ("device",),
            "device: cuda is replaced by gpus; remove device and set gpus: 1 (or all, "
            "auto, or a list of device ids)",
        )


def _check_policy(w: HorovodWorkload, s: Any, place: Placement) -> None:
    """A policy the job cannot carry, refused in one line naming the field."""
    p = w.policy
    if w.backend not in POLICIES[p.kind].backends:
        raise FieldProblem(
            ("policy",),
            f"policy {p.kind} needs kind: torch-ddp: Horovod sends every fused buffer over one "
            "set of connections, so its class is the whole job's (static or adaptive)",
        )
    if isinstance(p, StaticPolicy):
        return
    if w.mode == "real":
        _check_real_policy(w, p)
    names = s.tc_profile.class_names
    if isinstance(p, InterleavePolicy | ByRatioPolicy):
        if (
            isinstance(p, InterleavePolicy)
            and p.late == "hold"
            and not (w.backend == "torch-ddp" and ddp_default_schedule(w))
        ):
            raise FieldProblem(
                ("policy", "late"),
                "late: hold waits inside the iteration before its first reduction, which only "
                "torch-ddp's own schedule (fusion: buckets, queue: fifo, barrier: true) does; "
                "use late: skip",
            )
        if p.classes is None:
            return
        if w.tc_class is not None or w.dscp is not None:
            raise FieldProblem(
                ("tc_class" if w.tc_class is not None else "dscp",),
                "policy by-ratio gives the job its class; remove this or the policy"
                if isinstance(p, ByRatioPolicy)
                else "policy interleave with classes gives the job its class; remove this or "
                "the policy's classes",
            )
        for i, c in enumerate(p.classes):
            if c not in names:
                raise FieldProblem(
                    ("policy", "classes", i),
                    f"{c!r} is not a class of tc profile {s.tc_profile.name!r} "
                    f"({', '.join(names)})",
                )
        return
    if p.to not in names:
        raise FieldProblem(
            ("policy", "to"),
            f"{p.to!r} is not a class of tc profile {s.tc_profile.name!r} ({', '.join(names)})",
        )
    if names.index(p.to) >= names.index(place.tc_class):
        raise FieldProblem(
            ("policy", "to"),
            f"{p.to!r} is not above the job's own class {place.tc_class!r} in tc profile "
            f"{s.tc_profile.name!r} (highest first: {', '.join(names)}); the policy moves "
            "traffic to a higher class",
        )
    if isinstance(p, LayersPolicy | TailPolicy):  # POLICIES[p.kind].per_transfer
        _check_per_transfer(w, p, s)


def _check_per_transfer(w: HorovodWorkload, p: LayersPolicy | TailPolicy, s: Any) -> None:
    """A class per transfer: Gloo groups on addresses of their own, on one bridged subnet."""
    if isinstance(p, LayersPolicy) and (p.first is None) == (p.share is None):
        raise FieldProblem(
            ("policy",), "give first (a number of layers) or share (of the bytes), one of them"
        )
    if w.gpus is not None:
        raise FieldProblem(
            ("policy",),
            f"policy {p.kind} runs on Gloo (CPU workers): NCCL opens its connections on the "
            "interface's own address, so a class cannot have its own; remove gpus",
        )
    t = s.topology
    if t.kind != "single-tor":
        raise FieldProblem(
            ("policy",),
            f"policy {p.kind} needs topology kind single-tor: its classes' addresses come from "
            "the data prefix, which only a single ToR bridges whole",
        )
    need = with_class_addresses(t.hosts, len(s.tc_profile.class_names))
    if t.prefix.num_addresses < need:
        raise FieldProblem(
            ("topology", "prefix"),
            f"policy {p.kind} gives every host one more address per class: {need} addresses, "
            f"and {t.prefix} has {t.prefix.num_addresses}; use a larger prefix",
        )


def _check_layers(w: HorovodWorkload, layers: list[models.Layer]) -> None:
    p = w.policy
    if isinstance(p, LayersPolicy) and p.first is not None and p.first > len(layers):
        raise FieldProblem(
            ("policy", "first"),
            f"{p.first} is beyond the model's {len(layers)} layers; give at most {len(layers)}",
        )


def resolve(
    w: HorovodWorkload,
    s: Any,
    base_dir: Path | None,
    ordinal: int = 0,
    place: Placement | None = None,
) -> None:
    """Checks that need the rest of the scenario, then `derived`. `place`: the class and DSCP
    the loader resolved for the instance."""
    from testbed.core.paths import ring_bottleneck

    _check_fields(w)
    _check_schedule(w)
    assert place is not None
    _check_policy(w, s, place)
    if w.profile:
        p = Path(w.profile)
        p = p if p.is_absolute() else (base_dir or Path.cwd()) / p
        if not p.is_file():
            raise FieldProblem(("profile",), f"no such file {w.profile!r}")
        w.profile = str(p.resolve())
        try:
            layers = models.load_trace(p, w.profile_time_unit)
        except ValueError as e:
            raise FieldProblem(("profile",), str(e)) from None
    elif (real := real_layers(w)) is not None:  # the real model the workers train
        layers = real
    else:
        layers = models.MODELS[w.model]()
    _check_layers(w, layers)
    model_bytes = w.model_size or models.total_bytes(layers)
    hosts = w.hosts or [f"h{i}" for i in range(1, s.topology.hosts + 1)]
    n = len(hosts)
    bpi = round(2 * (1 - 1 / n) * model_bytes)
    link = ring_bottleneck(s.topology, hosts)
    if w.compute_to_network_ratio is not None:
        if w.compute_time is not None:
            raise FieldProblem(
                ("compute_time",), "give compute_time or compute_to_network_ratio, not both"
            )
        ratio = w.compute_to_network_ratio
        compute = ratio * bpi * 8 / link
    else:
        compute = w.compute_time
        if compute is None:
            compute = models.total_compute(layers) if w.profile else DEFAULT_COMPUTE_S
        ratio = compute * link / (bpi * 8)
    w.derived = HorovodDerived(
        **place.model_dump(),
        compute_time=compute,
        compute_to_network_ratio=ratio,
        model_bytes=model_bytes,
        bytes_per_iteration=bpi,
        bottleneck_bps=link,
    )


def work(w: HorovodWorkload, s: Any) -> float:
    """Payload bits/s its workers send in all (budget.py): each worker's share of the ring's
    bytes once an iteration, an iteration no shorter than its compute or its bytes at the
    ring's slowest link (the job alone, at its fastest: an upper bound)."""
    d = w.d
    bits = d.bytes_per_iteration * 8
    iteration = max(d.compute_time, bits / (d.bottleneck_bps or s.topology.link_rate))
    workers = len(w.hosts or range(s.topology.hosts))
    return workers * bits / iteration if iteration > 0 else 0.0


def fixed_cpu(w: HorovodWorkload, s: Any, k: float) -> float:
    """Cores a real-mode job's compute keeps busy at time_scale `k` (budget.py): each worker
    one core for the share of an iteration its compute takes, at the job's fastest (backward
    overlapping the ring, an iteration max(compute, ring) on this machine's clock): an upper
    bound. The compute is this machine's own, the stated compute_time as measured here, and
    not dilated, while the ring takes k times its scenario time, so the share falls as k
    grows (and the job's compute-to-network ratio with it). A job that states no compute is
    taken as computing all the time. Synthetic jobs sleep their compute, and jobs with GPUs
    (but `auto`, which may fall back to the CPU) compute on the GPU: nothing."""
    if w.mode != "real" or (w.gpus is not None and w.gpus != "auto"):
        return 0.0
    workers = len(w.hosts or range(s.topology.hosts))
    if w.compute_time is None and w.compute_to_network_ratio is None:
        return float(workers)
    d = w.d
    ring = k * d.bytes_per_iteration * 8 / (d.bottleneck_bps or s.topology.link_rate)
    longest = max(d.compute_time, ring)
    return workers * (d.compute_time / longest if longest > 0 else 0.0)


def probe_of(kind: str) -> Any:
    """Its CPU-cost probe (budget_probe.py): 8 workers reducing a 2 MB model's gradients,
    1.2 s of compute an iteration (the ring about a fifth of it at 100 Mbit/s)."""
    return lambda: {"kind": kind, "mode": "synthetic", "model": "thesis-ns3",
                    "model_size": "2MB", "compute_time": "1200ms"}  # fmt: skip


def dilate(w: HorovodWorkload, k: float) -> dict[str, Any]:
    """The derived compute (from R, a trace or the default) made explicit, then dilated;
    giving compute_time drops the ratio it came from."""
    out = {"compute_time": w.d.compute_time * k, "cycle_time": w.cycle_time * k}
    if isinstance(w.policy, InterleavePolicy):
        given = {"offset": w.policy.offset, "period": w.policy.period}
        out |= {f"policy.{f}": v * k for f, v in given.items() if v is not None}
    return out


SUMMARY = {
    "workers": "1",
    "iterations": "1",
    "iterations_per_worker": {"*": "1"},
    "iterations_measured": "1",
    "iteration_time_s": {k: "s" for k in ("mean", "p50", "p99")},
    "compute_time_s": "s",
    "compute_to_network_ratio": "1",
    "bytes_per_iteration": "B",
    "bottleneck_bps": "bps",
    "compute_s_mean": "s",
    "wait_s_mean": "s",
    "min_iteration_over_compute": "1",
    "dscp": "1",
    # the workers' own sockets per class (tcpstats.SOCKET_UNITS)
    "tcp_by_class": {"*": SOCKET_UNITS},
    # with `timeline: true` (horovod backend): rank 0's measured iterations, per iteration
    "timeline": {
        "iterations": "1",
        "operations_s": "s",
        "coordination_s": "s",
        "operations": "1",
        "coordination_per_cycle_s": {"mean": "s", "p99": "s"},
    },
}

# without `timeline: true` (and torch-ddp, which has no Horovod timeline) the section has none
NO_TIMELINE = {k: v for k, v in SUMMARY.items() if k != "timeline"}
# a job whose policy is not static: what its policy did inside the window, per policy
# (training/policies/adaptive.py, training/policies/per_transfer.py)
POLICY_SHAPES = {
    "adaptive": {
        "budget_pct": "pct",
        "escalate_after_s": "s",
        "escalations": "1",
        "escalated_s": "s",
        "escalated_share": "1",
    },
    "layers": {"layers_to": "1", "buffers_to": "1", "bytes_to": "B", "share_to": "1"},
}
POLICY_SHAPES["tail"] = POLICY_SHAPES["layers"]
POLICY_SHAPES["interleave"] = {
    "jobs": "1",
    "period_s": "s",
    "slot_s": "s",
    "offset_s": "s",
    "network_s": "s",
    "planned_overlap_s": "s",
    "gap_s": "s",
    "skip_after_s": "s",
    "on_slot_share": "1",
    "slots_missed": "1",
    "phase_overrun_s": "s",
    "gap_left_s": "s",
    "rank": "1",
}
POLICY_SHAPES["by-ratio"] = {"rank": "1", "jobs": "1", "compute_to_network_ratio": "1"}
POLICY = {"policy": {k: v for shape in POLICY_SHAPES.values() for k, v in shape.items()}}


def summary_of(w: Any) -> dict[str, Any]:
    """The section's shape for instance `w`: the timeline's numbers only with a timeline, the
    policy's only with a policy that acts."""
    shape = SUMMARY if getattr(w, "timeline", False) else NO_TIMELINE
    if getattr(w, "policy", None) is not None and w.policy.kind != "static":
        shape = {**shape, "policy": POLICY_SHAPES[w.policy.kind]}
    return shape


for _kind, _config, _doc, _summary in (
    ("horovod", HorovodWorkload, HorovodWorkload.__doc__, SUMMARY),
    ("torch-ddp", TorchDdpWorkload, TorchDdpWorkload.__doc__, NO_TIMELINE),
):
    register(
        Kind(
            name=_kind,
            metrics="testbed.workloads.training.workers.metrics:registry",
            files=("profile",),
            config=_config,
            controller="testbed.workloads.training.controller:make",
            work=work,
            fixed_cpu=fixed_cpu,
            priced_as=lambda w: w.backend,  # the processes are the backend's
            probe=probe_of(_kind),
            report="testbed.workloads.training.report",
            summary={**_summary, **POLICY},
            summary_of=summary_of,
            resolve=resolve,
            dilate=dilate,
            resolve_group="testbed.workloads.training.policies.groups:resolve",
            records=lambda name: iterations_file(name),
            record_durations=("duration_s", "compute_s", "wait_s"),
            preflight="testbed.workloads.training.gpus:preflight",
            predict="testbed.workloads.training.model.predict:for_instance",
            predictable=lambda w: (
                w.mode == "synthetic"
                or w.compute_time is not None
                or w.compute_to_network_ratio is not None
            ),
            devices="testbed.workloads.training.gpus:devices",
            binaries=("iptables",),
            default_class="default",
            doc=_doc or "",
            models=tuple(p.config for p in POLICIES.values()),
        )
    )


def iterations_file(name: str) -> str:
    """An instance's merged records in the run folder: iterations.csv for the instance named
    horovod (the scenarios before named instances, whatever its backend), iterations-<name>.csv
    otherwise."""
    return "iterations.csv" if name == "horovod" else f"iterations-{name}.csv"
