"""A link cut by a run's placement over several machines (scenario/partition.py): each half
is a VXLAN device on its machine, stitched to the local end of the link's veth, so the two
nodes see one cable and the queues on their sides (the switch port's HTB tree, a host's
uplink ifb) stay exactly where they are on one machine. The tunnel carries only what those
queues already shaped.

The stitch is containerlab's `vxlan-stitch` (links/link_vxlan_stitched.go): on the ingress of
each of the two devices a match-all filter whose mirred action *redirects* the frame to the
other's egress. Redirect, not mirror: a mirror-and-pass duplicated every frame in
containerlab until it moved to redirect (srl-labs/containerlab PR #3083). The VXLAN device
has one remote (its peer machine), learning off, a UDP port of the scenario's (not 4789,
Docker's overlay), and the emulated link's MTU, which must fit under the machines' own less
50 bytes (the scenario's check refuses one that does not: schema.py, `_underlay`).

Pure data (`Tunnel`) and one function that builds it through pyroute2, in the namespace
given (the machine's root namespace in a run; a namespace per emulated machine in the tests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Address
from typing import Any

from testbed.network.shaping.apply import tc_call
from testbed.network.shaping.plan import Clsact, Redirect


@dataclass(frozen=True)
class Tunnel:
    """One machine's half of a cut link."""

    name: str  # the VXLAN device (at most 15 characters)
    vni: int  # the link's VXLAN network identifier, the same at both halves
    local: IPv4Address  # this machine's address on the machines' network
    remote: IPv4Address  # the peer machine's
    port: int  # UDP, both ends (machines.vxlan_port)
    mtu: int  # the emulated link's (topology.mtu)
    stitch: int  # the interface index of the link's local veth end, in the same namespace


def build(ipr: Any, t: Tunnel, prepare: Callable[[str], None] | None = None) -> int:
    """The VXLAN device of `t`, up, and the stitch both ways; its interface index. `ipr`: a
    pyroute2 IPRoute (or NetNS) in the namespace that holds the link's local end and reaches
    the peer machine. `prepare(name)` runs while the device is still down (a run turns its
    IPv6 off there: a machine's root namespace keeps IPv6 on, and its router solicitations
    would be frames in the emulated network)."""
    ipr.link(
        "add",
        ifname=t.name,
        kind="vxlan",
        vxlan_id=t.vni,
        vxlan_local=str(t.local),
        vxlan_group=str(t.remote),  # a unicast address here: the one remote
        vxlan_port=t.port,
        vxlan_learning=0,
        mtu=t.mtu,
    )
    (index,) = ipr.link_lookup(ifname=t.name)
    if prepare is not None:
        prepare(t.name)
    ipr.link("set", index=index, state="up")
    for src, dst in ((t.stitch, index), (index, t.stitch)):
        tc_call(ipr, src, Clsact())
        tc_call(ipr, src, Redirect(dst, hook="ingress"))
    return int(index)
