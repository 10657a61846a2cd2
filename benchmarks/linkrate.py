"""Links at the machine's speed: what a shaped link carries in each `topology.link_mode`,
beside what the machine's bare veth path carries, in the same run (issue 33).

A user's measurement, made as a user would: `testbed up FILE --hold` in its own process, then
iperf3 in the hosts through `testbed exec` (whole processes); the bare path is two network
namespaces joined by one veth pair (eight pairs for eight flows), iperf3 the same, with
segmentation offloads off (what exact mode's hosts have) and on (what fast mode keeps).

  one / eight        TCP goodput (Gbit/s, iperf3's receiver) of one flow h1 → h2, and the sum
                     of eight (8 hosts in a ring, each sending to the next), through shaped
                     links at each rate (fifo profile, MTU 1500, Reno), per link_mode
  over_cap           goodput over the link rate (at most 1448/1514 = 0.956: TCP's payload in
                     a frame as HTB counts it)
  over_bare_off      goodput over the bare veth path with offloads off, same flow count:
                     what the shaped path keeps of the machine's frame-by-frame speed
  over_bare_on       goodput over the bare path with offloads on
  bare_off / bare_on the bare path's goodput (Gbit/s), one flow and eight
  queue              per link_mode: three Reno flows into one 1 Gbit/s downlink (linkcheck
                     incast, 1000-frame FIFO): drops, and the most frames it held over its
                     limit (a drop-tail queue that fills: near 1.0), and the machine's CPU
                     busy share: in exact mode on a 2-core VM the CPU is 100 % busy and the
                     port holds 1-2 frames, no drop (docs/requirements.md); the thesis'
                     shared-limit port (issue 31) is measured, not built: `queues` of the same run
  both_ways          with --both-ways, per link_mode and rate: one flow h1 → h2 and one h2 → h1
                     at once (each direction carries one flow's data and the other's ACKs,
                     as under NCCL's ring of two ranks): goodput per direction, over the cap
                     and over the one-way flow (medians of the rounds)
  isolation          per link_mode, at 10 Gbit/s: short high-class transfers (10 KB every
                     20 ms, thesis-2band) with a backlogged low-class flow in each direction,
                     median completion time over the same without the low flows (a 64 KB
                     packet ahead costs 52 µs at 10 Gbit/s, a frame 1.2 µs)

Rates and rounds: `--rates 1,10,25` (Gbit/s), `--rounds 3` (each figure the median of that many
runs, the configurations alternating within a round), `--seconds 5` per iperf3 run. `--quick`:
one round at 10 Gbit/s, 2 s runs, no queue or isolation runs: it checks that the benchmark
runs; `--no-checks`: no queue or isolation runs. The JSON line is the last line.

Run as root: `.venv/bin/python benchmarks/linkrate.py [--quick] [--rates 10,25]`.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pyroute2 import IPRoute, NetNS, netns

from testbed.core.state import STATE_DIR
from testbed.network.runtime.network import disable_offloads
from testbed.run.orchestrator import run
from testbed.scenario.resolve import load_scenario_data

HERE = Path(__file__).resolve().parent.parent
TESTBED = [sys.executable, "-m", "testbed.cli"]  # this interpreter's testbed, whole processes
RUN_IDS = itertools.count(os.getpid() << 8)
PORT = 5201
MODES = ("exact", "exact-gso", "fast")


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def iperf_clients(clients: list[list[str]], seconds: float) -> float:
    """Start every client command at once (each an iperf3 -c ... -J), wait for all, and return
    the sum of their receivers' goodput in Gbit/s."""
    procs = [
        subprocess.Popen([*c, "-t", f"{seconds:g}", "-J"], stdout=subprocess.PIPE, text=True)
        for c in clients
    ]
    total = 0.0
    for p in procs:
        out, _ = p.communicate(timeout=seconds + 30)
        doc = json.loads(out)
        if "error" in doc:
            raise RuntimeError(f"iperf3: {doc['error']}")
        total += doc["end"]["sum_received"]["bits_per_second"]
    return total / 1e9


# --- the bare veth path ---------------------------------------------------------------------


