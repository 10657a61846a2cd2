"""Workload fidelity: does the emulated training take the time it should, and does the load
generator produce the traffic it was asked for? Prints what it measures and ends with one
JSON line:

  compute_bound_overhead  (mean iteration time - configured compute) / configured, on a fast
                        link: what the emulation adds to the sleep it was asked for (the
                        allreduce, Horovod's cycle, scheduling); its own setting is the
                        reference, so this is overhead, not fidelity
  compute_bound_error   |mean iteration time - predicted| / predicted on the same run: the
                        event model (below) adds the allreduce the compute cannot hide
  network_bound_error   |mean iteration time - predicted| / predicted, on a slow link (compute is
                        a quarter of the network time); predicted by testbed.workloads.training.model.predict
                        (the thesis ch. 4 event model with Horovod's fusion: ring allreduce
                        2(1-1/N)·S/B_eff per fused buffer, in the order backward makes gradients
                        ready, B_eff = TCP goodput with the ring's ACKs). At 10 Mbit/s
                        with a 1 MB model the error grows to ~0.17: each ring step then pays
                        packet serialisation latency (1.2 ms per frame) the formula leaves out.
  arrival_rate_error    |achieved - configured| / configured arrival rate per host at 23 flows/s
                        per host over 8 hosts (184 flows/s in all) at 1 Gbit/s
  flow_size_ks          Kolmogorov–Smirnov distance between the drawn flow sizes and the CDF
  iterations            iterations measured in the two Horovod runs together
  ddp_compute_bound_overhead, ddp_compute_bound_error, ddp_network_bound_error
                        the same checks with backend: torch-ddp (torch.distributed over
                        gloo; bucket_cap 5 MB; the prediction models DDP's own buckets, the
                        first at most 1 MiB)

Run as root: `.venv/bin/python benchmarks/workloads.py [--short | --quick]` (--short: 15 s
runs; --quick: 2 s runs with a 0.5 s warm-up, Prometheus off and smaller jobs, to check in
seconds that it runs: its figures mean little).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from testbed.run.orchestrator import run
from testbed.scenario.resolve import load_scenario_data
from testbed.workloads.training.model import predict
from testbed.workloads.websearch import flowsizes

# what every run sets besides its own fields (--quick: a short warm-up, Prometheus off)
DEFAULTS: dict[str, Any] = {}


def run_one(data: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The run's summary and the rows of its flows.csv (none without web-search load)."""
    s = load_scenario_data({"name": "bench", **DEFAULTS, **data}, "benchmark")
    with tempfile.TemporaryDirectory(prefix="tb-bench-") as d:
        summary = run(s, out=Path(d) / "run").summary
        flows = Path(d) / "run" / "flows.csv"
        if not flows.exists():
            return summary, []
        with open(flows, newline="") as f:
            return summary, list(csv.DictReader(f))


