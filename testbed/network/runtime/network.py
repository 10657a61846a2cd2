"""The emulated network of a run, over named namespaces whatever runtime made its nodes (as
containerlab's links reach any node through a namespace handle): every link (a veth made in
the far end's namespace with its peer placed straight in the near one, interface indexes fixed
by the plan), addresses, routes, offloads off, the hosts' TCP congestion control, and the
unshaped management path; and the run's netlink sockets, one per namespace, that shaping and
the class counters use too.

Building is plain netlink (netlink.py), many requests per system call, inside each namespace
(namespaces.py).

A run over several machines (issue 76) builds one machine's part on each (`Cutting`): its
nodes, the links with both ends on it, and its half of every cut link, which is the link's
own local end made as on one machine, its peer in the machine's namespace stitched to a
VXLAN device toward the other machine (tunnel.py). The switch port and its HTB tree, or the
host's eth0 and its uplink queue, are the same devices as on one machine. Emulated machines
(`machines.emulate`) are every part built here at once, each machine a namespace."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.ethtool.ioctl import ETH_SS_FEATURES, IoctlEthtool

from testbed.core.errors import RunFailure
from testbed.core.state import RunState
from testbed.network import netlink as nl
from testbed.network.runtime.namespaces import (
    inside,
    netns_fd,
    open_ipr,
    open_netlink,
    read_proc_net,
    write_sysctl,
)
from testbed.network.shaping.plan import segments_per_packet
from testbed.network.shaping.stats import ClassReader
from testbed.network.tunnel import Tunnel
from testbed.network.tunnel import build as build_tunnel
from testbed.scenario.partition import Half, Part
from testbed.scenario.topology import (
    CLASSIC_RECOVERY,
    IF_BRIDGE,
    IF_DATA,
    IF_LO,
    IF_MGMT,
    Host,
    Link,
    Switch,
    TopologyPlan,
    link_group,
)

# Offloads that make a veth hand 64 KB super-packets to the qdisc: HTB then counts and queues
# super-packets, so rates overshoot in bursts and a 1000-packet FIFO holds 64 MB.
OFFLOADS_OFF = (
    "tx-tcp-segmentation",
    "tx-tcp6-segmentation",
    "tx-tcp-ecn-segmentation",
    "tx-tcp-mangleid-segmentation",
    "tx-generic-segmentation",
    "tx-udp-segmentation",
    "rx-gro",
    "rx-gro-list",
    "rx-udp-gro-forwarding",
)
# link_mode: fast keeps TCP's segments whole from the sender's stack to the receiver's; only
# receive-side coalescing stays off, which would make packets larger than the sender made them
RX_COALESCING = ("rx-gro", "rx-gro-list", "rx-udp-gro-forwarding")


def rps_mask(cpus: int | None = None) -> str:
    """Every CPU, as the kernel's bitmap format (hex, a comma every 32 bits): the receive
    steering mask each of the run's namespaces gives the interfaces made in it (Linux >= 6.2;
    without the key nothing changes). A veth hands a packet to the receive backlog of the CPU
    that sent it, and a shaped queue is sent from whichever CPU dequeues it (the sender's, or
    the one its timer fires on): one flow's packets then wait in two CPUs' backlogs and arrive
    out of order, which TCP reads as loss. Steering by flow hash keeps each flow on one CPU's
    backlog, in the order its queue sent it, and still spreads the flows."""
    n = cpus or os.cpu_count() or 1
    digits = f"{(1 << n) - 1:x}"
    chunks = [digits[max(0, i - 8) : i] for i in range(len(digits), 0, -8)]
    return ",".join(reversed(chunks))


class _Ethtool(IoctlEthtool):
    """pyroute2's ioctl ethtool with the feature names read once: the kernel has one list of
    them for every device, and decoding it took 0.7 ms per interface (0.36 s at 256 hosts)."""

    _strings: dict[int, list[str]] = {}  # noqa: RUF012 - one kernel, one list per set

    def get_stringset(self, set_id: int = ETH_SS_FEATURES, *args: int) -> list[str]:
        if set_id not in self._strings:
            self._strings[set_id] = super().get_stringset(set_id, *args)
        return self._strings[set_id]


def disable_offloads(
    ns: str | None, ifnames: Sequence[str], names: Sequence[str] = OFFLOADS_OFF
) -> None:
    """Through pyroute2's ioctl half of ethtool, on one socket made inside `ns`: its `Ethtool`
    also sets up a generic-netlink socket, milliseconds per call, for nothing used here."""
    with inside(ns):
        et = _Ethtool()
    try:
        for ifname in ifnames:
            et.change_ifname(ifname)
            feats = et.get_features()
            off = [
                name
                for name in names
                if name in feats and feats.is_available(name) and feats.is_active(name)
            ]
            for name in off:
                feats[name] = False
            if off:
                et.set_features(feats)
    finally:
        et.close()


@dataclass(frozen=True)
class Cutting:
    """One machine's part of a run placed over several (scenario/partition.py), and what its
    tunnels need: every machine's address on the machines' own network, the VXLAN port, and
    the namespace that reaches the others (None: this machine's root namespace; emulated
    machines in the tests are namespaces). `management`: build the root namespace's
    management path for the part's hosts (emulated machines on one host share one root)."""

    part: Part
    address: dict[str, ipaddress.IPv4Address]
    port: int
    machine_ns: str | None = None
    management: bool = True


