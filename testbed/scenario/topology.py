"""The node/link graph and address plan of one run, computed without touching the kernel.

A topology is nodes (hosts and switches, each a network namespace) and links between them,
every link shaped in both directions from the same plan code. Two generators make the graph:

single-tor: one L2 switch (a bridge) with N hosts, the thesis' layout:

    root namespace                switch namespace tb-<id>-sw        host namespace tb-<id>-h<i>
    tb<id>  (mgmt bridge) ─ tb<id>m<i> ══════════════════════════════ mgmt0   (unshaped)
                                  br0 ─ h<i>  ════════════════════════ eth0    (shaped both ways)

leaf-spine: L leaves and S spines, each switch a namespace that routes (L3). Several spines
on L2 bridges would loop, so every leaf has a subnet of its own (its hosts on a bridge with
the leaf's gateway address), every leaf–spine link is a /31, leaves reach other leaves by
ECMP over all spines (5-tuple hash), and spines have one route per leaf subnet:

    tb-<id>-leaf<i>: br0 (gateway) ─ h<k> ══ eth0 of host h<k>     host link, tier "host"
                     s<j> ══════════════════ l<i> of tb-<id>-spine<j>   fabric link, tier "fabric"

Links are named (the `node` label of summaries and metrics) after the host for host links,
so the thesis' per-host uplink/downlink view stays, and `leaf<i>-spine<j>` for fabric links;
"up" is always away from the hosts. The data network has no interface, address or route in
the root namespace, and no namespace has a default route: traffic cannot leave the testbed.
The management bridge is the only thing in the root namespace; its ports are isolated, so
hosts cannot reach each other through it.

Every interface in a run's namespaces has its index fixed here (the runtime creates it with
that index, see netlink.py), so building, shaping and reading counters never look one up.
The indexes sit above what a fresh namespace may already hold (lo is 1; where their modules
are loaded, fallback tunnel devices take the next few).
"""

from __future__ import annotations

import ipaddress
import math
import re
import secrets
import string
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from testbed.core.addressing import leaf_block
from testbed.scenario.schema import TCP_MACHINE, TCP_TIMESTAMP_OPTION

if TYPE_CHECKING:
    from testbed.scenario.schema import Scenario

RUN_ID_LEN = 6
Direction = Literal["up", "down"]
Tier = Literal["host", "fabric"]
Role = Literal["tor", "leaf", "spine"]

# topology.tcp_recovery: classic, the sysctl pairs every host gets: no RACK loss detection, no
# early retransmit or tail-loss probe, no F-RTO, no duplicate SACKs (so no undo on them)
CLASSIC_RECOVERY = (
    "net.ipv4.tcp_recovery", "0", "net.ipv4.tcp_early_retrans", "0",
    "net.ipv4.tcp_frto", "0", "net.ipv4.tcp_dsack", "0",
)  # fmt: skip

IF_LO = 1
IF_BRIDGE = 100  # a switch's br0
IF_DATA = 100  # a host's eth0
IF_MGMT = 101  # a host's mgmt0
IF_FABRIC = 200  # + the far switch's number: a leaf's s<j>, a spine's l<i>
IF_PORT = 1000  # + the host's place on its switch: the switch end of a host link
IF_UP_QUEUE = 102  # a host's eth0-up: the ifb that holds its uplink's queue
IF_PORT_QUEUE = 2000  # + the host's place: link_mode exact-gso's uplink ifb, in the switch


