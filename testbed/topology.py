"""The node/link graph and address plan of one run, computed without touching the kernel.

Single ToR layout (every name carries the run id, so two runs never collide):

    root namespace                switch namespace tb-<id>-sw        host namespace tb-<id>-h<i>
    tb<id>  (mgmt bridge) ─ tb<id>m<i> ══════════════════════════════ mgmt0   (unshaped)
                                  br0 ─ h<i>  ════════════════════════ eth0    (shaped both ways)

The data switch lives in its own namespace, so the shaped network has no interface, address
or route in the root namespace at all. The management bridge is the only thing in the root
namespace; its ports are isolated, so hosts cannot reach each other through it (traffic
between hosts must cross the shaped links), and hosts get no default route.
"""

from __future__ import annotations

import ipaddress
import secrets
from dataclasses import dataclass
from typing import Literal

from testbed.scenario import Scenario

RUN_ID_LEN = 6
Direction = Literal["up", "down"]


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


@dataclass(frozen=True)
class LinkEnd:
    """One shaped direction: the egress queue of `ifname` in `netns`."""

    node: str
    direction: Direction
    netns: str
    ifname: str


@dataclass(frozen=True)
class TopologyPlan:
    run_id: str
    switch_ns: str
    bridge: str
    mgmt_bridge: str  # in the root namespace
    mgmt_bridge_ip: ipaddress.IPv4Address
    data_prefix: ipaddress.IPv4Network
    mgmt_prefix: ipaddress.IPv4Network
    hosts: tuple[Host, ...]

    @property
    def namespaces(self) -> list[str]:
        return [self.switch_ns, *(h.netns for h in self.hosts)]

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def link_ends(self) -> list[LinkEnd]:
        """Uplink: host → switch, the host's eth0. Downlink: switch → host, the switch port,
        where traffic from several senders meets (the queue that matters)."""
        ends: list[LinkEnd] = []
        for h in self.hosts:
            ends.append(LinkEnd(h.name, "up", h.netns, h.data_if))
            ends.append(LinkEnd(h.name, "down", self.switch_ns, h.switch_port))
        return ends


def names_for(run_id: str) -> dict[str, str]:
    """Names of the per-run objects; also used by `down` to recognise them."""
    return {
        "prefix": f"tb-{run_id}-",
        "switch_ns": f"tb-{run_id}-sw",
        "mgmt_bridge": f"tb{run_id}",
    }


def single_tor(s: Scenario, run_id: str) -> TopologyPlan:
    t = s.topology
    n = names_for(run_id)
    data = list(t.prefix.hosts())
    mgmt = list(t.management_prefix.hosts())
    hosts = tuple(
        Host(
            name=f"h{i}",
            index=i,
            netns=f"{n['prefix']}h{i}",
            data_if="eth0",
            data_ip=data[i - 1],
            mgmt_if="mgmt0",
            mgmt_ip=mgmt[i],  # mgmt[0] is the root namespace's end
            mgmt_peer=f"{n['mgmt_bridge']}m{i}",
            switch_port=f"h{i}",
        )
        for i in range(1, t.hosts + 1)
    )
    return TopologyPlan(
        run_id=run_id,
        switch_ns=n["switch_ns"],
        bridge="br0",
        mgmt_bridge=n["mgmt_bridge"],
        mgmt_bridge_ip=mgmt[0],
        data_prefix=t.prefix,
        mgmt_prefix=t.management_prefix,
        hosts=hosts,
    )
