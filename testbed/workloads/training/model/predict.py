"""The event model of a data-parallel iteration (thesis ch. 4), used by `testbed predict`, by
`testbed report` (measured vs predicted) and by the workload benchmark.

One iteration on each worker: forward over layers 0 → L-1, backward over L-1 → 0; a layer's
gradient is ready when its backward compute ends. Ready gradients are fused into buffers and
reduced over the ring one buffer at a time (the link is a single, non-preemptive server):

    ring time of a buffer of S bytes = 2 (N - 1) · (S / N · 8 / B_eff + step latency)

which is 2 (1 - 1/N) · S / B_eff plus the latency of 2 (N - 1) ring steps. B_eff is the rate
the ring really gets: on a shaped link carrying real TCP, a 1448-byte payload per 1514-byte
frame, and every uplink also carries the ACKs of the ring's reverse direction (one 66-byte
delayed ACK per two frames): B_eff = rate · 2·1448 / (2·1514 + 66) ≈ 0.936 · rate (0.989 with
9000-byte jumbo frames). The thesis' own model uses the raw rate (efficiency 1).

Fusion:
- dynamic (Horovod): when the link frees up, the ready gradients are taken in queue order and
  fused until the next one would exceed the threshold (Horovod's cycle time is ignored);
- static (the thesis' ns-3 simulator, which produced its ch. 5 figures): buffers are fixed up
  front, layers L-1 → 0 greedily while the sum stays ≤ the threshold (models.static_buffers,
  the mapping the torch-ddp worker reduces too); a buffer is ready when its lowest layer is
  (backward reaches it last). The ch. 4 Python simulator mapped 0 → L-1 instead.
- buckets (torch DistributedDataParallel): fixed groups given up front (models.buckets_for:
  output → input, the first at most 1 MiB, the rest at most bucket_cap), each ready when its
  lowest layer is; a model that fits the first bucket is reduced only after its whole
  backward pass, with nothing to overlap.
Queue order: fifo (in the order gradients become ready) or priority (lowest layer index first:
the layers the next forward needs first). Barrier: the next forward waits for every reduction;
without it, forward of layer j waits only for layer j's own reduction.

Iteration time is measured as the thesis' simulator does: the time between the ends of two
consecutive forward passes; over more iterations the last interval is the steady state.
Iterations never share the link: with a barrier the next forward waits for every reduction,
and without one each layer's forward waits for its own, so by the end of the next forward
pass (before any new gradient exists) every reduction of the previous iteration is done.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from testbed.core.paths import ack_efficiency
from testbed.workloads.training.model import models
from testbed.workloads.training.model.models import Layer, buckets_for, with_thesis_compute

if TYPE_CHECKING:
    from testbed.scenario.schema import Scenario


ACK_EFFICIENCY = ack_efficiency()


@dataclass(frozen=True)
class Network:
    workers: int
    rate_bps: float
    efficiency: float = ACK_EFFICIENCY  # B_eff / rate
    step_latency_s: float = 0.0  # one-way latency of one ring step

    def ring_time(self, nbytes: float, start: float = 0.0) -> float:
        """A buffer's ring time; `start` (when it starts) matters only to a network whose
        links are not free all the time (docs/results/thesis-exact/ring_model.py's, under a background)."""
        n = self.workers
        b_eff = self.rate_bps * self.efficiency
        return 2 * (n - 1) * (nbytes / n * 8 / b_eff + self.step_latency_s)


@dataclass(frozen=True)
class Schedule:
    fusion_bytes: float
    fusion: Literal["dynamic", "static", "buckets"] = "dynamic"
    queue: Literal["fifo", "priority"] = "fifo"
    barrier: bool = True
    buckets: tuple[tuple[int, ...], ...] = ()  # fusion "buckets": the fixed layer groups


@dataclass(frozen=True)
class Transfer:
    layers: tuple[int, ...]
    nbytes: float
    start: float
    end: float


@dataclass
class Prediction:
    iteration_s: float
    forward_ends: list[float]
    backward_ends: list[float]
    transfers: list[Transfer] = field(default_factory=list)  # of the last iteration
    forward_starts: list[float] = field(default_factory=list)

    def network_s(self) -> float:
        return sum(t.end - t.start for t in self.transfers)


def static_buffers(layers: list[Layer], fusion_bytes: float) -> list[list[int]]:
    """The thesis' fixed mapping, from the last layer down (models.static_buffers)."""
    return models.static_buffers([x.nbytes for x in layers], fusion_bytes)


def _reduce(
    layers: list[Layer], ready: list[float], link_free: float, net: Network, sched: Schedule
) -> list[Transfer]:
    """Run one iteration's gradients over the ring; ready[j] is when layer j's gradient is."""
    key = (lambda j: j) if sched.queue == "priority" else (lambda j: (ready[j], -j))
    if sched.fusion == "static":
        units = [tuple(b) for b in static_buffers(layers, sched.fusion_bytes)]
    elif sched.fusion == "buckets":
        units = list(sched.buckets)
    else:
        units = [(j,) for j in range(len(layers))]
    unit_ready = {u: max(ready[j] for j in u) for u in units}
    waiting = sorted(units, key=lambda u: unit_ready[u])
    queued: list[tuple[int, ...]] = []
    out: list[Transfer] = []
    t = link_free
    while waiting or queued:
        if not queued:  # idle link: wait for the next gradient
            t = max(t, unit_ready[waiting[0]])
        while waiting and unit_ready[waiting[0]] <= t:
            queued.append(waiting.pop(0))
        queued.sort(key=lambda u: key(min(u)))
        take = [queued.pop(0)]
        size = sum(layers[j].nbytes for j in take[0])
        if sched.fusion == "dynamic":
            while queued and size + layers[queued[0][0]].nbytes <= sched.fusion_bytes:
                size += layers[queued[0][0]].nbytes
                take.append(queued.pop(0))
        end = t + net.ring_time(size, t)
        out.append(Transfer(tuple(j for u in take for j in u), size, t, end))
        t = end
    return out


def simulate(layers: list[Layer], net: Network, sched: Schedule, iterations: int = 6) -> Prediction:
    n = len(layers)
    done = [0.0] * n  # when each layer's previous reduction finished (all updated at t = 0)
    t = 0.0
    link_free = 0.0
    fs: list[float] = []
    fe: list[float] = []
    be: list[float] = []
    transfers: list[Transfer] = []
    for _ in range(iterations):
        if sched.barrier:
            t = max([t, *done])
        fs.append(max(t, done[0]))
        for j, layer in enumerate(layers):
            t = max(t, done[j]) + layer.forward_s
        fe.append(t)
        ready = [0.0] * n
        for j in range(n - 1, -1, -1):
            t += layers[j].backward_s
            ready[j] = t
        be.append(t)
        transfers = _reduce(layers, ready, link_free, net, sched)
        for tr in transfers:
            for j in tr.layers:
                done[j] = tr.end
        link_free = transfers[-1].end if transfers else link_free
    return Prediction(fe[-1] - fe[-2] if len(fe) > 1 else fe[0], fe, be, transfers, fs)


def thesis_ch4_layers(
    model_bytes: float = 100e6, n_layers: int = 100, compute_s: float = 0.9
) -> list[Layer]:
    """The model of thesis ch. 4 (Table 4.1) as its author's simulator builds it
    (github.com/hgao10/horovod_simulation, ringallreduce_simulator.py): sizes in three steps
    of 1 : 4 : 12 × 2M/(9L) over layers 0-50, 51-75 and 76-99 (97.6 MB of the nominal 100);
    forward : backward = 1 : 2, forward falling and backward rising arithmetically, the zero
    end of each progression replaced by one step."""
    L = n_layers
    unit = 2 * model_bytes / (9 * L)
    layers = [
        Layer(f"layer{i}", round((1 if i <= L // 2 else 4 if i <= 3 * L // 4 else 12) * unit / 4))
        for i in range(L)
    ]
    return with_thesis_compute(layers, compute_s)


def training_instances(s: Scenario) -> list[tuple[str, Any]]:
    return s.workloads.of_kind("horovod", "torch-ddp")


def for_scenario(s: Scenario) -> dict[str, Any]:
    """The model of the scenario's training instance (its first, when it has several)."""
    jobs = training_instances(s)
    if not jobs:
        raise ValueError("workloads: the scenario has no training job to predict")
    return for_instance(jobs[0][0], s)


def for_instance(name: str, s: Scenario) -> dict[str, Any]:
    """What the model says of training instance `name`, alone on the network: the iteration
    time under the job's own schedule (its queue, barrier and fusion: Horovod's dynamic
    fusion, torch-ddp's DDP buckets unless `fusion` says otherwise), the same fusion with
    either queue and either barrier, and the thesis' derived quantities. The
    ring runs at its path's bottleneck (paths.ring_bottleneck: the fabric, where consecutive
    ranks sit on different leaves of an oversubscribed leaf-spine)."""
    h, layers, net, fusion = _model(name, s)
    d = h.d
    n = net.workers
    rate = net.rate_bps
    kind = fusion["fusion"]
    variants = {}
    for queue in ("fifo", "priority"):
        for barrier in (True, False):
            p = simulate(layers, net, Schedule(queue=queue, barrier=barrier, **fusion))
            variants[f"{queue}{'' if barrier else '-nobarrier'}"] = p.iteration_s
    it = variants[f"{h.queue}{'' if h.barrier else '-nobarrier'}"]
    return {
        "instance": name,
        "workers": n,
        "link_rate_bps": s.topology.link_rate,
        "bottleneck_bps": rate,
        "model_bytes": d.model_bytes,
        "bytes_per_iteration": d.bytes_per_iteration,
        "compute_s": d.compute_time,
        "network_s": d.bytes_per_iteration * 8 / rate,  # at the raw rate, as R is defined
        "compute_to_network_ratio": d.compute_to_network_ratio,
        "iteration_s": it,
        "schedule": {"queue": h.queue, "barrier": h.barrier, "fusion": kind},
        "u_horovod_pct": d.bytes_per_iteration * 8 / (it * rate) * 100,
        "variants_s": variants,
        "efficiency": net.efficiency,
    }


def _model(name: str, s: Scenario) -> tuple[Any, list[Layer], Network, dict[str, Any]]:
    """Training instance `name`'s layers, its network alone and its fusion (Schedule's fields
    but queue and barrier)."""
    from testbed.core.paths import leaf_of
    from testbed.workloads.training.model.synthetic import fusion_of, layers_for

    h = s.workloads.get(name)
    if h is None or h.kind not in ("horovod", "torch-ddp"):
        raise ValueError(f"workloads.{name}: no training job of that name to predict")
    if h.mode != "synthetic" and h.compute_time is None and h.compute_to_network_ratio is None:
        raise ValueError(
            f"workloads.{name}.mode: the model predicts a real job only from the compute time "
            "it states (compute_time: its layers are known, its compute is its own)"
        )
    d = h.d
    hosts = h.hosts or [f"h{i}" for i in range(1, s.topology.hosts + 1)]
    n = len(hosts)
    rate = d.bottleneck_bps or s.topology.link_rate
    # a ring step crosses an uplink and a downlink, and two fabric links between leaves
    crosses = len({leaf_of(s.topology, x) for x in hosts}) > 1
    hops = 4 if crosses else 2
    net = Network(
        n,
        rate,
        ack_efficiency(s.topology.mtu, s.topology.tcp_segment),
        step_latency_s=hops * s.topology.delay,
    )
    layers = layers_for(h)
    kind = fusion_of(h)
    if kind == "buckets":  # DDP's own buckets, not Horovod's fusion
        groups = tuple(tuple(b) for b in buckets_for([x.params for x in layers], h.bucket_cap))
        fusion: Any = {"fusion_bytes": h.bucket_cap, "fusion": "buckets", "buckets": groups}
    else:
        fusion = {"fusion_bytes": h.fusion_threshold, "fusion": kind}
    return h, layers, net, fusion


def network_arcs(name: str, s: Scenario) -> tuple[float, list[tuple[float, float]]]:
    """Instance `name`'s iteration time alone and, in its steady state, when its ring is busy:
    (start, end) of each reduction, from the start of its iteration's forward pass (an end
    may lie past the iteration, where reductions overlap the next forward). Policy
    `interleave` places these on the jobs' common period (training/policies/interleave.py)."""
    h, layers, net, fusion = _model(name, s)
    p = simulate(layers, net, Schedule(queue=h.queue, barrier=h.barrier, **fusion))
    t0 = p.forward_starts[-1]
    return p.iteration_s, [(t.start - t0, t.end - t0) for t in p.transfers]


def exposed_layers(name: str, s: Scenario) -> set[int]:
    """The layers of instance `name` whose reduction, in the model's steady state alone, ends
    after backward has ended: the exposed tail that sets the iteration time (policy `tail`)."""
    h, layers, net, fusion = _model(name, s)
    p = simulate(layers, net, Schedule(queue=h.queue, barrier=h.barrier, **fusion))
    end = p.backward_ends[-1]
    return {j for t in p.transfers if t.end > end * (1 + 1e-9) for j in t.layers}


def print_prediction(out: Any, who: str, p: dict[str, Any]) -> None:
    """`testbed predict`'s text for one training job (`for_instance`'s figures)."""
    from rich.table import Table

    def rate(bps: float) -> str:
        return f"{bps / 1e6:.1f} Mbit/s" if bps < 1e9 else f"{bps / 1e9:.2f} Gbit/s"

    via = (
        ""
        if p["bottleneck_bps"] == p["link_rate_bps"]
        else f", the ring held to {rate(p['bottleneck_bps'])} by the fabric"
    )
    out.print(
        f"{who}: {p['workers']} workers, {rate(p['link_rate_bps'])} links{via}, model "
        f"{p['model_bytes'] / 1e6:.3g} MB, {p['bytes_per_iteration'] / 1e6:.3g} MB per worker "
        "per iteration"
    )
    out.print(
        f"compute {p['compute_s'] * 1e3:.1f} ms, network {p['network_s'] * 1e3:.1f} ms at the "
        f"ring's rate (R_cp_to_nw {p['compute_to_network_ratio']:.3g}); the model moves bytes "
        f"at TCP's {p['efficiency']:.3f} of the rate"
    )
    sched = p["schedule"]
    out.print(
        f"predicted iteration time [bold]{p['iteration_s'] * 1e3:.1f} ms[/] ({sched['queue']}, "
        f"{'barrier' if sched['barrier'] else 'no barrier'}, {sched['fusion']} fusion), "
        f"U_horovod {p['u_horovod_pct']:.2f}% of the ring's bottleneck (no background load)"
    )
    t = Table(title=f"the same job with other gradient schedules ({sched['fusion']} fusion)")
    for col in ("queue", "barrier", "iteration (ms)"):
        t.add_column(col, justify="right")
    for variant, v in p["variants_s"].items():
        queue, _, nob = variant.partition("-")
        t.add_row(queue, "off" if nob else "on", f"{v * 1e3:.1f}")
    out.print(t)
