"""Shaping fidelity and speed. Builds its own topologies with `testbed`'s real code path
(orchestrator.run), prints what it measures, and ends with one JSON line:

  goodput_ratio      single-flow TCP goodput / configured cap (fifo profile), at 10 Mbit/s to
                     10 Gbit/s; at most 1448/1514 ≈ 0.956, since HTB counts Ethernet frames and
                     TCP carries 1448 B each
  cpu_busy           the machine's CPU share in use during each goodput run's window (summary
                     host_cpu): near 1.0, the CPU, not the shaper, is what limits the rate
  cpu_steal          the share a hypervisor took from this VM over the same window: above a
                     few percent the figure says more about the neighbours than the shaper
  goodput_ratio_jumbo   the same with `mtu: 9000` at 1 to 10 Gbit/s (ceiling 8948/9014 ≈ 0.993),
                     and cpu_busy_jumbo beside it
  small_flow_over_link  the fastest small web-search flow (4-100 KB, idle links, 5 % load) over
                     its link rate, at 10 Mbit/s, 100 Mbit/s and 1 Gbit/s, with 1500- and
                     9000-byte MTUs: above 1.0 a flow beat the wire
  priority_isolation mean completion time of short high-class transfers while the low class
                     saturates the link, over the same on an idle link (thesis-2band)
  fifo_isolation     the same ratio under the fifo profile: what priority buys (null when no
                     short transfer completed inside the window: a SYN lost behind a full FIFO
                     waits 1 s, longer than a --quick window)
  setup_s/teardown_s build + shape, and teardown, of a single-tor run with 8, 64 and 256 hosts
                     (the run's own timers: where the seconds of an `up` go)
  up_in_process_s    the same runs' `orchestrator.run` in this process (no interpreter start)
  whole_process      for 64 and 256 hosts, the whole `testbed up` process of a workload-free
                     0.5 s run (prometheus off) and Mininet's whole `mn --switch lxbr
                     --controller none --topo single,N --link tc,bw=100 --test none` process
                     (egress only, one class), both timed from outside, runs alternating,
                     medians (7 of each, 3 with --short). Mininet is installed with apt when
                     missing (never with --quick).
  ratio_vs_mininet_64/_256   whole-process testbed up / whole-process mn, from those medians:
                     the targets are ≤ 0.30 at 64 hosts and ≤ 0.15 at 256
  leafspine_setup_s  build + shape and teardown of a 256-host leaf-spine (8 leaves × 32 hosts,
                     4 spines)
  leafspine_1000_s   the whole `up` of a workload-free 1000-host leaf-spine (20 × 50, 4 spines)

Run as root: `.venv/bin/python benchmarks/shaping.py [--short | --quick]` (--short: shorter
runs, no 1000-host fabric; --quick: every measurement once at its smallest size, 1.5-2 s runs,
Prometheus off, 8 hosts, Mininet only if installed: it checks that the benchmark runs, in
seconds, and its figures mean little). The machine's speed varies from hour to hour; compare
figures of one run.
Mininet is never cleaned with `mn -c`, which deletes /tmp/*.log: its own exit removes its links,
and the machine-wide sysctls its start raises (TCP buffers among them) are put back after it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from testbed.run.orchestrator import run
from testbed.scenario.resolve import load_scenario_data

# what every run sets unless it sets its own; --quick shortens the warm-up and turns
# Prometheus off (its start and final scrape would be most of a 2 s run)
DEFAULTS: dict[str, Any] = {"measure": {"warmup": "2s", "cooldown": "0s"}}


def run_one(name: str, data: dict[str, Any]) -> dict[str, Any]:
    data = {**DEFAULTS, **data}
    s = load_scenario_data({"name": name, **data}, "benchmark")
    with tempfile.TemporaryDirectory() as d:
        return run(s, out=Path(d) / "run").summary


def goodput(rate: str, duration: str, mtu: int = 1500) -> tuple[float, float, float]:
    s = run_one(
        "goodput",
        {
            "duration": duration,
            "topology": {"hosts": 2, "link_rate": rate, "mtu": mtu},
            "tc_profile": "fifo",
            "workloads": {"linkcheck": {"pattern": "single", "short": False}},
        },
    )
    busy, steal = s["host_cpu"]["busy"], s["host_cpu"]["steal"]
    (flow,) = s["linkcheck"]["bulk"]
    ratio = flow["goodput_bps"] / s["linkcheck"]["link_rate_bps"]
    wire = next(x for x in s["links"] if x["node"] == "h1" and x["direction"] == "up")
    print(
        f"goodput at {rate:>7}, MTU {mtu}: {flow['goodput_bps'] / 1e6:8.2f} Mbit/s = {ratio:.4f} of the cap "
        f"(wire {wire['classes']['be']['rate_bps'] / 1e6:.2f} Mbit/s), CPU busy {busy:.0%}, "
        f"steal {steal:.0%}"
    )
    return ratio, busy, steal


def short_fct(profile: str, loaded: bool, rate: str, duration: str) -> float | None:
    """Mean completion time of the short transfers inside the window; None when none
    completed there (behind a full FIFO a lost SYN waits for TCP's 1 s initial RTO, longer
    than a --quick run's window)."""
    lc: dict[str, Any] = {
        "pattern": "single",
        "short": True,
        "short_size": "10KB",
        "short_interval": "50ms",
    }
    if profile == "fifo":
        lc["bulk_dscp"] = ["CS1"] if loaded else []
    else:
        lc["bulk_classes"] = ["low"] if loaded else []
        lc["short_class"] = "high"
    s = run_one(
        "isolation",
        {
            "duration": duration,
            "topology": {"hosts": 2, "link_rate": rate},
            "tc_profile": profile,
            "workloads": {"linkcheck": lc},
        },
    )
    st = s["linkcheck"]["short"]["fct_s"]
    if not st["count"]:
        print(f"short 10 KB transfers, {profile:>12}: none completed inside the window")
        return None
    print(
        f"short 10 KB transfers, {profile:>12}, {'low class saturated' if loaded else 'idle link':>19}: "
        f"mean {st['mean'] * 1e3:7.2f} ms  p99 {st['p99'] * 1e3:7.2f} ms  (n={st['count']})"
    )
    return st["mean"]


def small_flow_over_link(rate: str, mtu: int, duration: str, warmup: str = "1s") -> float | None:
    """The worst case for a token bucket: every bucket full when a small flow starts."""
    with tempfile.TemporaryDirectory() as d:
        cdf = Path(d) / "small.csv"
        cdf.write_text("bytes,cdf\n4000,0\n100000,1\n")
        s = run_one(
            "small",
            {
                "duration": duration,
                "measure": {"warmup": warmup, "cooldown": warmup},
                "topology": {"hosts": 3, "link_rate": rate, "mtu": mtu},
                "tc_profile": "thesis-2band",
                "workloads": {"websearch": {"sizes": str(cdf), "utilization": "5%"}},
            },
        )
    w = s["websearch"]
    fastest = w["max_flow_rate_over_link"]
    print(
        f"small flows at {rate:>7}, MTU {mtu}: fastest {fastest or 0:.3f} of the link, "
        f"{w['flows_over_link_rate']} of {w['fct_s']['all']['count']} above it"
    )
    return w["max_flow_rate_over_link"]


def setup_teardown(topology: dict[str, Any]) -> tuple[float, float, float]:
    """(build + shape, teardown, the whole up) of a workload-free run, in this process."""
    t0 = time.monotonic()
    s = run_one(
        "scale",
        {
            "duration": "0.5s",
            "measure": {"warmup": "0s", "cooldown": "0s"},
            "topology": {"link_rate": "100mbit", **topology},
            "tc_profile": "thesis-2band",
            "metrics": {"prometheus": "off"},
        },
    )
    wall = time.monotonic() - t0
    setup = s["setup_s"]["build"] + s["setup_s"]["shape"]
    n = len({x["node"] for x in s["links"] if x["tier"] == "host"})
    print(
        f"{topology.get('kind', 'single-tor'):>10} {n:4d} hosts: build {s['setup_s']['build']:.2f} s "
        f"+ shape {s['setup_s']['shape']:.2f} s ({len(s['links'])} directions, 2 classes each), "
        f"teardown {s['teardown_s']:.2f} s; whole up {wall:.2f} s"
    )
    return setup, s["teardown_s"], wall


def scale_scenario(folder: Path, hosts: int) -> Path:
    """What a user would time: a workload-free single-ToR run of 0.5 s, no Prometheus."""
    f = folder / f"scale-{hosts}.yaml"
    f.write_text(
        "name: scale\nduration: 0.5s\nmeasure: {warmup: 0s, cooldown: 0s}\n"
        f"topology: {{hosts: {hosts}, link_rate: 100mbit}}\ntc_profile: thesis-2band\n"
        "metrics: {prometheus: off}\n"
    )
    return f


def timed(cmd: list[str]) -> float | None:
    """Wall time of a whole process, from outside; None if it failed. Run as from a user's
    shell: bytecode is written (a PYTHONDONTWRITEBYTECODE of the benchmark's own environment
    would make every run compile testbed's changed modules again)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    took = time.monotonic() - t0
    if r.returncode != 0:
        print(f"failed: {' '.join(cmd)}: {(r.stderr or r.stdout).strip()[-300:]}")
        return None
    return took


def whole_process(hosts: int, runs: int, with_mininet: bool) -> dict[str, Any]:
    """`testbed up` and Mininet's `mn` for the same host count, alternating, each timed as a
    whole process from outside (interpreter start, imports, kernel probe, guardian, build,
    shaping, the 0.5 s run, teardown, exit); medians."""
    testbed = str(Path(sys.executable).with_name("testbed"))
    ours: list[float] = []
    theirs: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        scenario = scale_scenario(Path(d), hosts)
        # one run not counted: it writes the bytecode of a changed source tree (as a user's
        # first command does once) and the kernel probe's cache
        timed([testbed, "up", str(scenario), "--out", f"{d}/warm"])
        for i in range(runs):
            t = timed([testbed, "up", str(scenario), "--out", f"{d}/run{i}"])
            if t is not None:
                ours.append(t)
            if with_mininet and (m := mininet(hosts)) is not None:
                theirs.append(m)
    out: dict[str, Any] = {
        "testbed_up_s": round(statistics.median(ours), 2) if ours else None,
        "mininet_s": round(statistics.median(theirs), 2) if theirs else None,
        "runs": runs,
    }
    out["ratio"] = (
        round(out["testbed_up_s"] / out["mininet_s"], 3)
        if out["testbed_up_s"] and out["mininet_s"]
        else None
    )
    print(
        f"{hosts:4d} hosts, whole processes, median of {runs}: testbed up {out['testbed_up_s']} s "
        f"(all {[round(x, 2) for x in ours]}), mn {out['mininet_s']} s "
        f"(all {[round(x, 2) for x in theirs]}): ratio {out['ratio']}"
    )
    return out


def mininet_available() -> bool:
    return shutil.which("mn") is not None


def ensure_mininet() -> bool:
    """Mininet is the benchmark's own dependency, not testbed's: install it here if missing."""
    if shutil.which("mn") is None:
        print("installing mininet (apt-get install mininet bridge-utils) for the comparison")
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "mininet", "bridge-utils"],
            capture_output=True,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    return shutil.which("mn") is not None


# What Mininet's fixLimits() raises machine-wide (and never puts back); new namespaces inherit
# the TCP buffer sizes, so they would change every later testbed run on this machine.
MININET_SYSCTLS = (
    "fs/file-max", "net/core/wmem_max", "net/core/rmem_max", "net/ipv4/tcp_rmem",
    "net/ipv4/tcp_wmem", "net/core/netdev_max_backlog", "net/ipv4/neigh/default/gc_thresh1",
    "net/ipv4/neigh/default/gc_thresh2", "net/ipv4/neigh/default/gc_thresh3",
    "net/ipv4/route/max_size", "kernel/pty/max",
)  # fmt: skip


def mininet(hosts: int) -> float | None:
    saved = {k: Path("/proc/sys", k).read_text() for k in MININET_SYSCTLS}
    try:
        return _mininet(hosts)
    finally:
        for k, v in saved.items():
            Path("/proc/sys", k).write_text(v)


def _mininet(hosts: int) -> float | None:
    cmd = ["mn", "--switch", "lxbr", "--controller", "none", "--topo", f"single,{hosts}",
           "--link", "tc,bw=100", "--test", "none"]  # fmt: skip
    return timed(cmd)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--short", action="store_true", help="shorter runs, no 1000-host fabric")
    size.add_argument(
        "--quick",
        action="store_true",
        help="seconds: every measurement once, smallest sizes (checks that it runs; the "
        "figures are not worth comparing)",
    )
    ap.add_argument(
        "--whole-process-only",
        action="store_true",
        help="only the whole-process comparison with Mininet (64 and 256 hosts)",
    )
    args = ap.parse_args()
    quick = args.quick
    runs = 1 if quick else 3 if args.short else 7
    scale_hosts = (8,) if quick else (64, 256)
    if args.whole_process_only:
        have = mininet_available() if quick else ensure_mininet()
        whole = {str(n): whole_process(n, runs, have) for n in scale_hosts}
        print(json.dumps({"whole_process": whole}))
        return 0
    if quick:
        DEFAULTS.update(measure={"warmup": "0.5s", "cooldown": "0s"}, metrics={"prometheus": "off"})
    d = "1.5s" if quick else "5s" if args.short else "10s"
    rates = ("10mbit", "100mbit", "1gbit", "2.5gbit", "5gbit", "10gbit")
    measured = {rate: goodput(rate, d) for rate in (("100mbit",) if quick else rates)}
    jumbo = {rate: goodput(rate, d, 9000) for rate in (("1gbit",) if quick else rates[2:])}
    small_cases = [("100mbit", 1500)] if quick else [
        (rate, mtu) for rate in ("10mbit", "100mbit", "1gbit") for mtu in (1500, 9000)
    ]  # fmt: skip
    small = {
        f"{rate}/{mtu}": small_flow_over_link(
            rate, mtu, "2s" if quick else "16s", "0.5s" if quick else "1s"
        )
        for rate, mtu in small_cases
    }
    iso = {}
    for profile in ("thesis-2band", "fifo"):
        idle = short_fct(profile, False, "100mbit", d)
        busy = short_fct(profile, True, "100mbit", d)
        iso[profile] = busy / idle if busy is not None and idle else None
    setup, teardown, up = {}, {}, {}
    for n in (8,) if quick else (8, 64, 256):
        setup[str(n)], teardown[str(n)], up[str(n)] = setup_teardown({"hosts": n})
    have_mn = mininet_available() if quick else ensure_mininet()
    if not have_mn:
        print(f"mininet {'is not installed' if quick else 'could not be installed'}: no comparison")
    whole = {str(n): whole_process(n, runs, have_mn) for n in scale_hosts}
    fabric = (
        {"kind": "leaf-spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 2}
        if quick
        else {"kind": "leaf-spine", "leaves": 8, "spines": 4, "hosts_per_leaf": 32}
    )
    ls = setup_teardown(fabric)
    big = None
    if not (quick or args.short):
        big = setup_teardown(
            {"kind": "leaf-spine", "leaves": 20, "spines": 4, "hosts_per_leaf": 50}
        )
    result = {
        "goodput_ratio": {k: round(v[0], 4) for k, v in measured.items()},
        "cpu_busy": {k: round(v[1], 2) for k, v in measured.items()},
        "cpu_steal": {k: round(v[2], 2) for k, v in measured.items()},
        "goodput_ratio_jumbo": {k: round(v[0], 4) for k, v in jumbo.items()},
        "cpu_busy_jumbo": {k: round(v[1], 2) for k, v in jumbo.items()},
        "cpu_steal_jumbo": {k: round(v[2], 2) for k, v in jumbo.items()},
        "small_flow_over_link": {k: None if v is None else round(v, 3) for k, v in small.items()},
        "priority_isolation": None
        if iso["thesis-2band"] is None
        else round(iso["thesis-2band"], 3),
        "fifo_isolation": None if iso["fifo"] is None else round(iso["fifo"], 3),
        "setup_s": {k: round(v, 3) for k, v in setup.items()},
        "teardown_s": {k: round(v, 3) for k, v in teardown.items()},
        "up_in_process_s": {k: round(v, 2) for k, v in up.items()},
        "whole_process": whole,
        "ratio_vs_mininet_64": whole.get("64", {}).get("ratio"),
        "ratio_vs_mininet_256": whole.get("256", {}).get("ratio"),
        "leafspine_setup_s": {
            "hosts": fabric["leaves"] * fabric["hosts_per_leaf"],
            "setup": round(ls[0], 3),
            "teardown": round(ls[1], 3),
        },
        "leafspine_1000_s": None if big is None else round(big[2], 2),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
