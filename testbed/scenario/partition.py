"""Where each switch and host of a run goes when the scenario names several machines
(`machines:`, machines.py), and which links that cuts: pure, computed from the topology plan.

The graph is MaxiNet's (Wette et al., 2014): a vertex per switch with its hosts (a switch
always keeps the hosts it is not told to leave), weighted 1 + its hosts' weight, a host
weighing 1 + the workload instances it runs; an edge per link, weighted by its rate in
Mbit/s, so the partition cuts the least link rate it can while it balances the machines'
load. METIS (through pymetis) partitions it: a hand-made heuristic would be worse and ours to
maintain. A pinned switch or host (`machines.place`) is its own vertex; METIS has no fixed
vertices, so its parts are matched to the machines afterwards, the assignment that keeps most
pins (and GPU hosts on machines with GPUs) winning, and every pin is then applied as given.
A single ToR is one vertex: it stays on one machine unless hosts are pinned elsewhere.

Every cut link becomes a VXLAN tunnel between its two machines (its switch end's HTB tree
stays where the switch is), so what crosses the machines' own network is what the link's
port already shaped: its rate, over time_scale, in each direction.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, replace
from typing import Any

from testbed.core.fields import FieldProblem
from testbed.core.units import format_rate, format_rate_about
from testbed.scenario.topology import TopologyPlan, name_of

SEED = 1  # METIS's own random seed: the same scenario, the same placement
VNI_LINKS = 1024  # a run's VNIs are a block of this many: at most VNI_LINKS - 1 cut links
EXHAUSTIVE = 50_000  # matchings of parts to machines up to which every one is tried


@dataclass(frozen=True)
class Cut:
    """A link whose two ends are on different machines: a tunnel between them."""

    link: str  # its name in summaries (the host's name, or leaf<i>-spine<j>)
    lower: str  # its lower node (a host or a leaf) and that node's machine
    lower_machine: str
    upper: str
    upper_machine: str
    rate_bps: int  # each way, in scenario time


@dataclass(frozen=True)
class MachinePlan:
    machines: tuple[str, ...]
    machine_of: dict[str, str]  # switch or host name → machine
    cut: tuple[Cut, ...]
    how: str  # one line: how the placement was made

    def nodes_on(self, machine: str) -> list[str]:
        return [n for n, m in self.machine_of.items() if m == machine]

    @property
    def cut_rate_bps(self) -> int:
        return sum(c.rate_bps for c in self.cut)


@dataclass
class _Vertex:
    nodes: list[str]  # a switch and its unpinned hosts, or one pinned node
    weight: int
    pin: str | None = None  # the machine the user gave
    gpu: bool = False  # holds a host of a job with gpus


def _host_loads(s: Any, hosts: list[str]) -> tuple[dict[str, int], set[str]]:
    """Each host's workload instances, and the hosts of jobs with GPUs."""
    load = dict.fromkeys(hosts, 0)
    gpu: set[str] = set()
    for w in s.workloads.values():
        if not hasattr(w, "hosts"):
            continue
        used = w.hosts or hosts
        for h in used:
            load[h] += 1
        if getattr(w, "gpus", None) is not None:
            gpu.update(used)
    return load, gpu


def _vertices(s: Any, t: TopologyPlan) -> list[_Vertex]:
    m = s.machines
    hosts = [h.name for h in t.hosts]
    known = {*hosts, *(sw.name for sw in t.switches)}
    for node in m.place:
        if node not in known:
            switches = ", ".join(sw.name for sw in t.switches)
            raise FieldProblem(
                ("machines", "place", node),
                f"the topology has no node {node!r} (hosts h1 … h{len(hosts)}; switches "
                f"{switches})",
            )
    load, gpu = _host_loads(s, hosts)
    out = []
    for sw in t.switches:
        own = [h.name for h in t.hosts if h.switch == sw.name and h.name not in m.place]
        out.append(
            _Vertex([sw.name, *own], 1 + sum(1 + load[h] for h in own), m.place.get(sw.name),
                    any(h in gpu for h in own))
        )  # fmt: skip
    for h in t.hosts:
        if h.name in m.place:
            out.append(_Vertex([h.name], 1 + load[h.name], m.place[h.name], h.name in gpu))
    return out


def _edges(t: TopologyPlan, vertex_of: dict[str, int]) -> dict[tuple[int, int], int]:
    """(vertex, vertex) → the rate of the links between them, Mbit/s (at least 1)."""
    out: dict[tuple[int, int], int] = {}
    for lk in t.links:
        a, b = vertex_of[lk.a.node], vertex_of[lk.b.node]
        if a != b:
            key = (min(a, b), max(a, b))
            out[key] = out.get(key, 0) + max(1, math.ceil(lk.rate_bps / 1e6))
    return out


