"""Admission's measurement (issue 76): what the machines' own network carries between two
machines along the path a cut link's frames take. A VXLAN device on each (the run's port, a
VNI of the run's block that no link takes, the emulated links' MTU: the same encapsulation,
the same UDP flow hashing as the tunnels), and TCP through it for a few seconds each way,
one direction at a time.

The TCP is iperf3's (one direction at a time, JSON out), not testbed's own flows: a well-kept tool that
reports what arrived each way, and one a user can run by hand to check it. The probe's
devices are made in the machines' namespaces and deleted before the run's own links exist;
a run that dies in between loses them with those namespaces (the run's state records them)."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from testbed.core.errors import EnvironmentProblem, RunFailure

PROBE_S = 2  # seconds of TCP each pair and direction
DEVICE = "tbprobe"  # the probe's VXLAN device on each machine
NET = ipaddress.IPv4Network("169.254.78.0/30")  # link-local: inside the tunnel only
PORT = 5201  # iperf3's, inside the probe tunnel's own addresses
CONNECT_TRIES = 25  # the client's tries while the server starts, 0.1 s apart


def carried(
    ipr_of: Callable[[str], Any],
    netns_path: Callable[[str], Path],
    ns_of: dict[str, str],
    address: dict[str, ipaddress.IPv4Address],
    pairs: Iterable[tuple[str, str]],
    vxlan: tuple[int, int, int],
) -> dict[tuple[str, str], float]:
    """(sender, receiver) → bit/s of TCP payload that arrived, for each machine pair in `pairs`
    both ways. `ns_of`: each machine's namespace, `address`: its address on the machines'
    network, `vxlan`: (VNI, UDP port, MTU) of the probe tunnels."""
    iperf3 = shutil.which("iperf3")
    if iperf3 is None:
        raise EnvironmentProblem(
            "iperf3 is not on PATH: admission probes the machines' network with it "
            "(apt-get install iperf3)"
        )
    out: dict[tuple[str, str], float] = {}
    for a, b in pairs:
        ends = ((a, b, NET[1]), (b, a, NET[2]))
        try:
            for m, peer, ip in ends:
                _device(ipr_of(ns_of[m]), address[m], address[peer], ip, vxlan)
            out[(a, b)], out[(b, a)] = _both_ways(
                iperf3, netns_path(ns_of[a]), netns_path(ns_of[b])
            )
        finally:
            for m, _, _ in ends:
                with contextlib.suppress(Exception):
                    ipr = ipr_of(ns_of[m])
                    for index in ipr.link_lookup(ifname=DEVICE):
                        ipr.link("del", index=index)
    return out


def _device(
    ipr: Any,
    local: ipaddress.IPv4Address,
    remote: ipaddress.IPv4Address,
    ip: ipaddress.IPv4Address,
    vxlan: tuple[int, int, int],
) -> None:
    vni, port, mtu = vxlan
    ipr.link("add", ifname=DEVICE, kind="vxlan", vxlan_id=vni, vxlan_local=str(local),
             vxlan_group=str(remote), vxlan_port=port, vxlan_learning=0, mtu=mtu)  # fmt: skip
    (index,) = ipr.link_lookup(ifname=DEVICE)
    ipr.addr("add", index=index, address=str(ip), prefixlen=NET.prefixlen)
    ipr.link("set", index=index, state="up")


def _both_ways(iperf3: str, client_ns: Path, server_ns: Path) -> tuple[float, float]:
    """(client → server, server → client) bit/s that arrived: PROBE_S of iperf3 each way, one
    direction at a time (both at once, each direction's ACKs share the other's rate and one
    read 20 % under the other on the same network: 28.7 against 36 Mbit/s)."""
    server = subprocess.Popen(
        ["nsenter", f"--net={server_ns}", "--", iperf3, "-s", "-B", str(NET[2]),
         "-p", str(PORT)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        return _one_way(iperf3, client_ns, []), _one_way(iperf3, client_ns, ["-R"])
    finally:
        server.kill()
        server.wait()


def _one_way(iperf3: str, client_ns: Path, extra: list[str]) -> float:
    """Bit/s the receiving end got in one iperf3 test from the client (-R: to it), retried
    while the server is still starting."""
    said = ""
    for _ in range(CONNECT_TRIES):
        r = subprocess.run(
            ["nsenter", f"--net={client_ns}", "--", iperf3, "-c", str(NET[2]),
             "-p", str(PORT), "-t", str(PROBE_S), "-J", *extra],
            capture_output=True, text=True, timeout=PROBE_S + 20,
        )  # fmt: skip
        report = _json(r.stdout) or {}
        got = _received(report)
        if r.returncode == 0 and got is not None:
            return got
        # iperf3 3.12 -J exits 0 where it could not connect (the server still starting: CI,
        # 2026-12-08), with an error and no receiver's sum: tried again
        said = (report.get("error") or r.stderr or r.stdout or f"exit {r.returncode}").strip()
        time.sleep(0.1)
    raise RunFailure(f"the probe of the machines' network failed: iperf3 said {said[:300]!r}")


def _received(report: dict[str, Any]) -> float | None:
    """The receiver's bit/s in an iperf3 -J report, None where it holds none."""
    with contextlib.suppress(KeyError, TypeError, ValueError):
        return float(report["end"]["sum_received"]["bits_per_second"])
    return None


def _json(text: str) -> dict[str, Any] | None:
    with contextlib.suppress(ValueError):
        doc = json.loads(text)
        return doc if isinstance(doc, dict) else None
    return None
