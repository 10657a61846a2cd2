"""A link cut across machines against the same link kept on one (issue 76): what the stitched
VXLAN tunnel (testbed/network/tunnel.py) costs a flow.

Two emulated machines are two network namespaces joined by an underlay veth (MTU 1500); a node
on each is a namespace whose link's far end is stitched to a VXLAN device on its machine
(MTU 1450: the underlay less VXLAN's 50 bytes). The local path is the same two nodes joined
by one veth, MTU 1450 too. Both run one iperf3 flow and eight (-P 8), with segmentation
offloads on the nodes' links as a new veth has them and then off (as exact mode's hosts), the
local and cut paths in turns within each round, each figure the median of the rounds.

  local / cut       TCP goodput (Gbit/s, iperf3's receiver), per offloads (off, on) and flow
                    count (one, eight)
  cut_over_local    what the cut keeps of the local path's rate

On one machine the tunnel's cost is CPU: every frame is encapsulated, crosses the underlay
veth and is decapsulated, on the same cores that send and receive it; between real machines
the underlay's own rate comes on top (admission probes it: scenario/partition.py).

Run as root: `.venv/bin/python benchmarks/tunnel.py [--quick] [--rounds 3] [--seconds 5]`.
The JSON line is the last line.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from ipaddress import IPv4Address

from pyroute2 import NetNS

from testbed.network.runtime.network import disable_offloads
from testbed.network.tunnel import Tunnel, build

MTU, PORT, VNI = 1450, 14789, 4242
UNDERLAY = {"a": "10.250.0.1", "b": "10.250.0.2"}
NODES = {"a": "10.251.0.1", "b": "10.251.0.2"}


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def in_ns(ns: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


@contextmanager
def path(cut: bool) -> Iterator[dict[str, str]]:
    """Nodes n<x> joined by one veth (local) or through machines m<x> and a tunnel (cut);
    every namespace deleted at the end."""
    tag = secrets.token_hex(2)
    names = [f"n{x}" for x in "ab"] + ([f"m{x}" for x in "ab"] if cut else [])
    ns = {k: f"tbbench-{tag}-{k}" for k in names}
    try:
        for name in ns.values():
            ip("netns", "add", name)
        if not cut:
            ip("link", "add", "eth0", "netns", ns["na"], "mtu", str(MTU), "type", "veth",
               "peer", "eth0", "netns", ns["nb"], "mtu", str(MTU))  # fmt: skip
        else:
            ip("link", "add", "u-a", "netns", ns["ma"], "type", "veth", "peer", "u-b",
               "netns", ns["mb"])  # fmt: skip
            for x in "ab":
                m = ns[f"m{x}"]
                ip("-n", m, "addr", "add", f"{UNDERLAY[x]}/30", "dev", f"u-{x}")
                ip("-n", m, "link", "set", f"u-{x}", "up")
                ip("link", "add", "eth0", "netns", ns[f"n{x}"], "mtu", str(MTU), "type", "veth",
                   "peer", f"p-{x}", "netns", m, "mtu", str(MTU))  # fmt: skip
                ip("-n", m, "link", "set", f"p-{x}", "up")
            for x, peer in (("a", "b"), ("b", "a")):
                with NetNS(ns[f"m{x}"]) as ipr:
                    (stitch,) = ipr.link_lookup(ifname=f"p-{x}")
                    build(ipr, Tunnel(f"vx-{x}", VNI, IPv4Address(UNDERLAY[x]),
                                      IPv4Address(UNDERLAY[peer]), PORT, MTU, stitch))  # fmt: skip
        for x in "ab":
            ip("-n", ns[f"n{x}"], "addr", "add", f"{NODES[x]}/24", "dev", "eth0")
            ip("-n", ns[f"n{x}"], "link", "set", "eth0", "up")
        yield ns
    finally:
        for name in ns.values():
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def offloads_off(ns: dict[str, str]) -> None:
    """As exact mode turns them off (testbed's own function; there may be no ethtool)."""
    for x in "ab":
        disable_offloads(ns[f"n{x}"], ["eth0"])


def goodput(ns: dict[str, str], flows: int, seconds: float) -> float:
    """iperf3's receiver goodput (Gbit/s) from node a to node b; a try the server was not
    ready for (its JSON has an error, no sum) is made again, with a new server."""
    why = ""
    for _ in range(20):
        server = subprocess.Popen(["ip", "netns", "exec", ns["nb"], "iperf3", "-s", "-1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            time.sleep(0.2)  # the server listening
            r = in_ns(ns["na"], "iperf3", "-c", NODES["b"], "-J", "-t", f"{seconds:g}",
                      "-P", str(flows), timeout=seconds + 30)  # fmt: skip
            doc = json.loads(r.stdout) if r.stdout.strip() else {}
            got = doc.get("end", {}).get("sum_received", {}).get("bits_per_second")
            if r.returncode == 0 and got:
                return got / 1e9
            why = doc.get("error") or r.stderr.strip() or r.stdout[-300:]
        finally:
            server.kill()
            server.wait()
    raise RuntimeError(f"iperf3 failed: {why}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one round of 1 s runs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    a = ap.parse_args()
    rounds, seconds = (1, 1.0) if a.quick else (a.rounds, a.seconds)
    figs: dict[str, list[float]] = {}
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)  # alternate within rounds
        for cut in order:
            with path(cut) as ns:
                for on in (True, False):  # a new veth's offloads, then exact mode's
                    if not on:
                        offloads_off(ns)
                    for flows in (1, 8):
                        key = f"{'cut' if cut else 'local'}/{'on' if on else 'off'}/{flows}"
                        figs.setdefault(key, []).append(goodput(ns, flows, seconds))
                        print(f"round {r + 1}: {key} flows {figs[key][-1]:.2f} Gbit/s", flush=True)
    out: dict[str, dict[str, dict[str, float]]] = {"local": {}, "cut": {}, "cut_over_local": {}}
    for on in ("off", "on"):
        for flows, n in ((1, "one"), (8, "eight")):
            local = statistics.median(figs[f"local/{on}/{flows}"])
            cut = statistics.median(figs[f"cut/{on}/{flows}"])
            out["local"].setdefault(on, {})[n] = round(local, 3)
            out["cut"].setdefault(on, {})[n] = round(cut, 3)
            out["cut_over_local"].setdefault(on, {})[n] = round(cut / local, 3)
    print(json.dumps({"rounds": rounds, "seconds": seconds, **out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