def _metis(n_parts: int, vertices: list[_Vertex], edges: dict[tuple[int, int], int]) -> list[int]:
    """Each vertex's part, from METIS (pymetis' part_graph: recursive bisection up to 8 parts,
    k-way above; its own seed fixed)."""
    if n_parts == 1:
        return [0] * len(vertices)
    import pymetis

    adjacent: list[list[tuple[int, int]]] = [[] for _ in vertices]
    for (a, b), w in edges.items():
        adjacent[a].append((b, w))
        adjacent[b].append((a, w))
    starts, targets, weights = [0], [], []
    for row in adjacent:
        targets += [v for v, _ in row]
        weights += [w for _, w in row]
        starts.append(len(targets))
    return list(
        pymetis.part_graph(
            n_parts,
            pymetis.CSRAdjacency(starts, targets),
            vweights=[v.weight for v in vertices],
            eweights=weights or None,
            options=pymetis.Options(seed=SEED),
        ).vertex_part
    )


def _match(parts: list[int], vertices: list[_Vertex], s: Any) -> dict[int, str]:
    """The machine of each part: the matching that keeps most pins, then most GPU hosts on
    machines with GPUs, then the machines' order. Every matching is tried while there are at
    most EXHAUSTIVE of them (12 machines over 4 parts: 11,880); past that, part by part, the
    part with the most at stake first, each taking the free machine it scores best on."""
    m = s.machines
    names = m.names()
    used = sorted(set(parts))

    table = {}  # (part, machine) → (pins kept, GPU hosts on GPUs) if the part goes there
    for p in used:
        mine = [v for v, q in zip(vertices, parts, strict=True) if q == p]
        for x in names:
            table[p, x] = (sum(v.pin == x for v in mine if v.pin),
                           sum(m.gpus_of(x) > 0 for v in mine if v.gpu))  # fmt: skip

    def score(choice: tuple[str, ...]) -> tuple[int, int]:
        gains = [table[p, x] for p, x in zip(used, choice, strict=True)]
        return sum(g[0] for g in gains), sum(g[1] for g in gains)

    if math.perm(len(names), len(used)) <= EXHAUSTIVE:
        best = max(itertools.permutations(names, len(used)), key=score)  # first best wins
        return dict(zip(used, best, strict=True))
    out: dict[int, str] = {}
    free = list(names)
    stake = {p: max(table[p, x] for x in names) for p in used}
    for p in sorted(used, key=lambda q: (-stake[q][0], -stake[q][1], q)):
        pick = max(free, key=lambda x: table[p, x])  # the first best, in the machines' order
        out[p] = pick
        free.remove(pick)
    return out


def place(s: Any, t: TopologyPlan) -> MachinePlan:
    """The machine of every switch and host of `t`, and the links that cross machines.
    FieldProblem: a pin naming no node, or a GPU job's host on a machine without GPUs."""
    m = s.machines
    vertices = _vertices(s, t)
    vertex_of = {n: i for i, v in enumerate(vertices) for n in v.nodes}
    edges = _edges(t, vertex_of)
    free = [v for v in vertices if v.pin is None]
    # METIS gives up (every vertex in one part) when asked for as many parts as vertices:
    # one part fewer then, and fewer still while it returns a single part
    n_parts = max(1, min(len(m.nodes), len(vertices) - 1))
    parts = _metis(n_parts, vertices, edges)
    while n_parts > 2 and len(set(parts)) == 1:
        n_parts -= 1
        parts = _metis(n_parts, vertices, edges)
    at = _match(parts, vertices, s)
    machine_of = {}
    for v, p in zip(vertices, parts, strict=True):
        for n in v.nodes:
            machine_of[n] = v.pin or at[p]
    _check_gpus(s, t, machine_of)
    cut = tuple(
        Cut(lk.name, lk.a.node, machine_of[lk.a.node], lk.b.node, machine_of[lk.b.node],
            lk.rate_bps)
        for lk in t.links
        if machine_of[lk.a.node] != machine_of[lk.b.node]
    )  # fmt: skip
    if len(cut) >= VNI_LINKS:
        raise FieldProblem(
            ("machines",),
            f"the placement cuts {len(cut)} links, and a run's tunnels have {VNI_LINKS - 1} "
            "network identifiers; pin switches with their hosts (machines.place) to cut fewer",
        )
    if len(m.nodes) == 1:
        how = "one machine"
    elif len(vertices) == 1:
        how = "one switch with its hosts: one machine (pin hosts to spread them)"
    elif not free:
        how = "as pinned"
    else:
        how = (
            f"METIS over {len(vertices)} groups, a switch with its hosts, weighted by the "
            "links' rates and the hosts' workloads" + (", then the pins" if m.place else "")
        )
    return MachinePlan(tuple(m.names()), machine_of, cut, how)