@contextlib.contextmanager
def bare_pairs(n: int, offloads: bool) -> Iterator[list[tuple[str, str, str]]]:
    """n veth pairs, each between two namespaces of its own: (client ns, server ns, server
    address); offloads as a new veth has them, or off as exact mode turns them off (testbed's
    own function). Made with pyroute2 (the lent GPU machine may lack `ip` and `ethtool`) and
    deleted on the way out, whatever happened."""
    tag = f"lrb{os.getpid()}"
    made: list[str] = []
    pairs = []
    try:
        for i in range(n):
            a, b = f"{tag}-{i}a", f"{tag}-{i}b"
            for ns in (a, b):
                netns.create(ns)
                made.append(ns)
            with IPRoute() as ipr:
                ipr.link("add", ifname=f"{tag}x", kind="veth", peer=f"{tag}y")
                ipr.link("set", index=ipr.link_lookup(ifname=f"{tag}x")[0], net_ns_fd=a)
                ipr.link("set", index=ipr.link_lookup(ifname=f"{tag}y")[0], net_ns_fd=b)
            for ns, name, addr in ((a, f"{tag}x", f"10.99.{i}.1"), (b, f"{tag}y", f"10.99.{i}.2")):
                with NetNS(ns) as ipr:
                    idx = ipr.link_lookup(ifname=name)[0]
                    ipr.link("set", index=idx, ifname="v")
                    ipr.addr("add", index=idx, address=addr, prefixlen=24)
                    ipr.link("set", index=idx, state="up")
                    ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
                if not offloads:
                    disable_offloads(ns, ["v"])
            pairs.append((a, b, f"10.99.{i}.2"))
        yield pairs
    finally:
        for ns in made:  # the veths go with their namespaces
            with contextlib.suppress(Exception):
                netns.remove(ns)


def in_ns(ns: str, *cmd: str) -> list[str]:
    return ["nsenter", f"--net=/var/run/netns/{ns}", *cmd]


def bare(n: int, offloads: bool, seconds: float) -> float:
    with bare_pairs(n, offloads) as pairs:
        servers = [subprocess.Popen(in_ns(b, "iperf3", "-s", "-1", "-p", str(PORT)),
                                    stdout=subprocess.DEVNULL) for _, b, _ in pairs]  # fmt: skip
        try:
            time.sleep(0.3)
            clients = [in_ns(a, "iperf3", "-c", addr, "-p", str(PORT)) for a, _, addr in pairs]
            return iperf_clients(clients, seconds)
        finally:
            for p in servers:
                p.kill()
                p.wait()


# --- testbed's shaped path ------------------------------------------------------------------


