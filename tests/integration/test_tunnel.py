"""A cut link's two halves (issue 76, testbed/network/tunnel.py) between two emulated
machines: each machine a namespace with its end of an underlay veth (MTU 1500), each node a
namespace whose link's local end is stitched to a VXLAN device on its machine. The nodes see
one cable: a 1450-byte packet crosses unfragmented, 20 MB of TCP arrive whole, every frame one
node sends the other receives (no frame lost or doubled by the stitch), and the tunnels are
what the plan says (`ip -d link`, not pyroute2, reads them back). The nodes send at 1 Gbit/s,
as a shaped port hands the tunnel its frames; unshaped (~6 Gbit/s on 2 cores) the stitch lost
1–10 frames of ~14,500 in about 1 run of 7, which is issue 76's, not yet explained."""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from ipaddress import IPv4Address

from pyroute2 import NetNS

from testbed.core.hostcpu import SOFTNET, softnet_drops
from testbed.network.tunnel import Tunnel, build

from .helpers import send, settled
from .test_runtime import in_ns

MTU, PORT, VNI = 1450, 14789, 4242
RATE = "1gbit"  # each node's eth0
UNDERLAY = {"a": "10.250.0.1", "b": "10.250.0.2"}  # the emulated machines' own network
NODES = {"a": "10.251.0.1", "b": "10.251.0.2"}  # the emulated network: one link, cut


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def counters(ns: str, dev: str) -> dict[str, int]:
    (x,) = json.loads(in_ns(ns, "ip", "-j", "-s", "link", "show", dev).stdout)
    return {"tx": x["stats64"]["tx"]["packets"], "rx": x["stats64"]["rx"]["packets"]}


@contextmanager
def two_machines() -> Iterator[dict[str, str]]:
    """Namespaces m<x> (the machines) and n<x> (a node on each), the underlay and the two
    node links' veths (the nodes' ends down until the test stitches them); every namespace
    deleted at the end, whatever happened."""
    tag = secrets.token_hex(2)
    ns = {f"{r}{x}": f"tbtest-{tag}-{r}{x}" for r in "mn" for x in "ab"}
    try:
        for name in ns.values():
            ip("netns", "add", name)
            for conf in ("all", "default"):  # nothing sent but the test's own frames
                in_ns(name, "sysctl", "-qw", f"net.ipv6.conf.{conf}.disable_ipv6=1")
        ip("link", "add", "u-a", "netns", ns["ma"], "type", "veth", "peer", "u-b",
           "netns", ns["mb"])  # fmt: skip
        for x in "ab":
            m, n = ns[f"m{x}"], ns[f"n{x}"]
            ip("-n", m, "addr", "add", f"{UNDERLAY[x]}/30", "dev", f"u-{x}")
            ip("-n", m, "link", "set", f"u-{x}", "up")
            ip("link", "add", "eth0", "netns", n, "mtu", str(MTU), "type", "veth", "peer",
               f"p-{x}", "netns", m, "mtu", str(MTU))  # fmt: skip
            ip("-n", n, "addr", "add", f"{NODES[x]}/24", "dev", "eth0")
            # one frame per packet, as testbed's exact links (topology.Link): counts compare
            ip("-n", n, "link", "set", "eth0", "gso_max_segs", "1")
            # shaped as a testbed link is before its frames reach a tunnel (the port's HTB
            # tree): unshaped, ~6 Gbit/s of TCP on 2 cores lost 1-10 frames of ~14,500 in
            # the stitch's redirect in about 1 run of 7 (2026-12-07, not yet explained)
            for tc in (["qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default",
                        "1"],
                       ["class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb",
                        "rate", RATE]):  # fmt: skip
                assert in_ns(n, "tc", *tc).returncode == 0, tc
            ip("-n", m, "link", "set", f"p-{x}", "up")
        yield ns
    finally:
        for name in ns.values():
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_a_cut_link_carries_every_frame_whole_between_two_machines():
    with two_machines() as ns:
        for x, peer in (("a", "b"), ("b", "a")):
            with NetNS(ns[f"m{x}"]) as ipr:
                (stitch,) = ipr.link_lookup(ifname=f"p-{x}")
                t = Tunnel(f"vx-{x}", VNI, IPv4Address(UNDERLAY[x]), IPv4Address(UNDERLAY[peer]),
                           PORT, MTU, stitch)  # fmt: skip
                build(ipr, t)
        for x in "ab":  # up once stitched: every frame a node sends goes through
            ip("-n", ns[f"n{x}"], "link", "set", "eth0", "up")
        (info,) = json.loads(in_ns(ns["ma"], "ip", "-d", "-j", "link", "show", "vx-a").stdout)
        data = info["linkinfo"]["info_data"]
        assert (data["id"], data["port"], data["remote"], data["learning"]) == (
            VNI, PORT, UNDERLAY["b"], False)  # fmt: skip
        assert info["mtu"] == MTU
        # 1422 bytes of ICMP + 28 of headers = the link's 1450, not fragmented (-M do)
        ping = in_ns(ns["na"], "ping", "-c", "3", "-W", "2", "-M", "do", "-s", "1422", NODES["b"])
        assert ping.returncode == 0, ping.stdout + ping.stderr

        def read() -> tuple[dict[str, int], ...]:  # once no frame is crossing
            return settled(lambda: (
                counters(ns["na"], "eth0"), counters(ns["nb"], "eth0"),
                counters(ns["ma"], "vx-a"), counters(ns["mb"], "vx-b"),
            ))  # fmt: skip

        # from here: the first frames, sent while the machines' underlay was still coming up
        # (1 of ~14,000 lost in 2 runs of 10 here), are the ping's, which it retries
        before, drops = read(), softnet_drops(SOFTNET.read_text())
        size = 20_000_000
        assert send(ns["na"], ns["nb"], NODES["b"], size) == size
        after, drops = read(), softnet_drops(SOFTNET.read_text()) - drops
        a, b, va, vb = ({k: x[k] - x0[k] for k in x} for x, x0 in zip(after, before, strict=True))
        # none lost, none doubled; except what a CPU's full receive backlog dropped, which is
        # the machine's, not the stitch's (unshaped TCP at several Gbit/s on 2 cores: 1 frame
        # in ~1 run of 10 here), counted machine-wide (/proc/net/softnet_stat)
        lost = (a["tx"] - b["rx"], b["tx"] - a["rx"])
        assert min(lost) >= 0 and sum(lost) <= drops, (a, b, drops)
        assert a["tx"] >= size / MTU
        assert (va["tx"], vb["tx"]) == (a["tx"], b["tx"]), (va, vb)  # every frame tunnelled
        assert (a["tx"] - vb["rx"]) + (b["tx"] - va["rx"]) <= drops, (va, vb, drops)
