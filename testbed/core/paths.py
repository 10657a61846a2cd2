"""The links a workload's traffic crosses, from the scenario's topology alone (no plan, no
kernel): what the event model, R_cp_to_nw and the load on the busiest link are taken against.

On one switch every path is two host links. On a leaf-spine, hosts h1..h(per) hang off leaf1,
the next `per` off leaf2, and so on; traffic between two leaves goes up one leaf–spine link
and down another (ECMP picks the spine per flow), so a path that leaves its leaf is held to
min(host link, fabric link). A ring (hosts in rank order, each sending to the next) crosses
the fabric only where consecutive ranks sit on different leaves; each such step runs on its
own fabric links (one up, one down, different leaves' in either direction), so the ring's
bottleneck is the slowest step."""

from __future__ import annotations

from typing import Any


def leaf_of(topology: Any, host: str) -> int:
    """The 1-based leaf a host hangs off (1 on a single switch)."""
    if topology.kind != "leaf-spine":
        return 1
    index = int(host.removeprefix("h"))
    return (index - 1) // topology.hosts_per_leaf + 1


def path_rate(topology: Any, src: str, dst: str) -> int:
    """The slowest link between two hosts (bits/s)."""
    rate = topology.link_rate
    if leaf_of(topology, src) != leaf_of(topology, dst):
        rate = min(rate, topology.fabric_link_rate)
    return rate


def ring_bottleneck(topology: Any, hosts: list[str]) -> int:
    """The rate a ring over `hosts` (in rank order) runs at: its slowest step. A step that
    leaves its leaf is held to one spine link (a flow takes one), and to its share of the
    leaf's spine links when other steps of the ring leave (or enter) the same leaf."""
    if len(hosts) < 2:
        return topology.link_rate
    steps = [(a, hosts[(i + 1) % len(hosts)]) for i, a in enumerate(hosts)]
    up: dict[int, int] = {}
    down: dict[int, int] = {}
    for a, b in steps:
        la, lb = leaf_of(topology, a), leaf_of(topology, b)
        if la != lb:
            up[la] = up.get(la, 0) + 1
            down[lb] = down.get(lb, 0) + 1
    rates = []
    for a, b in steps:
        rate = path_rate(topology, a, b)
        la, lb = leaf_of(topology, a), leaf_of(topology, b)
        if la != lb:
            leaf = topology.fabric_link_rate * topology.spines
            rate = min(rate, leaf / up[la], leaf / down[lb])
        rates.append(rate)
    return int(min(rates))


def fabric_load_per_host_load(topology: Any, hosts: list[str]) -> float:
    """The busiest leaf–spine link's load (bits/s) per bit/s each host sends to uniformly
    random other hosts: a leaf with k of the n hosts sends k (n − k) / (n − 1) of a host's
    load out (and takes as much in), spread over the spines (ECMP)."""
    n = len(hosts)
    if topology.kind != "leaf-spine" or n < 2:
        return 0.0
    per_leaf: dict[int, int] = {}
    for h in hosts:
        per_leaf[leaf_of(topology, h)] = per_leaf.get(leaf_of(topology, h), 0) + 1
    return max(k * (n - k) / (n - 1) for k in per_leaf.values()) / topology.spines


def link_seconds(topology: Any, transfers: list[tuple[str, str, float]]) -> dict[str, float]:
    """How long each link is busy carrying `transfers` ((src, dst, bytes), at its wire rate):
    "h3 up" / "h3 down" for host links; on a leaf-spine "leaf2 up" / "leaf2 down" for the
    leaf's links to the spines together (ECMP spreads the flows over them: spines × fabric
    rate). The largest is the transfers' time on this topology, whatever the scheduling."""
    busy: dict[str, float] = {}

    def add(link: str, nbytes: float, rate: float) -> None:
        busy[link] = busy.get(link, 0.0) + nbytes * 8 / rate

    for src, dst, nbytes in transfers:
        add(f"{src} up", nbytes, topology.link_rate)
        add(f"{dst} down", nbytes, topology.link_rate)
        a, b = leaf_of(topology, src), leaf_of(topology, dst)
        if a != b:
            fabric = topology.fabric_link_rate * topology.spines
            add(f"leaf{a} up", nbytes, fabric)
            add(f"leaf{b} down", nbytes, fabric)
    return busy


def ack_efficiency(mtu: int = 1500, segment: int | None = None) -> float:
    """Payload per byte on the wire for TCP with timestamps (40 + 12 bytes of headers, 14 of
    Ethernet) and one 66-byte delayed ACK per two frames sharing the uplink; segments of the
    MTU's payload, or of `segment` bytes (topology.tcp_segment)."""
    seg = segment or mtu - 52
    return 2 * seg / (2 * (seg + 66) + 66)