def new_run_id() -> str:
    return secrets.token_hex(RUN_ID_LEN // 2)


def valid_run_id(text: str) -> bool:
    return len(text) == RUN_ID_LEN and all(c in "0123456789abcdef" for c in text)


@dataclass(frozen=True)
class Host:
    name: str  # h1, h2, ... (what users write in scenarios)
    index: int  # 1-based
    netns: str
    data_if: str  # in the host namespace
    data_ip: ipaddress.IPv4Address
    mgmt_if: str  # in the host namespace
    mgmt_ip: ipaddress.IPv4Address
    mgmt_peer: str  # root-namespace end of the management veth
    switch_port: str  # switch-namespace end of the data veth
    switch: str = "sw"  # the switch it hangs off (its namespace: Switch.netns)
    prefixlen: int = 24  # of its data subnet
    gateway: ipaddress.IPv4Address | None = None  # routed topologies: its leaf's address


@dataclass(frozen=True)
class Switch:
    name: str  # sw, leaf1, spine1
    netns: str
    role: Role
    bridge: str | None = None  # where hosts attach (tor, leaf)
    gateway: ipaddress.IPv4Interface | None = None  # a leaf's address on its bridge


@dataclass(frozen=True)
class Port:
    """One end of a link: an interface in a node's namespace."""

    node: str
    netns: str
    ifname: str
    index: int  # its interface index in `netns`
    address: ipaddress.IPv4Interface | None = None  # fabric /31s; host ends are set by Host
    # An ifb in the same namespace that holds this port's egress queue ("": the port's own
    # queue). A host's end of its link has one: see Link.
    queue: str = ""
    queue_index: int = 0
    # link_mode exact-gso: an ifb in the same namespace that holds the queue of what arrives
    # at this port (a host's uplink, queued in its switch instead; shaping/uplink.py)
    ingress_queue: str = ""
    ingress_queue_index: int = 0


@dataclass(frozen=True)
class Link:
    """A cable between a lower node (host, leaf) and an upper one (switch, spine).

    A host link's uplink queue sits on an ifb in the host (eth0-up), fed by a redirect from
    eth0's egress (shaping/plan.py), and eth0 hands TCP one segment per packet
    (gso_max_segs 1). The redirect passes on a clone that belongs to no socket, so every
    queue after it fills and drops as a switch port's does. Queued on the veths themselves,
    every packet stayed charged to its sending socket until the far host had it (a veth
    keeps a packet's socket across namespaces since Linux 5.8, and a bridge forwards it as
    it is), and TCP Small Queues then held each sender to about a millisecond of its rate in
    all the queues of its path together: none filled, nothing was dropped, and three senders
    into one 100 Mbit/s downlink kept 29.6 / 63.2 / 2.8 Mbit/s for 10 s. And the uplink
    queue held TCP's segmentation batches (46 KB each at 100 Mbit/s), not packets, since
    segmentation happens after the qdisc (docs/network.md has the measurements).
    In link_mode exact-gso the uplink's ifb is in the switch instead (Port.ingress_queue),
    fed by a clone of each frame that arrives at the host's port (shaping/uplink.py).
    """

    name: str  # label in summaries and metrics: the host's name, or leaf<i>-spine<j>
    a: Port  # lower end: its egress is the "up" direction
    b: Port  # upper end: its egress is the "down" direction
    rate_bps: int
    tier: Tier


@dataclass(frozen=True)
class Route:
    netns: str
    dst: ipaddress.IPv4Network
    via: tuple[ipaddress.IPv4Address, ...]  # more than one: ECMP


@dataclass(frozen=True)
class LinkEnd:
    """One shaped direction: the egress queue of `ifname` in `netns` (its qdiscs, classes
    and counters)."""

    node: str  # the link's name
    direction: Direction
    netns: str
    ifname: str
    index: int = 0  # the interface's index in `netns` (0: look it up by name)
    src: str = ""  # the node that sends into this queue
    dst: str = ""  # the node at the far end
    tier: Tier = "host"
    rate_bps: int | None = None  # None: the scenario's link_rate
    # `ifname` is an ifb fed by a redirect from the egress of this interface ("": `ifname`
    # is the link's own interface), or from its ingress (port_ingress: the far end's port)
    port: str = ""
    port_index: int = 0
    # the link's other end, where every packet this queue sends arrives next (a veth pair),
    # and whether that interface has a clsact qdisc of its own (its ifb's redirect)
    far_netns: str = ""
    far_ifname: str = ""
    far_index: int = 0
    far_clsact: bool = False
    port_ingress: bool = False  # link_mode exact-gso's uplink (shaping/uplink.py)


@dataclass(frozen=True)
class TopologyPlan:
    run_id: str
    kind: str
    switches: tuple[Switch, ...]
    links: tuple[Link, ...]
    routes: tuple[Route, ...]
    mgmt_bridge: str  # in the root namespace
    mgmt_bridge_ip: ipaddress.IPv4Address
    data_prefix: ipaddress.IPv4Network
    mgmt_prefix: ipaddress.IPv4Network
    hosts: tuple[Host, ...]
    hosts_per_switch: int
    tcp_congestion: str | None = None  # set in every host; None: the machine's default
    tcp_rto_min_us: int | None = None  # set in every host; None: the kernel's (200 ms)
    tcp_rto_initial_us: int | None = None  # every host's sockets (sock_ops); None: 1 s
    tcp_rcvbuf: int | None = None  # bytes, fixed in every host; None: the machine's autotuning
    tcp_sndbuf: int | None = None  # bytes, fixed in every host; None: the machine's autotuning
    tcp_advmss: int | None = None  # the MSS every host advertises on its data routes; None: MTU's
    tcp_classic_recovery: bool = False  # topology.tcp_recovery: classic
    tcp_idle_restart: bool = True  # the kernel's default
    mtu: int = 1500  # every data link; the management network keeps 1500
    fast: bool = False  # topology.link_mode: fast (offloads on, TCP's segments stay whole)

    @property
    def namespaces(self) -> list[str]:
        return [*self.switch_namespaces, *(h.netns for h in self.hosts)]

    @property
    def switch_namespaces(self) -> list[str]:
        return [sw.netns for sw in self.switches]

    @property
    def routed(self) -> bool:
        return any(sw.role != "tor" for sw in self.switches)

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def switch(self, name: str) -> Switch:
        for sw in self.switches:
            if sw.name == name:
                return sw
        raise KeyError(name)

    def link_ends(self) -> list[LinkEnd]:
        """Both directions of every link. A host link's uplink is the host's eth0, queued on
        its eth0-up; its downlink is the switch port, where traffic from several senders
        meets. A fabric link's up direction is the leaf's port toward the spine."""
        ends: list[LinkEnd] = []
        for lk in self.links:
            if lk.b.ingress_queue:  # link_mode exact-gso: the uplink queued in the switch
                b = lk.b
                ends.append(
                    LinkEnd(lk.name, "up", b.netns, b.ingress_queue, b.ingress_queue_index,
                            lk.a.node, b.node, lk.tier, lk.rate_bps, b.ifname, b.index,
                            b.netns, b.ifname, b.index, True, port_ingress=True)
                )  # fmt: skip
                ends.append(
                    LinkEnd(lk.name, "down", b.netns, b.ifname, b.index, b.node, lk.a.node,
                            lk.tier, lk.rate_bps, "", 0, lk.a.netns, lk.a.ifname, lk.a.index,
                            bool(lk.a.queue))
                )  # fmt: skip
                continue
            for direction, near, far in (("up", lk.a, lk.b), ("down", lk.b, lk.a)):
                queue = (near.queue, near.queue_index) if near.queue else (near.ifname, near.index)
                port = (near.ifname, near.index) if near.queue else ("", 0)
                ends.append(
                    LinkEnd(lk.name, direction, near.netns, *queue, near.node, far.node, lk.tier,
                            lk.rate_bps, *port, far.netns, far.ifname, far.index,
                            bool(far.queue))
                )  # fmt: skip
        return ends


# Link groups (IFLA_GROUP, a u32; 0 is every interface's default) of the run's interfaces in
# the root namespace: this base plus the run id's 24 bits, a range nothing else on a machine
# is known to use. Teardown deletes the group in one request (see netns.teardown).
LINK_GROUP_BASE = 0x7B000000


def link_group(run_id: str) -> int:
    return LINK_GROUP_BASE + int(run_id, 16)


# Every name testbed gives the kernel, spelt here only: the plans below, preflight's kernel
# probe and the docker runtime take them from here, and `testbed down` knows what a run left
# without its state file by them (`parse_name`). {id} is the run id, {n} a host's, leaf's or
# spine's number, {pid} a process id. What else a run makes (data veths, ifbs, qdiscs, a
# switch's bridge) lives inside these namespaces and goes with them.
NETNS_NAMES = {
    "switch": "tb-{id}-sw",  # single-tor's switch
    "host": "tb-{id}-h{n}",  # a host (under docker, its container is named so too)
    "leaf": "tb-{id}-leaf{n}",
    "spine": "tb-{id}-spine{n}",
    "probe": "tb-{id}-probe",  # preflight's kernel probe, while it runs
    "lone probe": "tb-probe-{pid}",  # the kernel probe of a process outside any run
    # machines.emulate: each machine of the placement a namespace, joined by an underlay
    "emulated machine": "tb-{id}-m{n}",
    "underlay": "tb-{id}-underlay",
}
ROOT_LINK_NAMES = {  # interfaces in the root namespace
    "management bridge": "tb{id}",
    "management veth": "tb{id}m{n}",  # a host's management veth, its root end
    # a link cut across machines (scenario/partition.py), {n} its number: its VXLAN device
    # and the root end of the veth stitched to it (network/tunnel.py)
    "tunnel": "tb{id}v{n}",
    "tunnel stitch": "tb{id}c{n}",
}
RUN_PREFIX = "tb-{id}-"  # the start of every namespace of a run (tests/unit/test_topology.py)
_TEMPLATES = {**NETNS_NAMES, **ROOT_LINK_NAMES}
_FIELDS = {"id": f"[0-9a-f]{{{RUN_ID_LEN}}}", "n": "[0-9]+", "pid": "[0-9]+"}


def name_of(role: str, run_id: str, n: int | None = None) -> str:
    """The name of run `run_id`'s object `role` (a key of NETNS_NAMES or ROOT_LINK_NAMES)."""
    return _TEMPLATES[role].format(id=run_id, n=n)


def _pattern(template: str) -> re.Pattern[str]:
    out = ""
    for literal, field, _, _ in string.Formatter().parse(template):
        out += re.escape(literal)
        if field is not None:
            out += f"(?P<{field}>{_FIELDS[field]})"
    return re.compile(out)


_PATTERNS = {
    kind: [(role, _pattern(t)) for role, t in names.items()]
    for kind, names in (("netns", NETNS_NAMES), ("link", ROOT_LINK_NAMES))
}


def parse_name(kind: Literal["netns", "link"], name: str) -> tuple[str, dict[str, str]] | None:
    """The role and fields ({"id": run id, ...}) of a namespace's or a root-namespace
    interface's name that testbed gives, or None when the name is not one of testbed's."""
    for role, pattern in _PATTERNS[kind]:
        if m := pattern.fullmatch(name):
            return role, m.groupdict()
    return None


def names_for(run_id: str) -> dict[str, str]:
    """What a new run's id must not find taken (orchestrator.check_run_id)."""
    return {
        "prefix": RUN_PREFIX.format(id=run_id),
        "switch_ns": name_of("switch", run_id),
        "mgmt_bridge": name_of("management bridge", run_id),
    }


def _host(
    run_id: str,
    i: int,
    data_ip: ipaddress.IPv4Address,
    mgmt_ip: ipaddress.IPv4Address,
    **kw: Any,
) -> Host:
    return Host(
        name=f"h{i}",
        index=i,
        netns=name_of("host", run_id, i),
        data_if="eth0",
        data_ip=data_ip,
        mgmt_if="mgmt0",
        mgmt_ip=mgmt_ip,
        mgmt_peer=name_of("management veth", run_id, i),
        switch_port=f"h{i}",
        **kw,
    )


def _host_link(h: Host, sw: Switch, place: int, rate: int) -> Link:
    """`place`: the host's 1-based position on its switch."""
    return Link(
        h.name,
        Port(h.name, h.netns, h.data_if, IF_DATA, queue=f"{h.data_if}-up", queue_index=IF_UP_QUEUE),
        Port(sw.name, sw.netns, h.switch_port, IF_PORT + place),
        rate,
        "host",
    )


def single_tor(s: Scenario, run_id: str) -> TopologyPlan:
    t = s.topology
    data = list(t.prefix.hosts())
    mgmt = list(t.management_prefix.hosts())
    sw = Switch("sw", name_of("switch", run_id), "tor", bridge="br0")
    hosts = tuple(
        # mgmt[0] is the root namespace's end
        _host(run_id, i, data[i - 1], mgmt[i], prefixlen=t.prefix.prefixlen)
        for i in range(1, t.hosts + 1)
    )
    return TopologyPlan(
        run_id=run_id,
        kind="single-tor",
        switches=(sw,),
        links=tuple(_host_link(h, sw, h.index, t.link_rate) for h in hosts),
        routes=(),
        mgmt_bridge=name_of("management bridge", run_id),
        mgmt_bridge_ip=mgmt[0],
        data_prefix=t.prefix,
        mgmt_prefix=t.management_prefix,
        hosts=hosts,
        hosts_per_switch=t.hosts,
    )


def class_address(t: TopologyPlan, h: Host, cls: int) -> ipaddress.IPv4Address:
    """Host `h`'s data address for the traffic of tc class number `cls` (its place in the
    profile, highest first) of a job whose transfers use several classes, each over
    connections of its own address (training/policies/per_transfer.py): the data prefix after the
    hosts' own addresses, one block of a host each per class (addressing.with_class_addresses
    says the prefix has room). Single ToR only: its switch bridges the whole prefix, so any
    address of it reaches the host; a leaf routes only its hosts' own."""
    n = len(t.hosts)
    return t.data_prefix.network_address + 1 + (1 + cls) * n + (h.index - 1)


def _fabric(
    leaves: list[Switch],
    spines: tuple[Switch, ...],
    subnets: list[ipaddress.IPv4Network],
    first: int,
    rate: int,
    prefix: ipaddress.IPv4Network,
) -> tuple[list[Link], list[Route]]:
    """Every leaf to every spine on a /31 from address `first` on, and the routes: a spine
    reaches each leaf's subnet through that leaf; a leaf reaches the whole data prefix over
    every spine (ECMP)."""
    links: list[Link] = []
    routes: list[Route] = []
    n_spines = len(spines)
    for i, leaf in enumerate(leaves, start=1):
        nexthops = []
        for j, spine in enumerate(spines, start=1):
            k = (i - 1) * n_spines + (j - 1)
            lo = ipaddress.IPv4Address(first + 2 * k)
            hi = lo + 1
            links.append(
                Link(
                    f"{leaf.name}-{spine.name}",
                    Port(leaf.name, leaf.netns, f"s{j}", IF_FABRIC + j,
                         ipaddress.IPv4Interface(f"{lo}/31")),
                    Port(spine.name, spine.netns, f"l{i}", IF_FABRIC + i,
                         ipaddress.IPv4Interface(f"{hi}/31")),
                    rate,
                    "fabric",
                )
            )  # fmt: skip
            nexthops.append(hi)
            routes.append(Route(spine.netns, subnets[i - 1], (lo,)))
        # the whole data prefix over every spine; the leaf's own subnet and its /31s are
        # connected routes, more specific, so only other leaves' traffic takes this one
        routes.append(Route(leaf.netns, prefix, tuple(nexthops)))
    return links, routes


def leaf_spine(s: Scenario, run_id: str) -> TopologyPlan:
    t = s.topology
    L, S, per = t.leaves, t.spines, t.hosts_per_leaf
    assert L is not None and S is not None and per is not None  # the schema fills them
    fabric_rate = t.fabric_link_rate
    mgmt = list(t.management_prefix.hosts())
    base = int(t.prefix.network_address)
    block = leaf_block(per)
    block_len = 32 - int(math.log2(block))
    spines = tuple(
        Switch(f"spine{j}", name_of("spine", run_id, j), "spine") for j in range(1, S + 1)
    )
    leaves: list[Switch] = []
    hosts: list[Host] = []
    links: list[Link] = []
    subnets: list[ipaddress.IPv4Network] = []
    for i in range(1, L + 1):
        subnet = ipaddress.IPv4Network((base + (i - 1) * block, block_len))
        subnets.append(subnet)
        gw = subnet.network_address + 1
        leaf = Switch(
            f"leaf{i}",
            name_of("leaf", run_id, i),
            "leaf",
            bridge="br0",
            gateway=ipaddress.IPv4Interface(f"{gw}/{block_len}"),
        )
        leaves.append(leaf)
        for k in range(per):
            idx = (i - 1) * per + k + 1
            h = _host(
                run_id,
                idx,
                gw + 1 + k,
                mgmt[idx],
                switch=leaf.name,
                prefixlen=block_len,
                gateway=gw,
            )
            hosts.append(h)
            links.append(_host_link(h, leaf, k + 1, t.link_rate))
    fab_links, routes = _fabric(leaves, spines, subnets, base + L * block, fabric_rate, t.prefix)
    links += fab_links
    return TopologyPlan(
        run_id=run_id,
        kind="leaf-spine",
        switches=(*leaves, *spines),
        links=tuple(links),
        routes=tuple(routes),
        mgmt_bridge=name_of("management bridge", run_id),
        mgmt_bridge_ip=mgmt[0],
        data_prefix=t.prefix,
        mgmt_prefix=t.management_prefix,
        hosts=tuple(hosts),
        hosts_per_switch=per,
    )


def uplinks_at_switch(links: tuple[Link, ...]) -> tuple[Link, ...]:
    """link_mode exact-gso: each host link's uplink queue moves from an ifb in the host
    (eth0-up) to one in its switch (h<i>-up), fed from the host's port there
    (shaping/uplink.py)."""
    return tuple(
        replace(
            lk,
            a=replace(lk.a, queue="", queue_index=0),
            b=replace(
                lk.b,
                ingress_queue=f"{lk.b.ifname}-up",
                ingress_queue_index=IF_PORT_QUEUE + lk.b.index - IF_PORT,
            ),
        )
        if lk.tier == "host"
        else lk
        for lk in links
    )


def build_plan(s: Scenario, run_id: str) -> TopologyPlan:
    """The graph of the scenario's topology kind."""
    plan = leaf_spine(s, run_id) if s.topology.kind == "leaf-spine" else single_tor(s, run_id)
    if s.topology.link_mode == "exact-gso":
        plan = replace(plan, links=uplinks_at_switch(plan.links))
    tcp = None if s.topology.tcp == TCP_MACHINE else s.topology.tcp
    rto = s.topology.tcp_rto_min
    return replace(
        plan,
        tcp_congestion=tcp,
        mtu=s.topology.mtu,
        fast=s.topology.link_mode == "fast",
        tcp_rto_min_us=round(rto * 1e6) if rto is not None else None,
        tcp_rto_initial_us=round(init * 1e6) if (init := s.topology.tcp_rto_initial) else None,
        tcp_rcvbuf=s.topology.tcp_rcvbuf,
        tcp_sndbuf=s.topology.tcp_sndbuf,
        tcp_advmss=seg + TCP_TIMESTAMP_OPTION if (seg := s.topology.tcp_segment) else None,
        tcp_classic_recovery=s.topology.tcp_recovery == "classic",
        tcp_idle_restart=s.topology.tcp_idle_restart,
    )
