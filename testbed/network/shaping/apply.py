"""Execute InterfacePlans through netlink (no `tc` processes): pyroute2 encodes each tc
object, netlink.Batch sends a namespace's objects together and checks every ack."""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable, Iterable
from functools import cache

from pyroute2 import IPBatch, IPRoute, protocols
from pyroute2.netlink.rtnl.tcmsg import plugins, sched_pfifo

from testbed.network import netlink as nl
from testbed.network.shaping.plan import (
    ByteFifo,
    CloneRedirect,
    Clsact,
    DscpFilter,
    Fifo,
    Htb,
    HtbClass,
    InterfacePlan,
    Netem,
    Redirect,
    SharedLimitIn,
    SharedLimitOut,
    TcObject,
)
from testbed.network.shaping.shared_limit import Counters
from testbed.network.shaping.uplink import load_clone

CLSACT_EGRESS = "ffff:fff3"  # TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_EGRESS)
CLSACT_INGRESS = "ffff:fff2"  # TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS)
# pyroute2 knows no bfifo; its options are pfifo's (struct tc_fifo_qopt: one limit, in bytes)
plugins.setdefault("bfifo", sched_pfifo)


def tc_call(ipr: IPRoute, index: int, obj: TcObject) -> None:
    """The pyroute2 request for `obj` on interface `index` (IPBatch: only encoded)."""
    # pyroute2 reads an integer rate as *bytes* per second.
    match obj:
        case Htb():
            ipr.tc("add", "htb", index=index, handle=obj.handle, default=obj.default_minor)
        case HtbClass():
            ipr.tc(
                "add-class",
                "htb",
                index=index,
                handle=obj.handle,
                parent=obj.parent,
                rate=obj.rate_bps // 8,
                ceil=obj.ceil_bps // 8,
                prio=obj.prio,
                burst=obj.burst,
                cburst=obj.cburst,
                quantum=obj.quantum,
            )
        case Fifo():
            ipr.tc(
                "add", "pfifo", index=index, handle=obj.handle, parent=obj.parent, limit=obj.limit
            )
        case ByteFifo():
            ipr.tc(
                "add", "bfifo", index=index, handle=obj.handle, parent=obj.parent, limit=obj.limit
            )
        case Netem():
            kw: dict[str, float | int] = {"limit": obj.limit}
            if obj.delay_us:
                kw["delay"] = obj.delay_us
            if obj.jitter_us:
                kw["jitter"] = obj.jitter_us
            if obj.loss_pct:
                kw["loss"] = obj.loss_pct
            ipr.tc("add", "netem", index=index, handle=obj.handle, parent=obj.parent, **kw)
        case DscpFilter():
            ipr.tc(
                "add-filter",
                "u32",
                index=index,
                parent=obj.parent,
                prio=obj.prio,
                protocol=protocols.ETH_P_IP,
                target=obj.target,
                keys=[obj.u32_key],
            )
        case Clsact():
            ipr.tc("add", "clsact", index=index)
        case Redirect():
            ipr.tc(
                "add-filter",
                "u32",
                index=index,
                parent=CLSACT_EGRESS if obj.hook == "egress" else CLSACT_INGRESS,
                prio=1,
                protocol=protocols.ETH_P_ALL,
                keys=["0x0/0x0+0"],  # every packet
                target=0,  # no class: the action takes the packet
                action={"kind": "mirred", "direction": "egress", "action": "redirect",
                        "ifindex": obj.target},
            )  # fmt: skip


@cache
def _tc_template(obj: TcObject) -> bytes:
    """pyroute2's encoding of one tc object for interface index 0."""
    batch = IPBatch()
    try:
        tc_call(batch, 0, obj)  # type: ignore[arg-type]
        return bytes(batch.batch)
    finally:
        batch.close()


def tc_message(index: int, obj: TcObject) -> bytes:
    """The tc object `obj` on interface `index`: encoded once per distinct object, the index
    patched in (it sits at the same offset in every tcmsg)."""
    msg = bytearray(_tc_template(obj))
    struct.pack_into("=i", msg, nl.INDEX_OFFSET, index)
    return bytes(msg)


def _bpf_filter_message(index: int, parent: str, prio: int, fd: int, name: str) -> bytes:
    """A direct-action cls_bpf filter running the loaded program `fd`: its fd is in the
    message, so it is encoded each time, not from the template cache."""
    batch = IPBatch()
    try:
        batch.tc("add-filter", "bpf", index=index, parent=parent, prio=prio,
                 protocol=protocols.ETH_P_ALL, fd=fd, name=name, direct_action=True)  # fmt: skip
        return bytes(batch.batch)
    finally:
        batch.close()


def _shared_limit_message(index: int, obj: TcObject, counters: Counters) -> bytes:
    """A shared limit's filter (plan.SharedLimitIn/Out) with its program loaded now."""
    if isinstance(obj, SharedLimitIn):
        fd, parent, prio = counters.count_in(obj.key, obj.limit), obj.parent, obj.prio
    else:
        assert isinstance(obj, SharedLimitOut)
        fd, parent, prio = counters.count_out(obj.key), CLSACT_INGRESS, 1
    return _bpf_filter_message(index, parent, prio, fd, "testbed-shared-limit")


def _clone_message(index: int, obj: CloneRedirect, programs: list[int]) -> bytes:
    """The uplink feed of link_mode exact-gso (plan.CloneRedirect), its program loaded now."""
    fd = load_clone(obj.target)
    programs.append(fd)
    return _bpf_filter_message(index, CLSACT_INGRESS, 1, fd, "testbed-uplink")


def apply_plans(
    plans: Iterable[InterfacePlan], sockets: Callable[[str], socket.socket] | None = None
) -> Counters:
    """Every plan, one netlink batch per namespace (netlink.py): the interfaces carry the
    indexes the topology gave them, and each distinct tc object is encoded once. A queue is
    built before the redirect that feeds it. `sockets`: the runtime's netlink socket of each
    namespace, when it keeps them. Returns the shared limits' counters (none without one),
    for the caller to read when the queues are empty and close."""
    by_ns: dict[str, nl.Batch] = {}
    counters = Counters()
    programs: list[int] = []  # the clone feeds' (link_mode exact-gso); the filters hold them

    def batch(ns: str) -> nl.Batch:
        if ns not in by_ns:
            by_ns[ns] = nl.Batch(ns, sockets(ns) if sockets else None)
        return by_ns[ns]

    def message(index: int, obj: TcObject) -> bytes:
        if isinstance(obj, SharedLimitIn | SharedLimitOut):
            return _shared_limit_message(index, obj, counters)
        if isinstance(obj, CloneRedirect):
            return _clone_message(index, obj, programs)
        return tc_message(index, obj)

    try:
        for p in plans:
            if not p.end.index:
                raise ValueError(f"{p.end.netns}/{p.end.ifname}: no interface index in the plan")
            b = batch(p.end.netns)
            for obj in p.objects:
                b.add(message(p.end.index, obj), f"{obj} on {p.end.ifname}")
            for obj in p.feed:
                b.add(message(p.end.port_index, obj), f"{obj} on {p.end.port}")
        # a shared limit's far half last: the far end's own clsact may come with its queue
        for p in plans:
            for obj in p.far:
                b = batch(p.end.far_netns)
                b.add(message(p.end.far_index, obj), f"{obj} on {p.end.far_ifname}")
        for b in by_ns.values():
            b.commit()
    except BaseException:
        counters.close()
        raise
    finally:
        for fd in programs:
            os.close(fd)
    counters.close_programs()  # the filters hold them
    return counters