def _check_gpus(s: Any, t: TopologyPlan, machine_of: dict[str, str]) -> None:
    m = s.machines
    _, gpu = _host_loads(s, [h.name for h in t.hosts])
    with_gpus = [x.name for x in m.nodes if x.gpus > 0]
    for h in sorted(gpu, key=lambda n: t.host(n).index):
        where = machine_of[h]
        if m.gpus_of(where) > 0:
            continue
        if not with_gpus:
            raise FieldProblem(
                ("machines", "nodes"),
                f"host {h} runs a training job with gpus and no machine has any: give the "
                "machines that have them their count, e.g. {name: gpu1, gpus: 8}",
            )
        pinned = h in m.place or t.host(h).switch in m.place
        raise FieldProblem(
            ("machines", "place", h if h in m.place else t.host(h).switch)
            if pinned
            else ("machines", "place"),
            f"host {h} runs a training job with gpus and is placed on {where}, which has none; "
            f"pin it where the GPUs are, e.g. machines.place: {{{h}: {with_gpus[0]}}}",
        )


def describe(plan: MachinePlan, time_scale: float = 1.0) -> list[str]:
    """The placement and its cut as lines of text (`testbed validate`)."""
    lines = [f"placement on {len(plan.machines)} machines, {plan.how}:"]
    for name in plan.machines:
        nodes = plan.nodes_on(name)
        lines.append(f"  {name}: {', '.join(nodes) if nodes else '(nothing)'}")
    if not plan.cut:
        lines.append("cut: no link crosses machines")
        return lines
    wire = f"; {format_rate(plan.cut_rate_bps / time_scale)} on the machines' network at " \
        f"time_scale {time_scale:g}" if time_scale != 1 else ""  # fmt: skip
    links = f"{len(plan.cut)} link{'s' if len(plan.cut) > 1 else ''}"
    lines.append(
        f"cut: {links} across machines, {format_rate(plan.cut_rate_bps)} each way in all{wire} "
        "(a VXLAN tunnel each):"
    )
    for c in plan.cut:
        lines.append(
            f"  {c.link}: {c.lower} on {c.lower_machine} ↔ {c.upper} on {c.upper_machine}, "
            f"{format_rate(c.rate_bps)}"
        )
    return lines


MARGIN = 0.8  # of what the machines' network carried in the probe, the most a cut may ask


def cut_demand(plan: MachinePlan) -> dict[tuple[str, str], int]:
    """Each pair of machines (in name order) → the bit/s, each way, of the links cut between
    them, in scenario time: every cut link carries its rate in both directions."""
    out: dict[tuple[str, str], int] = {}
    for c in plan.cut:
        pair = (min(c.lower_machine, c.upper_machine), max(c.lower_machine, c.upper_machine))
        out[pair] = out.get(pair, 0) + c.rate_bps
    return out


def admit(
    plan: MachinePlan,
    time_scale: float,
    probed: dict[tuple[str, str], float],
    margin: float = MARGIN,
) -> str | None:
    """Why the cut does not fit the machines' network (None: it fits). `probed`: bit/s that a
    few seconds of TCP carried through a tunnel between each pair of machines, each way,
    keyed (sender, receiver); the cut's demand is its links' rates over `time_scale`. Each
    pair's links must stay within `margin` of the slower direction's figure, and each
    machine's links to all others within `margin` of the best figure any of its pairs got:
    its own link to the others carries them all at once, where each pair was probed alone.
    The link budget's rule, extended to the cut: the one line names the pair or the
    machine, the figures and the whole time_scale that fits."""
    demand = cut_demand(plan)
    worst: tuple[int, str] | None = None

    def over(bps: int, carried: float, what: str) -> None:
        nonlocal worst
        k = math.ceil(bps / (margin * carried))
        if bps / time_scale > margin * carried and (worst is None or k > worst[0]):
            worst = (k, (
                f"the links cut {what} carry {format_rate_about(bps / time_scale)} each way at "
                f"time_scale {time_scale:g}, more than {margin:.0%} of the "
                f"{format_rate_about(carried)} their network carried in the probe; "
                f"time_scale: {k} fits (or place fewer links across machines: machines.place)"
            ))  # fmt: skip

    best: dict[str, float] = {}
    for (a, b), bps in sorted(demand.items()):
        carried = min(probed.get((a, b), 0.0), probed.get((b, a), 0.0))
        if carried <= 0:
            return f"machines {a} and {b}: no probe of the network between them"
        over(bps, carried, f"between machines {a} and {b}")
        for m in (a, b):
            best[m] = max(best.get(m, 0.0), carried)
    for m in sorted(best):
        pairs = [p for p in demand if m in p]
        if len(pairs) > 1:
            over(sum(demand[p] for p in pairs), best[m], f"at machine {m} (to {len(pairs)} others)")
    return None if worst is None else worst[1]