@contextlib.contextmanager
def held_run(hosts: int, rate_gbit: float, mode: str) -> Iterator[str]:
    """`testbed up --hold` of `hosts` hosts on one switch at `rate_gbit`, in `mode`; yields the
    run id once the run is held (built and shaped), tears it down on the way out."""
    run_id = f"{next(RUN_IDS) % 0xFFFFFF:06x}"
    data = {
        "name": "linkrate",
        "duration": "1s",
        "measure": {"warmup": "0s", "cooldown": "0s"},
        "topology": {"hosts": hosts, "link_rate": f"{rate_gbit:g}gbit", "link_mode": mode},
        "tc_profile": "fifo",
        "metrics": {"prometheus": "off"},
    }
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "linkrate.yaml"
        f.write_text(yaml.safe_dump(data))
        up = subprocess.Popen(
            [*TESTBED, "up", str(f), "--hold", "10m", "--run-id", run_id, "--out",
             str(Path(d) / "run"), "--no-plots"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while not phase(run_id).startswith("held"):
                if up.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"testbed up ended or hung: {up.stderr.read()[-2000:]}")
                time.sleep(0.2)
            yield run_id
        finally:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(timeout=120)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()


def phase(run_id: str) -> str:
    try:
        return json.loads((STATE_DIR / f"{run_id}.json").read_text()).get("phase", "")
    except (OSError, ValueError):
        return ""


def shaped(hosts: int, rate_gbit: float, mode: str, seconds: float, both: bool = False) -> float:
    """One flow h1 → h2 (hosts = 2; `both`: and one h2 → h1 at once), or a ring of `hosts`
    flows, through `testbed exec`."""
    with held_run(hosts, rate_gbit, mode) as rid:
        names = [f"h{i + 1}" for i in range(hosts)]
        for h in names:
            sh(*TESTBED, "exec", "--run", rid, h, "--", "iperf3", "-s", "-D", "-p", str(PORT))
        time.sleep(0.3)
        targets = (
            [(names[0], names[1])]
            if hosts == 2
            else list(zip(names, names[1:] + names[:1], strict=True))
        )
        if both:  # as a ring all-reduce of two ranks loads a link: data and ACKs each way
            targets.append((names[1], names[0]))
        clients = [[*TESTBED, "exec", "--run", rid, src, "--", "iperf3", "-c", dst, "-p", str(PORT)]
                   for src, dst in targets]  # fmt: skip
        return iperf_clients(clients, seconds)


# --- the queue and priority checks (testbed's own runs, in process) ------------------------


def run_one(data: dict[str, Any]) -> dict[str, Any]:
    s = load_scenario_data({"name": "linkrate", "metrics": {"prometheus": "off"}, **data}, "bench")
    with tempfile.TemporaryDirectory() as d:
        return run(s, out=Path(d) / "run").summary


def queue_check(mode: str) -> dict[str, Any]:
    s = run_one({
        "duration": "6s", "measure": {"warmup": "1s", "cooldown": "0s"},
        "topology": {"hosts": 4, "link_rate": "1gbit", "link_mode": mode},
        "tc_profile": "fifo",
        "workloads": {"linkcheck": {"pattern": "incast", "short": False}},
    })  # fmt: skip
    down = next(x for x in s["links"] if x["node"] == "h1" and x["direction"] == "down")
    be = down["classes"]["be"]
    return {"drops": be["drops"], "most_frames_over_limit": s["queues"]["max_packets"] / 1000,
            "rate_over_cap": round(be["rate_bps"] / 1e9, 3),
            "cpu_busy": s["host_cpu"]["busy"]}  # fmt: skip


def isolation(mode: str, loaded: bool) -> float:
    s = run_one({
        "duration": "5s", "measure": {"warmup": "1s", "cooldown": "0s"},
        "topology": {"hosts": 2, "link_rate": "10gbit", "link_mode": mode},
        "tc_profile": "thesis-2band",
        "workloads": {"linkcheck": {"pattern": "ring", "bulk_classes": ["low"] if loaded else [],
                                    "short_class": "high", "short_size": "10KB",
                                    "short_interval": "20ms"}},
    })  # fmt: skip
    return s["linkcheck"]["short"]["fct_s"]["p50"]


# --- the grid -------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="1,10,25", help="link rates in Gbit/s (default 1,10,25)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-checks", action="store_true", help="no queue or isolation runs")
    ap.add_argument(
        "--both-ways", action="store_true", help="also one flow each way at once (2 hosts)"
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("linkrate.py: run as root (it builds namespaces)", file=sys.stderr)
        return 2
    rates = [10.0] if args.quick else [float(r) for r in args.rates.split(",")]
    rounds, secs = (1, 2.0) if args.quick else (args.rounds, args.seconds)
    samples: dict[str, list[float]] = {}

    def take(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)
        print(f"  {key:32s} {value:7.3f} Gbit/s", flush=True)

    for r in range(rounds):
        print(f"round {r + 1} of {rounds}", flush=True)
        for n in (1, 8):
            for off in (False, True):
                take(f"bare_{'on' if off else 'off'}_{n}", bare(n, off, secs))
            for rate in rates:
                for mode in MODES:
                    take(f"{mode}_{rate:g}_{n}", shaped(2 if n == 1 else n, rate, mode, secs))
                    if n == 1 and args.both_ways:  # per direction
                        take(f"{mode}_{rate:g}_both", shaped(2, rate, mode, secs, True) / 2)
    med = {k: round(statistics.median(v), 3) for k, v in samples.items()}
    result: dict[str, Any] = {"rounds": rounds, "seconds": secs, "cores": os.cpu_count(),
                              "bare_off": {}, "bare_on": {}}  # fmt: skip
    for n, name in ((1, "one"), (8, "eight")):
        result["bare_off"][name] = med[f"bare_off_{n}"]
        result["bare_on"][name] = med[f"bare_on_{n}"]
        for rate in rates:
            for mode in MODES:
                g = med[f"{mode}_{rate:g}_{n}"]
                result.setdefault(mode, {}).setdefault(f"{rate:g}gbit", {})[name] = {
                    "goodput_gbit": g,
                    "over_cap": round(g / (rate * n), 3),  # n flows, n links
                    "over_bare_off": round(g / med[f"bare_off_{n}"], 3),
                    "over_bare_on": round(g / med[f"bare_on_{n}"], 3),
                }
    for rate in rates if args.both_ways else ():
        for mode in MODES:
            g = med[f"{mode}_{rate:g}_both"]
            result[mode][f"{rate:g}gbit"]["both_ways"] = {
                "goodput_gbit": g,  # per direction
                "over_cap": round(g / rate, 3),
                "over_one_way": round(g / med[f"{mode}_{rate:g}_1"], 3),
            }
    if not (args.quick or args.no_checks):
        for mode in MODES:
            result.setdefault(mode, {})["queue"] = queue_check(mode)
            alone, loaded = isolation(mode, False), isolation(mode, True)
            result[mode]["isolation"] = {"alone_p50_ms": round(alone * 1e3, 3),
                                         "loaded_p50_ms": round(loaded * 1e3, 3),
                                         "ratio": round(loaded / alone, 3)}  # fmt: skip
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
