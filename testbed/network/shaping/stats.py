"""Read per-class counters back through netlink (what `tc -s class show` prints)."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from testbed.network import netlink as nl
from testbed.network.shaping.plan import InterfacePlan, burst_bytes

Counters = dict[
    str, dict[str, int]
]  # class name → {bytes, packets, drops, backlog, qlen, overlimits}

RTM_NEWQDISC = 36
RTM_GETQDISC = 38
RTM_NEWTCLASS = 40
RTM_GETTCLASS = 42
TC_H_ROOT = 0xFFFFFFFF
NLM_F_DUMP = 0x300
TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
TCA_STATS2 = 7
TCA_STATS_BASIC = 1
TCA_STATS_QUEUE = 3
BASIC = struct.Struct("=QI")  # gnet_stats_basic: bytes, packets
QUEUE = struct.Struct("=IIIII")  # gnet_stats_queue: qlen, backlog, drops, requeues, overlimits


def _classid(handle: int) -> str:
    return f"{handle >> 16:x}:{handle & 0xFFFF:x}"


def class_counters(ipr: IPRoute, plan: InterfacePlan) -> Counters:
    """{class name: {bytes, packets, drops, backlog, qlen, overlimits}} for the plan's classes,
    through pyroute2 (the reference for ClassReader).

    HTB counts a leaf's drops on its class, so class statistics alone are complete.
    """
    index = plan.end.index
    if not index:
        found = ipr.link_lookup(ifname=plan.end.ifname)
        if not found:
            return {}
        index = found[0]
    try:
        by_id: dict[str, Any] = {_classid(m["handle"]): m for m in ipr.get_classes(index=index)}
    except NetlinkError:  # the interface went with its node (a container stopped)
        return {}
    out: Counters = {}
    for name, classid in plan.classes.items():
        m = by_id.get(classid)
        if m is None:
            continue
        basic = m.get_nested("TCA_STATS2", "TCA_STATS_BASIC") or {}
        queue = m.get_nested("TCA_STATS2", "TCA_STATS_QUEUE") or {}
        out[name] = {
            "bytes": int(basic.get("bytes", 0)),
            "packets": int(basic.get("packets", 0)),
            "drops": int(queue.get("drops", 0)),
            "backlog": int(queue.get("backlog", 0)),
            "qlen": int(queue.get("qlen", 0)),
            "overlimits": int(queue.get("overlimits", 0)),
        }
    return out


class ClassReader:
    """The same counters as class_counters, read often and for hundreds of interfaces: one
    class dump per interface on a plain netlink socket per namespace, and only the two
    statistics structures parsed (pyroute2 decodes every attribute of every class, about
    0.3 ms per class; a snapshot of 512 link directions took 1.3 s)."""

    def __init__(self, sockets: Callable[[str], socket.socket]) -> None:
        """`sockets`: the runtime's netlink socket of each node (the runtime closes them)."""
        self._sockets = sockets

    def read(self, plan: InterfacePlan) -> Counters:
        by_id = dump_classes(self._sockets(plan.end.netns), plan.end.index)
        return {name: by_id[cid] for name, cid in plan.classes.items() if cid in by_id}

    def shared_limit_drops(self, plan: InterfacePlan, classes: Counters) -> int | None:
        """The arrivals a shared limit dropped (None without one): the root qdisc counts
        them with its classes' own drops (`classes`, read just before), which it also counts."""
        if plan.shared_limit is None:
            return None
        root = root_drops(self._sockets(plan.end.netns), plan.end.index)
        if root is None:
            return None
        return max(0, root - sum(c["drops"] for c in classes.values()))


def dump_classes(sock: socket.socket, index: int) -> dict[str, dict[str, int]]:
    """classid → counters of every class on interface `index` ({} if it is gone)."""
    req = nl.HEADER.pack(nl.HEADER.size + TCMSG.size, RTM_GETTCLASS, nl.NLM_F_REQUEST | NLM_F_DUMP,
                         1, 0) + TCMSG.pack(0, index, 0, 0, 0)  # fmt: skip
    sock.send(req)
    out: dict[str, dict[str, int]] = {}
    while True:
        data = sock.recv(nl.BUFFER)
        for kind, _seq, payload in nl.messages(data):
            if kind == nl.NLMSG_DONE:
                return out
            if kind == nl.NLMSG_ERROR:
                return out  # the interface is gone (ENODEV): no counters
            if kind == RTM_NEWTCLASS:
                _, _, handle, _, _ = TCMSG.unpack_from(payload)
                out[_classid(handle)] = parse_stats(payload[TCMSG.size :])


