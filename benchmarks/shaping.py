"""Shaping fidelity and speed. Builds its own small topologies with `testbed`'s real code path
(orchestrator.run), prints what it measures, and ends with one JSON line:

  goodput_ratio      single-flow TCP goodput / configured cap (fifo profile); at most
                     1448/1514 ≈ 0.956, since HTB counts Ethernet frames and TCP carries 1448 B each
  priority_isolation mean completion time of short high-class transfers while the low class
                     saturates the link, over the same on an idle link (thesis-2band)
  fifo_isolation     the same ratio under the fifo profile: what priority buys
  setup_s/teardown_s build + shape, and teardown, for 8 and 64 hosts

Run as root: `.venv/bin/python benchmarks/shaping.py [--quick]`. If Mininet's `mn` is
installed (apt-get install mininet bridge-utils), its build + teardown time for the same host
counts is measured too, since this machine's speed varies from hour to hour.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from testbed.orchestrator import run
from testbed.scenario import load_scenario_data


def run_one(name: str, data: dict[str, Any]) -> dict[str, Any]:
    data = {"measure": {"warmup": "2s", "cooldown": "0s"}, **data}
    s = load_scenario_data({"name": name, **data}, "benchmark")
    with tempfile.TemporaryDirectory() as d:
        return run(s, out=Path(d) / "run").summary


def goodput(rate: str, duration: str) -> float:
    s = run_one(
        "goodput",
        {
            "duration": duration,
            "topology": {"hosts": 2, "link_rate": rate},
            "tc_profile": "fifo",
            "workloads": {"linkcheck": {"pattern": "single", "short": False}},
        },
    )
    (flow,) = s["linkcheck"]["bulk"]
    ratio = flow["goodput_bps"] / s["linkcheck"]["link_rate_bps"]
    wire = next(x for x in s["links"] if x["node"] == "h1" and x["direction"] == "up")
    print(
        f"goodput at {rate:>7}: {flow['goodput_bps'] / 1e6:8.2f} Mbit/s = {ratio:.4f} of the cap "
        f"(wire {wire['classes']['be']['rate_bps'] / 1e6:.2f} Mbit/s)"
    )
    return ratio


def short_fct(profile: str, loaded: bool, rate: str, duration: str) -> float:
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
    print(
        f"short 10 KB transfers, {profile:>12}, {'low class saturated' if loaded else 'idle link':>19}: "
        f"mean {st['mean'] * 1e3:7.2f} ms  p99 {st['p99'] * 1e3:7.2f} ms  (n={st['count']})"
    )
    return st["mean"]


def setup_teardown(hosts: int) -> tuple[float, float]:
    s = run_one(
        "scale",
        {
            "duration": "0.5s",
            "measure": {"warmup": "0s", "cooldown": "0s"},
            "topology": {"hosts": hosts, "link_rate": "100mbit"},
            "tc_profile": "thesis-2band",
        },
    )
    setup = s["setup_s"]["build"] + s["setup_s"]["shape"]
    print(
        f"{hosts:3d} hosts: build {s['setup_s']['build']:.2f} s + shape {s['setup_s']['shape']:.2f} s "
        f"({2 * hosts} directions, 2 classes each), teardown {s['teardown_s']:.2f} s"
    )
    return setup, s["teardown_s"]


def mininet(hosts: int) -> float | None:
    if shutil.which("mn") is None:
        return None
    cmd = [
        "mn",
        "--switch",
        "lxbr",
        "--controller",
        "none",
        "--topo",
        f"single,{hosts}",
        "--link",
        "tc,bw=100",
        "--test",
        "none",
    ]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    took = time.monotonic() - t0
    subprocess.run(["mn", "-c"], capture_output=True)
    if r.returncode != 0:
        return None
    print(f"{hosts:3d} hosts: mininet build + teardown {took:.2f} s")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs (noisier figures)")
    args = ap.parse_args()
    d = "5s" if args.quick else "10s"
    ratios = {rate: goodput(rate, d) for rate in ("10mbit", "100mbit", "1gbit")}
    iso = {}
    for profile in ("thesis-2band", "fifo"):
        idle = short_fct(profile, False, "100mbit", d)
        busy = short_fct(profile, True, "100mbit", d)
        iso[profile] = busy / idle
    setup, teardown, mn = {}, {}, {}
    for n in (8, 64):
        setup[str(n)], teardown[str(n)] = setup_teardown(n)
        mn[str(n)] = mininet(n)
    result = {
        "goodput_ratio": {k: round(v, 4) for k, v in ratios.items()},
        "priority_isolation": round(iso["thesis-2band"], 3),
        "fifo_isolation": round(iso["fifo"], 3),
        "setup_s": {k: round(v, 3) for k, v in setup.items()},
        "teardown_s": {k: round(v, 3) for k, v in teardown.items()},
        # Mininet (--switch lxbr --link tc,bw=100) build + teardown on this machine, if installed
        "mininet_s": {k: None if v is None else round(v, 3) for k, v in mn.items()},
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
