"""Read per-class counters back through netlink (what `tc -s class show` prints)."""

from __future__ import annotations

from typing import Any

from pyroute2 import IPRoute

from testbed.shaping.plan import InterfacePlan


def _classid(handle: int) -> str:
    return f"{handle >> 16:x}:{handle & 0xFFFF:x}"


def class_counters(ipr: IPRoute, plan: InterfacePlan) -> dict[str, dict[str, int]]:
    """{class name: {bytes, packets, drops, backlog, overlimits}} for the plan's classes.

    HTB counts a leaf's drops on its class, so class statistics alone are complete.
    """
    found = ipr.link_lookup(ifname=plan.end.ifname)
    if not found:
        return {}
    by_id: dict[str, Any] = {_classid(m["handle"]): m for m in ipr.get_classes(index=found[0])}
    out: dict[str, dict[str, int]] = {}
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
            "overlimits": int(queue.get("overlimits", 0)),
        }
    return out
