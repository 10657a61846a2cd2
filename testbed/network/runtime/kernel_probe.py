"""Ask the kernel what it can do before building anything.

The only reliable test is to try: qdiscs may be built in or modules, and /proc/modules says
nothing about built-ins. The probe works in a throwaway namespace it removes again; a run
names it after itself and records it first (`tb-<id>-probe`), so a run killed mid-probe
leaves nothing its guardian or `testbed down` does not know of.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pyroute2 import protocols
from pyroute2.netlink.exceptions import NetlinkError

from testbed.network.runtime.namespaces import scratch
from testbed.network.shaping.apply import CLSACT_INGRESS, tc_call
from testbed.network.shaping.bpf import BpfError
from testbed.network.shaping.plan import Redirect
from testbed.network.shaping.uplink import load_clone
from testbed.scenario.topology import NETNS_NAMES

HOW = {
    "veth": "CONFIG_VETH (modprobe veth)",
    "bridge": "CONFIG_BRIDGE (modprobe bridge)",
    "htb": "CONFIG_NET_SCH_HTB (modprobe sch_htb)",
    "pfifo": "CONFIG_NET_SCH_FIFO (built into every kernel with qdiscs)",
    "u32": "CONFIG_NET_CLS_U32 (modprobe cls_u32)",
    "netem": "CONFIG_NET_SCH_NETEM (modprobe sch_netem)",
    "ifb": "CONFIG_IFB (modprobe ifb)",
    "clsact": "CONFIG_NET_SCH_INGRESS (modprobe sch_ingress)",
    "mirred": "CONFIG_NET_ACT_MIRRED (modprobe act_mirred)",
    "rps": "Linux >= 6.2 built with CONFIG_RPS (its sysctl net.core.rps_default_mask)",
    "cls_bpf": "CONFIG_NET_CLS_BPF and CONFIG_BPF_SYSCALL (modprobe cls_bpf)",
}
RPS_DEFAULT_MASK = Path("/proc/sys/net/core/rps_default_mask")
# ifb, clsact and mirred hold a host's uplink queue (topology.Link says why)
REQUIRED = ("veth", "bridge", "htb", "pfifo", "u32", "ifb", "clsact", "mirred")


@dataclass(frozen=True)
class Capabilities:
    present: frozenset[str]

    def has(self, feature: str) -> bool:
        return feature in self.present

    def missing_required(self) -> list[str]:
        return [f for f in REQUIRED if f not in self.present]


def probe(name: str | None = None) -> Capabilities:
    name = name or NETNS_NAMES["lone probe"].format(pid=os.getpid())
    present: set[str] = set()
    with scratch(name) as ipr:
        _try_all(ipr, present)
    return Capabilities(frozenset(present))


def _try_all(ipr, present: set[str]) -> None:
    def attempt(feature: str, fn) -> bool:
        try:
            fn()
        except NetlinkError:
            return False
        present.add(feature)
        return True

    if RPS_DEFAULT_MASK.exists():  # optional (network.rps_mask says what for); the key is
        present.add("rps")  # per namespace, and every namespace of a kernel has it or none
    attempt("bridge", lambda: ipr.link("add", ifname="pbr", kind="bridge"))
    if not attempt("veth", lambda: ipr.link("add", ifname="pa", kind="veth", peer="pb")):
        return
    i = ipr.link_lookup(ifname="pa")[0]
    if not attempt("htb", lambda: ipr.tc("add", "htb", index=i, handle="1:", default=0x10)):
        return
    ipr.tc("add-class", "htb", index=i, handle="1:10", parent="1:", rate=125_000, ceil=125_000)
    ipr.tc("add-class", "htb", index=i, handle="1:11", parent="1:", rate=125_000, ceil=125_000)
    attempt("pfifo", lambda: ipr.tc("add", "pfifo", index=i, handle="10:", parent="1:10", limit=10))
    attempt(
        "netem", lambda: ipr.tc("add", "netem", index=i, handle="11:", parent="1:11", delay=1000)
    )
    attempt(
        "u32",
        lambda: ipr.tc(
            "add-filter",
            "u32",
            index=i,
            parent="1:",
            prio=10,
            protocol=protocols.ETH_P_IP,
            target="1:10",
            keys=["0xb8/0xfc+1"],
        ),
    )
    if attempt("ifb", lambda: ipr.link("add", ifname="pq", kind="ifb")) and attempt(
        "clsact", lambda: ipr.tc("add", "clsact", index=i)
    ):
        # the very filter a run puts on a host's eth0
        q = ipr.link_lookup(ifname="pq")[0]
        attempt("mirred", lambda: tc_call(ipr, i, Redirect(q)))
        # and the one link_mode exact-gso puts on a switch's port (shared limits use cls_bpf
        # too): optional, preflight.require_bpf says who needs it
        try:
            fd = load_clone(q)
        except BpfError:
            return
        try:
            attempt("cls_bpf", lambda: ipr.tc("add-filter", "bpf", index=i, parent=CLSACT_INGRESS,
                                              prio=1, protocol=protocols.ETH_P_ALL, fd=fd,
                                              name="probe", direct_action=True))  # fmt: skip
        finally:
            os.close(fd)
