"""The thesis grid in miniature: what a sweep costs beyond its runs, and whether its figures
survive physics. Runs a 2 × 2 × 2 × 1 sweep (R_cp_to_nw × background load × priority scheme,
one seed) of examples/thesis-grid-base.yaml at 20 s per run through `testbed sweep`'s own
code path, then checks the records with nothing testbed computed:

  runs                     points run
  wall_s                   wall time of the whole sweep
  overhead_share           (wall - Σ run durations) / wall: set-up, worker start, drain,
                           collective stop, final scrape, teardown
  max_flow_rate_over_link  max over every completed flow of size · 8 / FCT / link rate,
                           from flows.csv (≤ 1.0: no flow beat the wire)
  censored_share           measured flows that had not finished at the drain limit
  arrival_rate_error       per host, |flows started in the window - flows the Poisson process
                           drew for it| / drawn, summed over the runs, worst host: the
                           generators' own error, separated from sampling noise (which is
                           printed too, against the configured rate)

Run as root: `.venv/bin/python benchmarks/grid.py [--out DIR] [--quick]`; the JSON line is the
last line. --quick: one point per scheme (R = 2, 25 % load) of 2 hosts, 3 s runs, Prometheus off,
to check in seconds that it runs; its figures mean little.
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from testbed.results import sweep as sw
from testbed.run.orchestrator import run
from testbed.workloads.websearch.controller import planned_flows

ROOT = Path(__file__).resolve().parents[1]
SWEEP = {
    "name": "grid-bench",
    "base": str(ROOT / "examples" / "thesis-grid-base.yaml"),
    "set": {"duration": "20s"},
    "axes": {
        "workloads.horovod.compute_to_network_ratio": [16, 4],
        "workloads.websearch.utilization": ["6.25%", "25%"],
    },
    "paired": {
        "scheme": {
            "same": {"workloads.horovod.tc_class": "high"},
            "low": {"workloads.horovod.tc_class": "low"},
        }
    },
    "seeds": [1],
    "compare": {"axis": "scheme", "baseline": "same"},
}
# --quick: the same sweep (both schemes, so the paired comparison is there) at its smallest
QUICK = {
    "set": {
        "duration": "3s", "topology.hosts": 2, "metrics.prometheus": "off",
        "measure.warmup": "0.5s", "measure.cooldown": "0s", "measure.drain": "5s",
    },
    "axes": {
        "workloads.horovod.compute_to_network_ratio": [2],
        "workloads.websearch.utilization": ["25%"],
    },
}  # fmt: skip


class Quiet:
    def start_point(self, p: sw.Point, done: int, total: int, eta: float | None) -> None:
        print(f"[{done + 1}/{total}] {p.title}", flush=True)

    def end_point(self, o: sw.Outcome, done: int, total: int) -> None:
        print(f"    {o.status} in {o.wall_s:.1f} s {o.error or ''}", flush=True)


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="keep the sweep here (default: a temporary folder)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="2 points of 2 hosts, 3 s each: checks in seconds that it runs",
    )
    args = ap.parse_args()
    if args.out:
        return grid(args.out, args.quick)
    with tempfile.TemporaryDirectory(prefix="tb-grid-") as d:
        return grid(Path(d), args.quick)


def grid(out: Path, quick: bool) -> int:
    spec_file = out / "sweep.yaml.in"
    out.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(yaml.safe_dump({**SWEEP, **QUICK} if quick else SWEEP, sort_keys=False))
    spec = sw.load_spec(spec_file)
    points = sw.expand(spec, spec_file)

    def run_one(s: Any, folder: Path, _ui: Any) -> dict[str, Any]:
        return run(s, out=folder).summary

    t0 = time.monotonic()
    outcomes = sw.run_sweep(spec, points, out, run_one, Quiet())
    wall = time.monotonic() - t0
    ran = [o for o in outcomes if o.status in ("ok", "failed")]
    durations = sum(o.point.scenario.duration for o in ran)

    fastest, measured, censored = 0.0, 0, 0
    started: dict[str, int] = {}
    drawn: dict[str, int] = {}
    configured = 0.0
    for o in outcomes:
        folder = out / "runs" / o.point.folder
        link = o.point.scenario.topology.link_rate
        flows = rows(folder / "flows.csv")
        for f in flows:
            if f["completed"] == "True":
                fastest = max(fastest, int(f["size_bytes"]) * 8 / float(f["fct_s"]) / link)
        mine = [f for f in flows if f["measured"] == "True"]
        measured += len(mine)
        censored += sum(1 for f in mine if f["completed"] != "True")
        for f in mine:
            started[f["src"]] = started.get(f["src"], 0) + 1
        for host, _, _ in planned_flows(o.point.scenario):
            drawn[host] = drawn.get(host, 0) + 1
        s = o.point.scenario
        configured += s.workloads.websearch.d.arrival_rate * s.timeline().span  # type: ignore[union-attr]
    error = max(abs(started.get(h, 0) - n) / n for h, n in drawn.items())
    sampling = abs(sum(drawn.values()) / len(drawn) - configured) / configured
    print(f"sweep of {len(ran)} runs in {wall:.0f} s, {durations:.0f} s of it measured runs")
    print(f"flows per host: started {started}, drawn {drawn}")
    print(f"drawn vs configured rate (Poisson sampling, not an error of testbed): {sampling:.3f}")
    result = {
        "runs": len(ran),
        "wall_s": round(wall, 1),
        "overhead_share": round((wall - durations) / wall, 3),
        "max_flow_rate_over_link": round(fastest, 3),
        "censored_share": round(censored / max(1, measured), 4),
        "arrival_rate_error": round(error, 4),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
