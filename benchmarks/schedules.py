"""Transfer schedules: does the training job alone take the time the event model says, under
every schedule testbed can run? Issue 31's check of torch-ddp's scheduled loop
(training/workers/ddp_schedule.py) against `testbed predict` (training/model/predict.py), at the thesis'
compute-to-network ratios. Prints a table and ends with one JSON line:

  errors       {schedule: {R: (measured − predicted) / predicted}} of the mean iteration
  max_error    the largest |error| (the aim: ≤ 0.05)
  iterations   iterations measured in all the runs together

Schedules (static fusion, the thesis' model `thesis-ns3` scaled to --model-size, its buffer
the largest layer + 1 as the thesis' run script sets it): fifo/barrier, fifo/no barrier,
priority/barrier, priority/no barrier (the thesis' own), and DDP's own buckets.
Each run is the job alone on one switch, `--hosts` workers, its own R, long enough for
`--iterations` iterations past a one-iteration warm-up. `--time-scale K` dilates every run
(links K times slower, compute K times longer: the per-step costs of a real ring, a
thread's wake-up or a small all-reduce, shrink K-fold against the transfers).

Run as root: `.venv/bin/python benchmarks/schedules.py [--quick] [--hosts N] [--time-scale K]`
(--quick: 2 workers, two ratios, two schedules, 3 iterations: checks in seconds that it runs).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from testbed.core.units import parse_size
from testbed.run.orchestrator import run
from testbed.scenario.resolve import load_scenario_data
from testbed.workloads.training.model import models, predict

SCHEDULES: dict[str, dict[str, Any]] = {
    "fifo/barrier": {"queue": "fifo", "barrier": True, "fusion": "static"},
    "fifo/no-barrier": {"queue": "fifo", "barrier": False, "fusion": "static"},
    "priority/barrier": {"queue": "priority", "barrier": True, "fusion": "static"},
    "priority/no-barrier": {"queue": "priority", "barrier": False, "fusion": "static"},
    "ddp-buckets": {"queue": "fifo", "barrier": True, "fusion": "buckets"},
}


def scenario(hosts: int, rate: str, model_bytes: int, ratio: float, k: float, sched: dict) -> dict:
    """The job alone, its duration long enough for the caller's iterations (set later)."""
    layers = models.scale_to(models.thesis_ns3_layers(), model_bytes)
    threshold = max(x.nbytes for x in layers) + 1  # GT: max(layer size) + 1
    job = {
        "kind": "torch-ddp", "model": "thesis-ns3", "model_size": f"{model_bytes}B",
        "fusion_threshold": f"{threshold}B", "bucket_cap": f"{threshold}B",
        "compute_to_network_ratio": ratio, **sched,
    }  # fmt: skip
    return {
        "name": "bench-schedules",
        "time_scale": k,
        "topology": {"hosts": hosts, "link_rate": rate},
        "tc_profile": "fifo",
        "metrics": {"prometheus": "off"},
        "workloads": {"job": job},
    }


def measure(data: dict, iterations: int) -> tuple[float, float, int]:
    """(mean iteration, predicted, iterations measured), in scenario seconds."""
    s = load_scenario_data(data, "benchmark")
    pred = predict.for_scenario(s)["iteration_s"]
    # a warm-up of one iteration and a half, then `iterations`, and half of one to end on
    data = {
        **data,
        "duration": f"{(iterations + 2) * pred:.3f}s",
        "measure": {"warmup": f"{1.5 * pred:.3f}s", "cooldown": f"{0.5 * pred:.3f}s"},
    }
    s = load_scenario_data(data, "benchmark")
    with tempfile.TemporaryDirectory(prefix="tb-bench-") as d:
        summary = run(s, out=Path(d) / "run").summary
    job = summary["job"]
    return job["iteration_time_s"]["mean"], pred, job["iterations_measured"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="seconds: 2 workers, 2 ratios")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--rate", default="100mbit")
    ap.add_argument("--model-size", default="8MB")
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--ratios", default="2,4,8,16")
    ap.add_argument("--schedules", default=",".join(SCHEDULES))
    args = ap.parse_args()
    ratios = [float(r) for r in args.ratios.split(",")]
    names = args.schedules.split(",")
    unknown = [n for n in names if n not in SCHEDULES]
    if unknown:
        print(f"--schedules: unknown {unknown}; choose from {', '.join(SCHEDULES)}")
        return 2
    hosts, iterations, model = args.hosts, args.iterations, parse_size(args.model_size)
    if args.quick:
        hosts, iterations, model, ratios = 2, 3, 1_000_000, [2.0, 16.0]
        names = ["fifo/barrier", "priority/no-barrier"]
    errors: dict[str, dict[str, float]] = {}
    total = 0
    print(f"{hosts} workers, {args.rate}, {model / 1e6:.1f} MB, time_scale {args.time_scale}")
    for name in names:
        for r in ratios:
            data = scenario(hosts, args.rate, model, r, args.time_scale, SCHEDULES[name])
            mean, pred, n = measure(data, iterations)
            err = (mean - pred) / pred
            errors.setdefault(name, {})[f"{r:g}"] = round(err, 4)
            total += n
            print(
                f"{name:>20}  R = {r:>4g}: {mean * 1e3:9.1f} ms measured, {pred * 1e3:9.1f} ms "
                f"predicted, {err:+.3f} ({n} iterations)",
                flush=True,
            )
    worst = max((abs(e) for per in errors.values() for e in per.values()), default=0.0)
    print(json.dumps({"errors": errors, "max_error": round(worst, 4), "iterations": total}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