def horovod(
    rate: str, compute: str, model_size: str, duration: str, backend: str = "horovod"
) -> tuple[float, float, int, Any]:
    job: dict[str, Any] = {"model_size": model_size, "compute_time": compute, "barrier": True}
    if backend == "torch-ddp":  # buckets the size of Horovod's fusion buffer in the other runs
        job.update(backend=backend, bucket_cap="5MB")
    data = {
        **DEFAULTS,
        "duration": duration,
        "topology": {"hosts": 2, "link_rate": rate},
        "workloads": {"horovod": job},
    }
    s, _ = run_one(data)
    h = s["horovod"]
    scen = load_scenario_data({"name": "bench", **data}, "benchmark")
    return h["iteration_time_s"]["mean"], h["compute_time_s"], h["iterations_measured"], scen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--short", action="store_true", help="15 s runs instead of 30 s")
    size.add_argument(
        "--quick",
        action="store_true",
        help="2 s runs: checks in seconds that it runs; the figures are not worth comparing",
    )
    args = ap.parse_args()
    d = "2s" if args.quick else "15s" if args.short else "30s"
    # the compute-bound job's compute; the network-bound job's model and compute (compute
    # about a quarter of the allreduce): --quick shrinks them, so that a 2 s run holds iterations
    cb_compute = "100ms" if args.quick else "400ms"
    nb_model, nb_compute = ("2MB", "50ms") if args.quick else ("10MB", "200ms")
    if args.quick:
        DEFAULTS.update(measure={"warmup": "0.5s", "cooldown": "0s"}, metrics={"prometheus": "off"})

    mean, compute, n1, scen = horovod("1gbit", cb_compute, "1MB", d)
    o1 = (mean - compute) / compute
    pred = predict.for_scenario(scen)["iteration_s"]
    e1 = abs(mean - pred) / pred
    print(
        f"compute-bound (2 workers, 1 MB, 1 Gbit/s): mean iteration {mean * 1e3:.1f} ms, "
        f"compute {compute * 1e3:.0f} ms (overhead {o1:+.3f}), predicted {pred * 1e3:.1f} ms "
        f"(error {e1:.3f}; {n1} iterations)"
    )

    mean, compute, n2, scen = horovod("100mbit", nb_compute, nb_model, d)
    pred = predict.for_scenario(scen)["iteration_s"]
    e2 = abs(mean - pred) / pred
    print(
        f"network-bound (2 workers, {nb_model}, 100 Mbit/s): mean iteration {mean * 1e3:.1f} ms, "
        f"predicted {pred * 1e3:.1f} ms, error {e2:.3f} ({n2} iterations)"
    )

    mean, compute, n3, scen = horovod("1gbit", cb_compute, "1MB", d, "torch-ddp")
    o4 = (mean - compute) / compute
    pred = predict.for_scenario(scen)["iteration_s"]
    e4 = abs(mean - pred) / pred
    print(
        f"torch-ddp compute-bound (2 workers, 1 MB, 1 Gbit/s): mean iteration {mean * 1e3:.1f} ms, "
        f"compute {compute * 1e3:.0f} ms (overhead {o4:+.3f}), predicted {pred * 1e3:.1f} ms "
        f"(error {e4:.3f}; {n3} iterations)"
    )
    mean, compute, n4, scen = horovod("100mbit", nb_compute, nb_model, d, "torch-ddp")
    pred = predict.for_scenario(scen)["iteration_s"]
    e5 = abs(mean - pred) / pred
    print(
        f"torch-ddp network-bound (2 workers, {nb_model}, 100 Mbit/s): mean iteration "
        f"{mean * 1e3:.1f} ms, predicted {pred * 1e3:.1f} ms, error {e5:.3f} ({n4} iterations)"
    )

    rate = 23.0  # per host: 184 flows/s over the 8 hosts
    s, flows = run_one({
        "duration": "2s" if args.quick else "12s" if args.short else "20s",
        "topology": {"hosts": 8, "link_rate": "1gbit"},
        "workloads": {"websearch": {"arrival_rate": rate}},
    })  # fmt: skip
    ws = s["websearch"]
    achieved = ws["arrival_rate_per_host"]["achieved"]
    e3 = abs(achieved - rate) / rate
    sizes = sorted(int(r["size_bytes"]) for r in flows)
    cdf = flowsizes.WEBSEARCH
    n = len(sizes)
    ks = max(max(abs(flowsizes.cdf_at(cdf, x) - i / n), abs(flowsizes.cdf_at(cdf, x) - (i + 1) / n))
             for i, x in enumerate(sizes))  # fmt: skip
    print(
        f"web-search at {rate:.0f} flows/s per host, 8 hosts (1 Gbit/s): achieved {achieved:.1f} flows/s "
        f"(error {e3:.3f}), {ws['flows_completed']}/{ws['flows_started']} flows completed; "
        f"KS distance of {n} sizes to the CDF {ks:.4f}"
    )
    print(json.dumps({
        "compute_bound_overhead": round(o1, 4),
        "compute_bound_error": round(e1, 4),
        "network_bound_error": round(e2, 4),
        "arrival_rate_error": round(e3, 4),
        "flow_size_ks": round(ks, 4),
        "iterations": n1 + n2,
        "ddp_compute_bound_overhead": round(o4, 4),
        "ddp_compute_bound_error": round(e4, 4),
        "ddp_network_bound_error": round(e5, 4),
        "ddp_iterations": n3 + n4,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
