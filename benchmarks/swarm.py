"""What `testbed sweep --swarm` buys and costs, on machines emulated here (tests/docker/
machines.py: containers running their own Docker engine, joined to a swarm this machine
manages; the manager drained, so points run on the emulated machines only).

  points_per_hour_1, _3   a sweep of POINTS short runs (linkcheck, 2 hosts, 3 s) on 1, then
                          on 3 machines, timed from outside as whole `testbed sweep` processes
                          (after a first sweep that pulled the image everywhere)
  ratio                   points_per_hour_3 / points_per_hour_1. On one 2-core machine the
                          emulated machines share the same two cores: the ratio measures how
                          much of a point's wall time is waiting (setup, the run's own clock,
                          teardown, the way back) that other machines can overlap, not the
                          speed-up of real machines, which is up to their number
  start_s, back_s         per point, medians: service created → its run's t0 (scheduling,
                          container start, `testbed up`'s setup), and the run's end → its
                          folder received on the manager (teardown, tar, upload)
  recovery_s              a machine killed 5 s into a 20 s point: kill → the point's folder
                          back from another machine, and the part of it that is the rerun

Run as root on a machine whose engine is in no swarm: `.venv/bin/python benchmarks/swarm.py
[--points 6] [--quick]`; the JSON line is the last line. --quick: 2 machines (the _3 figures are
then of 2), no warm-up sweep, one point per sweep, a 6 s point killed 2 s in, to check that it
runs (about a minute and a half with the node image built); its figures mean little.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.docker.machines import Machines  # noqa: E402
from tests.docker.test_swarm import running_points  # noqa: E402

BASE = {
    "name": "swarm-bench", "duration": "3s", "measure": {"warmup": "1s", "cooldown": "0.5s"},
    "topology": {"hosts": 2, "link_rate": "20mbit"}, "workloads": {"linkcheck": {}},
}  # fmt: skip


def write(d: Path, seeds: list[int], duration: str = "3s") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "base.yaml").write_text(yaml.safe_dump({**BASE, "duration": duration}))
    (d / "sweep.yaml").write_text(
        yaml.safe_dump({"name": "b", "base": "base.yaml", "seeds": seeds})
    )
    return d / "sweep.yaml"


def sweep(f: Path, out: Path) -> float:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "sweep", str(f), "--swarm",
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    if r.returncode != 0:
        raise SystemExit(f"sweep failed ({r.returncode}): {r.stderr[-2000:]}")
    return time.monotonic() - t0


def overheads(out: Path) -> tuple[list[float], list[float]]:
    start, back = [], []
    for run in sorted((out / "runs").iterdir()):
        point = json.loads((run / "point.json").read_text())
        s = json.loads((run / "summary.json").read_text())
        sw = point["swarm"]
        start.append(s["started_at"] - sw["launched_at"])
        end = s["started_at"] + s["duration_s"] + s["drain_s"] + s["teardown_s"]
        back.append(sw["received_at"] - end)
    return start, back


def availability(m: Machines, active: list[str]) -> None:
    for name in m.names():
        node = m.node_of(name)
        spec = node.attrs["Spec"]
        node.update({**spec, "Availability": "active" if name in active else "drain"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, help="points per sweep (default: 6; 1 with --quick)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="2 machines, 1 point, a 6 s point lost: checks that it runs; figures mean little",
    )
    args = ap.parse_args()
    if args.points is None:
        args.points = 1 if args.quick else 6
    with tempfile.TemporaryDirectory(prefix="swarm-bench-") as d:
        doc = bench(Path(d), args.points, args.quick)
    print(json.dumps(doc))


def bench(tmp: Path, points: int, quick: bool) -> dict[str, object]:
    machines = 2 if quick else 3
    loss_s, kill_after = (6, 2) if quick else (20, 5)
    with Machines(machines) as m:
        if not quick:  # the image everywhere first, so that no timed sweep pulls it
            sweep(write(tmp / "warm", list(range(100, 100 + machines))), tmp / "warm-out")
        seeds = list(range(1, points + 1))
        availability(m, m.names()[:1])
        wall_1 = sweep(write(tmp / "one", seeds), tmp / "one-out")
        availability(m, m.names())
        wall_3 = sweep(write(tmp / "three", [s + 50 for s in seeds]), tmp / "three-out")
        start, back = overheads(tmp / "three-out")
        # machine loss: one 20 s point (--quick: 6 s), its machine killed 5 s (2 s) into the run
        f = write(tmp / "loss", [900], duration=f"{loss_s}s")
        proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "sweep", str(f), "--swarm",
                                 "--out", str(tmp / "loss-out")], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        victim = None
        while victim is None and proc.poll() is None:
            for t in running_points(m.c):
                victim = m.c.nodes.get(t["NodeID"]).attrs["Description"]["Hostname"]
            time.sleep(0.5)
        time.sleep(kill_after)
        t_kill = time.time()
        m.kill(victim)
        proc.communicate(timeout=1200)
        point = json.loads((tmp / "loss-out" / "runs" / "000-s900" / "point.json").read_text())
        recovery = point["swarm"]["received_at"] - t_kill
        rerun = point["swarm"]["received_at"] - point["swarm"]["launched_at"]
    return {
        "points": points,
        "machines": machines,
        "points_per_hour_1": round(points / wall_1 * 3600, 1),
        "points_per_hour_3": round(points / wall_3 * 3600, 1),
        "ratio": round(wall_1 / wall_3, 2),
        "start_s": round(statistics.median(start), 2),
        "back_s": round(statistics.median(back), 2),
        "recovery_s": round(recovery, 1),
        "recovery_rerun_s": round(rerun, 1),
        "lost_node": victim,
    }


if __name__ == "__main__":
    main()
