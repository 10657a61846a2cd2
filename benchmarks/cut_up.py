"""`testbed up` of one leaf-spine on 1, 2 and 3 machines (issue 76), the machines emulated on
this one (`machines.emulate`: each a network namespace, the cut links VXLAN tunnels over an
unshaped underlay): what placing a run over machines and tunnelling its cut links costs the
whole process, as a user times it.

A workload-free 0.5 s run of a 64-host leaf-spine (4 leaves × 16 hosts, 2 spines, 100 Mbit/s,
Prometheus off): on one machine (no `machines:`), then placed by METIS over 2 and over 3
emulated machines; the three in turns within each round (one warm-up run of each first, not
counted), each figure the median of the rounds. Timed from outside (benchmarks/shaping.py's
`timed`: interpreter start, imports, placement, build, shaping, the run, teardown, exit).

  up_s          whole-process seconds, per machine count
  cut_links     the links each placement cut (a tunnel each: two VXLAN devices, two stitches)
  over_one      up_s over the one-machine run's

Emulated machines share this machine's cores and kernel, so this measures testbed's own work
for a cut (placement, tunnels, stitches), not the machines' network.

Run as root: `.venv/bin/python benchmarks/cut_up.py [--quick] [--rounds 5]` (--quick: a
2-leaf × 4-host fabric, one round: it checks that the benchmark runs). The JSON line is the
last line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shaping import timed  # benchmarks/ is not a package

from testbed.scenario.partition import place
from testbed.scenario.resolve import load_scenario_data
from testbed.scenario.topology import build_plan


def scenario(leaves: int, hosts_per_leaf: int, machines: int) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": f"cut-up-{machines}",
        "duration": "0.5s",
        "measure": {"warmup": "0s", "cooldown": "0s"},
        "metrics": {"prometheus": "off"},
        "tc_profile": "thesis-2band",
        "topology": {
            "kind": "leaf-spine",
            "leaves": leaves,
            "spines": 2,
            "hosts_per_leaf": hosts_per_leaf,
            "link_rate": "100mbit",
        },
        "workloads": {},
    }
    if machines > 1:
        data["machines"] = {"nodes": [f"m{i}" for i in range(1, machines + 1)], "emulate": True}
    return data


def cut_links(data: dict[str, Any]) -> int:
    if "machines" not in data:
        return 0
    s = load_scenario_data(data, "bench.yaml")
    return len(place(s, build_plan(s, "000000")).cut)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small fabric, one round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    leaves, per_leaf, rounds = (2, 4, 1) if args.quick else (4, 16, args.rounds)
    testbed = str(Path(sys.executable).with_name("testbed"))
    counts = (1, 2, 3)
    times: dict[int, list[float]] = {n: [] for n in counts}
    with tempfile.TemporaryDirectory() as d:
        files = {}
        for n in counts:
            data = scenario(leaves, per_leaf, n)
            files[n] = Path(d) / f"cut-up-{n}.yaml"
            files[n].write_text(yaml.safe_dump(data))
        cut = {n: cut_links(scenario(leaves, per_leaf, n)) for n in counts}
        for n in counts:  # bytecode, the kernel probe's cache: not counted
            timed([testbed, "up", str(files[n]), "--out", f"{d}/warm{n}"])
        for r in range(rounds):
            order = counts if r % 2 == 0 else tuple(reversed(counts))
            for n in order:
                t = timed([testbed, "up", str(files[n]), "--out", f"{d}/r{r}-{n}"])
                if t is not None:
                    times[n].append(t)
    up = {str(n): round(statistics.median(v), 2) if v else None for n, v in times.items()}
    one = up["1"]
    over = {k: round(v / one, 3) if v and one else None for k, v in up.items()}
    for n in counts:
        print(f"{leaves * per_leaf} hosts on {n} machine(s), {cut[n]} links cut: "
              f"{up[str(n)]} s (all {[round(x, 2) for x in times[n]]})")  # fmt: skip
    print(json.dumps({"hosts": leaves * per_leaf, "rounds": rounds, "up_s": up,
                      "cut_links": {str(n): c for n, c in cut.items()}, "over_one": over}))  # fmt: skip


if __name__ == "__main__":
    main()