@dataclass(frozen=True)
class Half:
    """A cut link's end on one machine: the link's own veth with its far end in the
    machine's root namespace (`stitch`), stitched to a VXLAN device (`tunnel`) toward `peer`."""

    link: str
    end: str  # "a" (the lower node's) or "b" (the upper's)
    node: str  # the node on this machine
    peer: str  # the machine of the other end
    vni: int
    tunnel: str
    stitch: str


@dataclass(frozen=True)
class Part:
    """What one machine builds of a run: its nodes, the links with both ends on it, and its
    halves of the cut ones."""

    machine: str
    nodes: tuple[str, ...]
    links: tuple[str, ...]
    halves: tuple[Half, ...]


def vni(run_id: str, n: int) -> int:
    """The VXLAN network identifier of run `run_id`'s cut link number `n` (1-based): a block
    of VNI_LINKS per run, one of the 16,383 that fit in 24 bits above block 0, chosen by the
    run id, so that two runs on the same machines rarely meet (when they do, the second's
    device is refused, EEXIST, and the run fails in one line before it starts)."""
    if not 1 <= n < VNI_LINKS:
        raise ValueError(f"cut link number {n} is outside 1 … {VNI_LINKS - 1}")
    blocks = 2**24 // VNI_LINKS - 1  # block 0 left out: VNI 0 … 1023 stay the user's
    return (int(run_id, 16) % blocks + 1) * VNI_LINKS + n


def placement_record(
    plan: MachinePlan, probed: dict[tuple[str, str], float] | None = None
) -> dict[str, Any]:
    """placement.json: where every node ran, the links cut (rates each way, scenario time),
    and what the machines' network carried between each pair in admission's probe (bit/s on
    the machines' own clock)."""
    return {
        "machines": list(plan.machines),
        "how": plan.how,
        "machine_of": dict(plan.machine_of),
        "cut": [dataclasses.asdict(c) for c in plan.cut],
        "probed_bps": [
            {"from": a, "to": b, "bps": bps} for (a, b), bps in sorted((probed or {}).items())
        ],
    }


def probe_vni(run_id: str) -> int:
    """The VNI of admission's probe tunnels (network/runtime/underlay_probe.py): number 0 of the run's
    block, which no cut link takes."""
    return vni(run_id, 1) - 1


def in_scenario_time(plan: MachinePlan, time_scale: float) -> MachinePlan:
    """`plan` placed from a run's dilated twin (its rates on this machine's clock), with its
    cut links' rates back in scenario time, as admit() takes them."""
    cut = tuple(replace(c, rate_bps=round(c.rate_bps * time_scale)) for c in plan.cut)
    return replace(plan, cut=cut)


def parts(t: TopologyPlan, plan: MachinePlan) -> dict[str, Part]:
    """Each machine's part of topology `t` placed by `plan`. A cut link is numbered by its
    place in plan.cut (1-based, `t.links`' order), which names its devices and its
    VNI on both machines."""
    halves: dict[str, list[Half]] = {m: [] for m in plan.machines}
    links: dict[str, list[str]] = {m: [] for m in plan.machines}
    cut = {c.link for c in plan.cut}
    for lk in t.links:
        if lk.name not in cut:
            links[plan.machine_of[lk.a.node]].append(lk.name)
    for n, c in enumerate(plan.cut, start=1):
        names = {"vni": vni(t.run_id, n), "tunnel": name_of("tunnel", t.run_id, n),
                 "stitch": name_of("tunnel stitch", t.run_id, n)}  # fmt: skip
        halves[c.lower_machine].append(Half(c.link, "a", c.lower, c.upper_machine, **names))
        halves[c.upper_machine].append(Half(c.link, "b", c.upper, c.lower_machine, **names))
    return {
        m: Part(m, tuple(plan.nodes_on(m)), tuple(links[m]), tuple(halves[m]))
        for m in plan.machines
    }