def root_drops(sock: socket.socket, index: int) -> int | None:
    """The drops of the root qdisc on interface `index` (None if it is gone). A qdisc dump
    lists a namespace's every qdisc; the rest are skipped."""
    req = nl.HEADER.pack(nl.HEADER.size + TCMSG.size, RTM_GETQDISC, nl.NLM_F_REQUEST | NLM_F_DUMP,
                         1, 0) + TCMSG.pack(0, 0, 0, 0, 0)  # fmt: skip
    sock.send(req)
    found: int | None = None
    while True:
        data = sock.recv(nl.BUFFER)
        for kind, _seq, payload in nl.messages(data):
            if kind in (nl.NLMSG_DONE, nl.NLMSG_ERROR):
                return found
            if kind == RTM_NEWQDISC:
                _, ifindex, _, parent, _ = TCMSG.unpack_from(payload)
                if ifindex == index and parent == TC_H_ROOT:
                    found = parse_stats(payload[TCMSG.size :])["drops"]


def parse_stats(attrs: bytes) -> dict[str, int]:
    c = {"bytes": 0, "packets": 0, "drops": 0, "backlog": 0, "qlen": 0, "overlimits": 0}
    for kind, value in nl.attributes(attrs):
        if kind != TCA_STATS2:
            continue
        for sub, body in nl.attributes(value):
            if sub == TCA_STATS_BASIC and len(body) >= BASIC.size:
                c["bytes"], c["packets"] = BASIC.unpack_from(body)
            elif sub == TCA_STATS_QUEUE and len(body) >= QUEUE.size:
                c["qlen"], c["backlog"], c["drops"], _requeues, c["overlimits"] = QUEUE.unpack_from(
                    body
                )
    return c


def frames_queued(plan: InterfacePlan, c: dict[str, int]) -> int:
    """What a class holds, in frames: its packets, or on a fast link (packets of up to
    64 KB) its bytes over the frame size, rounded up."""
    if plan.fast:
        return -(-c.get("backlog", 0) // plan.frame_bytes)
    return c.get("qlen", 0)


# the largest frame a queue hands on at once (jumbo MTU plus Ethernet header): twice that,
# one a token bucket always lets through, one at each edge of the window
LARGEST_FRAME = 9000 + 14
# a snapshot reads every link's counters one after another under one timestamp, so a link read
# late in it counts up to that many ms more (tens of ms on hundreds of links): 1 % of the window
READ_SLACK = 0.01


def over_cap(links: list[dict[str, Any]], span: float, packet: int = LARGEST_FRAME) -> list[str]:
    """The link directions whose classes together carried more than the cap over the window
    (`links` as the summary has them, rate_bps over `span` seconds): then the shaping itself is
    off, not the workload. A token bucket may add its burst and a packet or two (`packet`: the
    largest, in bytes; fast links hold up to 64 KB) to rate × span, and the counters' reads
    their lag (READ_SLACK): a shaper that lets 4 % through too many, as a 1 ms burst did, is
    caught."""
    out = []
    for x in links:
        moved = sum((c.get("rate_bps") or 0) for c in x["classes"].values()) * span / 8
        cap = (1 + READ_SLACK) * x["rate_bps"] * span / 8 + burst_bytes(x["rate_bps"])
        cap += 2 * max(packet, LARGEST_FRAME)
        if span > 0 and moved > cap:
            out.append(
                f"link {x['from']} -> {x['to']} carried {moved * 8 / span / 1e6:.2f} Mbit/s over "
                f"the measured window, above its cap of {x['rate_bps'] / 1e6:g} Mbit/s: the "
                "shaping is off, and every figure on this link with it"
            )
    return out
