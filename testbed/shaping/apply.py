"""Execute an InterfacePlan through pyroute2 netlink calls (no `tc` processes)."""

from __future__ import annotations

from pyroute2 import IPRoute, protocols
from pyroute2.netlink.exceptions import NetlinkError

from testbed.errors import RunFailure
from testbed.shaping.plan import DscpFilter, Fifo, Htb, HtbClass, InterfacePlan, Netem, TcObject


def _call(ipr: IPRoute, index: int, obj: TcObject) -> None:
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


def apply_plan(ipr: IPRoute, plan: InterfacePlan) -> None:
    """Build the plan's qdiscs, classes and filters on an interface that has none of ours."""
    found = ipr.link_lookup(ifname=plan.end.ifname)
    if not found:
        raise RunFailure(f"{plan.end.netns}: no interface {plan.end.ifname} to shape")
    index = found[0]
    for obj in plan.objects:
        try:
            _call(ipr, index, obj)
        except NetlinkError as e:
            raise RunFailure(
                f"{plan.end.netns}/{plan.end.ifname}: kernel refused {obj}: {e.args[-1]}"
            ) from None