def machine_key(c: Cutting) -> str | None:
    """The build's fds key of the namespace that holds part `c`'s stitches and tunnels: the
    root namespace's (None) on a machine of its own, else "\0" and its name."""
    return None if c.machine_ns is None else f"\0{c.machine_ns}"


class Network:
    """The emulated network of `plan` over its nodes' namespaces, whatever made them (the
    runtime's part): each link, address, route and the management path, every object recorded
    in `state` first; the netlink sockets of each namespace, and the class counters. With
    `cuts`, only those machines' parts of it (one on a machine of a run across several; every
    one with emulated machines)."""

    def __init__(self, plan: TopologyPlan, state: RunState, cuts: Sequence[Cutting] = ()) -> None:
        self.plan = plan
        self.state = state
        self.cuts = list(cuts)
        here = {n for c in cuts for n in c.part.nodes} if cuts else None
        self.switches = [sw for sw in plan.switches if here is None or sw.name in here]
        self.hosts = [h for h in plan.hosts if here is None or h.name in here]
        self.namespaces = [*(sw.netns for sw in self.switches), *(h.netns for h in self.hosts)]
        local = {name for c in cuts for name in c.part.links} if cuts else None
        self.links = [lk for lk in plan.links if local is None or lk.name in local]
        self.halves = [(half, c) for c in cuts for half in c.part.halves]
        self._iprs: dict[str | None, IPRoute] = {}
        self._netlink: dict[str, socket.socket] = {}
        self.classes = ClassReader(self.netlink)

    def netlink(self, ns: str) -> socket.socket:
        """The run's raw netlink socket in namespace `ns`, opened once (the build, the
        shaping and every counter read share it; each open enters the namespace twice)."""
        sock = self._netlink.get(ns)
        if sock is None:
            sock = self._netlink[ns] = open_netlink(ns)
        return sock

    def proc_net(self, ns: str, names: tuple[str, ...]) -> list[str]:
        """/proc/net/<name> of node `ns` for each of `names` (the kernel's TCP counters)."""
        return read_proc_net(ns, names)

    def ipr(self, ns: str | None) -> IPRoute:
        if ns not in self._iprs:
            self._iprs[ns] = open_ipr(ns)
        return self._iprs[ns]

    def close(self) -> None:
        """Every socket the runtime opened: a socket holds its namespace, which the kernel
        frees only once the last one is closed."""
        for sock in self._netlink.values():
            sock.close()
        self._netlink.clear()
        for ipr in self._iprs.values():
            with contextlib.suppress(Exception):
                ipr.close()
        self._iprs.clear()

    def _ifindex(self, ns: str | None, ifname: str) -> int:
        found = self.ipr(ns).link_lookup(ifname=ifname)
        if not found:
            raise RunFailure(f"interface {ifname} not found in {ns or 'the root namespace'}")
        return found[0]

    def build(self) -> None:
        """Every namespace's requests go out together (netlink.Batch): first what creates
        interfaces (bridges, and veths made in the switch with the peer placed straight into
        the far namespace), then, once they all exist, addresses, routes and management.
        Every namespace of the plan exists already (the runtime made its nodes)."""
        p = self.plan
        management = not self.cuts or any(c.management for c in self.cuts)
        fds: dict[str | None, int] = {}
        try:
            # what lands in the root namespace (or the machine's) is recorded before it exists
            root: list[dict[str, object]] = []
            if management:
                root.append({"kind": "link-group", "netns": None, "group": link_group(p.run_id)})
                root.append(
                    {"kind": "link", "netns": None, "name": p.mgmt_bridge, "type": "bridge"}
                )
            root += [{"kind": "link", "netns": None, "name": h.mgmt_peer, "type": "veth"}
                     for h in self.hosts]  # fmt: skip
            root += [
                {"kind": "link", "netns": c.machine_ns, "name": name, "type": kind}
                for half, c in self.halves
                for name, kind in ((half.stitch, "veth"), (half.tunnel, "vxlan"))
            ]
            self.state.record(*root)
            for ns in self.namespaces:
                fds[ns] = netns_fd(ns)
            fds[None] = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            for c in self.cuts:  # where each part's stitches go: its machine's namespace
                if c.machine_ns is not None and machine_key(c) not in fds:
                    fds[machine_key(c)] = netns_fd(c.machine_ns)
            create = {ns: nl.Batch(ns, self.netlink(ns)) for ns in self.namespaces}
            configure = {ns: nl.Batch(ns, self.netlink(ns)) for ns in self.namespaces}
            for ns in self.namespaces:
                # No IPv6: router solicitations and MLD reports would be stray traffic in the
                # class counters, and the testbed's addresses are IPv4 only.
                write_sysctl(ns, "net.ipv6.conf.all.disable_ipv6", "1",
                             "net.ipv6.conf.default.disable_ipv6", "1",
                             "net.core.rps_default_mask", rps_mask())  # fmt: skip
                create[ns].add(nl.link_up(IF_LO), "lo up")
            for sw in self.switches:
                self._build_switch(sw, create[sw.netns], configure[sw.netns])
            for lk in self.links:
                self._build_link(lk, create[lk.a.netns], create[lk.b.netns], fds)
                peer = lk.a if lk.tier == "host" else lk.b  # the end placed from afar
                configure[peer.netns].add(nl.link_up(peer.index), f"{peer.ifname} up")
            halves_of: dict[str, list[tuple[Half, Cutting]]] = {}
            for half, c in self.halves:
                halves_of.setdefault(half.link, []).append((half, c))
            for lk in p.links:
                for half, c in halves_of.get(lk.name, []):
                    end = lk.a if half.end == "a" else lk.b
                    self._build_half(lk, half, create[end.netns], fds[machine_key(c)])
                for end in (lk.a, lk.b):
                    if end.address is not None and end.netns in create:
                        configure[end.netns].add(
                            nl.address(end.index, end.address),
                            f"address {end.address} on {end.ifname}",
                        )
            for h in self.hosts:
                self._configure_host(h, configure[h.netns], fds[None])
            for r in p.routes:
                if r.netns in configure:
                    configure[r.netns].add(nl.route(r.dst, r.via), f"route to {r.dst}")
            for phase in (create, configure):
                for ns in self.namespaces:
                    phase[ns].commit()
        finally:
            for fd in set(fds.values()):
                os.close(fd)
        off = RX_COALESCING if p.fast else OFFLOADS_OFF
        by_name = {lk.name: lk for lk in p.links}
        ends = [e for lk in self.links for e in (lk.a, lk.b)] + [
            by_name[half.link].a if half.end == "a" else by_name[half.link].b
            for half, _ in self.halves
        ]
        for sw in self.switches:
            ports = [e.ifname for e in ends if e.node == sw.name]
            disable_offloads(sw.netns, ports, off)
        for c in self.cuts:
            self._stitch(c, off)
        for h in self.hosts:
            disable_offloads(h.netns, [h.data_if], off)
            if p.tcp_congestion is not None:  # per namespace; new ones copy the machine's
                write_sysctl(h.netns, "net.ipv4.tcp_congestion_control", p.tcp_congestion)
            if p.tcp_rto_min_us is not None:  # per namespace (preflight checked it exists)
                write_sysctl(h.netns, "net.ipv4.tcp_rto_min_us", str(p.tcp_rto_min_us))
            if p.tcp_rcvbuf is not None:  # per namespace since Linux 4.15
                b = str(p.tcp_rcvbuf)
                write_sysctl(h.netns, "net.ipv4.tcp_rmem", f"4096 {b} {b}",
                             "net.ipv4.tcp_moderate_rcvbuf", "0")  # fmt: skip
            if p.tcp_sndbuf is not None:  # per namespace since Linux 4.15; no autotuning
                b = str(p.tcp_sndbuf)  # past a fixed maximum
                write_sysctl(h.netns, "net.ipv4.tcp_wmem", f"4096 {b} {b}")
            if p.tcp_classic_recovery:  # per namespace (preflight checked they exist)
                write_sysctl(h.netns, *CLASSIC_RECOVERY)
            if not p.tcp_idle_restart:
                write_sysctl(h.netns, "net.ipv4.tcp_slow_start_after_idle", "0")
        if management:
            self._build_management()

    def _build_half(self, lk: Link, half: Half, batch: nl.Batch, machine_fd: int) -> None:
        """This machine's end of cut link `lk`, made as on one machine (a switch port in its
        bridge, or a host's eth0 with its uplink queue), its peer straight in the machine's
        namespace under the half's stitch name, down until stitched (_stitch)."""
        mtu = self.plan.mtu if self.plan.mtu != 1500 else None
        end = lk.a if half.end == "a" else lk.b
        host_port = lk.tier == "host" and half.end == "b"
        batch.add(
            nl.veth(
                end.ifname,
                end.index,
                half.stitch,
                0,
                machine_fd,
                IF_BRIDGE if host_port else None,
                mtu,
                gso_max_segs=self._host_gso_max_segs(lk) if lk.tier == "host" and not host_port
                else None,
            ),
            f"veth {end.ifname} to {half.stitch} (cut link {lk.name})",
        )  # fmt: skip
        if half.end == "a" and end.queue:
            batch.add(nl.ifb(end.queue, end.queue_index, mtu), f"ifb {end.queue}")
        if host_port and end.ingress_queue:
            batch.add(nl.ifb(end.ingress_queue, end.ingress_queue_index, mtu),
                      f"ifb {end.ingress_queue}")  # fmt: skip

    def _stitch(self, c: Cutting, off: Sequence[str]) -> None:
        """Each half's stitch veth up in the machine's namespace and its VXLAN device toward
        the other machine, stitched to it (tunnel.py), both with offloads off as every port's
        and IPv6 off."""
        if not c.part.halves:
            return
        ipr = self.ipr(c.machine_ns)
        local = c.address[c.part.machine]

        def ipv6_off(name: str) -> None:  # the machine's own frames stay out of the network
            write_sysctl(c.machine_ns, f"net.ipv6.conf.{name}.disable_ipv6", "1")

        for half in c.part.halves:
            (index,) = ipr.link_lookup(ifname=half.stitch)
            ipv6_off(half.stitch)
            ipr.link("set", index=index, state="up")
            disable_offloads(c.machine_ns, [half.stitch], off)
            build_tunnel(ipr, Tunnel(half.tunnel, half.vni, local, c.address[half.peer], c.port,
                                     self.plan.mtu, index), ipv6_off)  # fmt: skip
            # its receive side must not merge frames before they reach the stitch either
            disable_offloads(c.machine_ns, [half.tunnel], off)

    def _build_switch(self, sw: Switch, create: nl.Batch, configure: nl.Batch) -> None:
        """A bridge for the hosts (tor, leaf); routing on (leaf, spine). The switch is ours and
        has no netfilter rules: br_netfilter (loaded by dockerd, among others) would pass
        every bridged frame through netfilter there, so that is off."""
        pairs = [
            (f"net.bridge.bridge-nf-call-{f}", "0") for f in ("iptables", "ip6tables", "arptables")
        ]
        if sw.role != "tor":
            pairs.append(("net.ipv4.ip_forward", "1"))
            # ECMP by 5-tuple, so the flows between two hosts spread over the spines
            pairs.append(("net.ipv4.fib_multipath_hash_policy", "1"))
            # replies may come back over another spine than their request took
            pairs += [(f"net.ipv4.conf.{conf}.rp_filter", "0") for conf in ("all", "default")]
        write_sysctl(sw.netns, *(x for pair in pairs for x in pair))
        if sw.bridge is None:
            return
        create.add(nl.bridge(sw.bridge, IF_BRIDGE), f"bridge {sw.bridge}")
        if sw.gateway is not None:
            configure.add(nl.address(IF_BRIDGE, sw.gateway), f"address {sw.gateway} on {sw.bridge}")

    def _host_gso_max_segs(self, lk: Link) -> int | None:
        """The TCP segments a host's eth0 takes in one packet: one where its own ifb queues
        frames (exact), a link's worth on fast links, TCP's own batches (the kernel's
        default: None) where the queue is in the switch and eth0 cuts them (exact-gso)."""
        if self.plan.fast:
            return segments_per_packet(lk.rate_bps, self.plan.mtu)
        return None if lk.b.ingress_queue else 1

    def _build_link(self, lk: Link, a: nl.Batch, b: nl.Batch, fds: dict[str | None, int]) -> None:
        """A host link is made in its switch (the port joins the bridge as it is created),
        with the host's end placed in the host, where the ifb that holds its uplink queue is
        made too (its eth0 hands TCP one segment per packet, so that queue holds frames:
        topology.Link; on fast links up to segments_per_packet), or in the switch
        (exact-gso: shaping/uplink.py); a fabric link in its leaf."""
        mtu = self.plan.mtu if self.plan.mtu != 1500 else None  # else the kernel default
        if lk.tier == "host":
            b.add(
                nl.veth(
                    lk.b.ifname,
                    lk.b.index,
                    lk.a.ifname,
                    lk.a.index,
                    fds[lk.a.netns],
                    IF_BRIDGE,
                    mtu,
                    peer_gso_max_segs=self._host_gso_max_segs(lk),
                ),
                f"veth {lk.b.ifname} to {lk.a.node}",
            )
            if lk.a.queue:
                a.add(nl.ifb(lk.a.queue, lk.a.queue_index, mtu), f"ifb {lk.a.queue}")
            if lk.b.ingress_queue:  # exact-gso: the uplink's queue, in the switch
                b.add(
                    nl.ifb(lk.b.ingress_queue, lk.b.ingress_queue_index, mtu),
                    f"ifb {lk.b.ingress_queue}",
                )
        else:
            a.add(
                nl.veth(
                    lk.a.ifname, lk.a.index, lk.b.ifname, lk.b.index, fds[lk.b.netns], None, mtu
                ),
                f"veth {lk.a.ifname} to {lk.b.node}",
            )

    def _configure_host(self, h: Host, batch: nl.Batch, root_fd: int) -> None:
        """Its data address and route, and its management veth, made here with the peer in
        the root namespace (where the kernel picks the peer's index)."""
        data = ipaddress.IPv4Interface(f"{h.data_ip}/{h.prefixlen}")
        batch.add(nl.address(IF_DATA, data), f"address {h.data_ip} on {h.data_if}")
        mss = self.plan.tcp_advmss
        if mss is not None:
            batch.add(nl.connected_route(data, IF_DATA, mss), f"advmss {mss} on {data.network}")
        if h.gateway is not None:  # the data prefix only: no default route, nothing leaves
            batch.add(
                nl.route(self.plan.data_prefix, (h.gateway,), mss), "route to the data prefix"
            )
        batch.add(nl.veth(h.mgmt_if, IF_MGMT, h.mgmt_peer, 0, root_fd), f"veth {h.mgmt_if}")
        mgmt = ipaddress.IPv4Interface(f"{h.mgmt_ip}/{self.plan.mgmt_prefix.prefixlen}")
        batch.add(nl.address(IF_MGMT, mgmt), f"address {h.mgmt_ip} on {h.mgmt_if}")

    def _build_management(self) -> None:
        """Root-namespace bridge with one isolated port per host: root reaches every host,
        hosts cannot reach each other this way, and nothing here is shaped. The hosts made
        the veths (build); here their root ends join the bridge, by name."""
        p = self.plan
        root = nl.Batch(None)
        root.add(nl.bridge(p.mgmt_bridge, 0, link_group(p.run_id)), f"bridge {p.mgmt_bridge}")
        root.commit()
        write_sysctl(None, f"net.ipv6.conf.{p.mgmt_bridge}.disable_ipv6", "1")
        mbr = self._ifindex(None, p.mgmt_bridge)
        root.add(
            nl.address(
                mbr, ipaddress.IPv4Interface(f"{p.mgmt_bridge_ip}/{p.mgmt_prefix.prefixlen}")
            ),
            f"address {p.mgmt_bridge_ip} on {p.mgmt_bridge}",
        )
        write_sysctl(
            None,
            *(x for h in self.hosts for x in (f"net.ipv6.conf.{h.mgmt_peer}.disable_ipv6", "1")),
        )
        for h in self.hosts:
            root.add(
                nl.enslave(h.mgmt_peer, mbr, link_group(p.run_id)),
                f"{h.mgmt_peer} into {p.mgmt_bridge}",
            )
            root.add(nl.isolate_port(h.mgmt_peer), f"isolating {h.mgmt_peer}")
        root.commit()
