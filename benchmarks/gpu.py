"""GPU hosts: NCCL through a shaped 10 Gbit/s link, and a GPU job's iteration time against the
prediction. torch-ddp, 2 workers, netns runtime, one GPU each (both on one GPU where the
machine has one: each worker has its own NCCL_HOSTID, so NCCL accepts that, and the compute
is emulated, so sharing does not change it). Its anchor is benchmarks/gpu_anchor.py (the same
NCCL ranks over loopback, no testbed). On an H100 VM (docs/results/gpu/README.md) this read 0.141
of the cap where the anchor moved 14.6 Gbit/s: the emulated path's packet rate, not NCCL.

  nccl_wire_ratio     a bulk all-reduce (100 MB, 1 ms of compute: the link is never idle for
                      long) through links in `link_mode: fast`: the job's class on h1's
                      uplink, from the kernel's class counters over the measured window, over
                      the 10 Gbit/s cap. Physics keeps it ≤ 1; ≥ 0.85 means NCCL's sockets
                      fill the shaped link. (Not payload ÷ (iteration − compute): DDP's
                      all-reduce overlaps backward, so that read above 1.)
  nccl_wire_ratio_exact   the same in `link_mode: exact` (frame by frame: 0.141 on an H100 VM,
                      the emulated path's packet rate)
  nccl_class_share    the share of all bytes on the workers' uplinks that went in the job's
                      class (low): the DSCP rule marks NCCL's sockets too
  iteration_error     a compute-heavier job (50 ms): |mean iteration − predicted| / predicted
                      (testbed.workloads.training.model.predict)
  gpus                GPUs this machine shows

On a machine without an NVIDIA GPU it builds both scenarios and the prediction, then says so,
prints no JSON line and exits 0; scripts/gpu-device.sh fails when a GPU machine's run of it
printed no JSON line.

Run as root: `.venv/bin/python benchmarks/gpu.py [--quick | --short]`; the JSON line is the last
line. --quick: 3 s runs with a 0.5 s warm-up, to check in seconds that it runs; its figures mean
little. --short: 12 s bulk runs and a 15 s timed run (a lent GPU machine's minutes are few).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from testbed.network.preflight import visible_gpus
from testbed.run.orchestrator import run
from testbed.scenario.resolve import load_scenario_data
from testbed.workloads.training.model import predict

RATE = 10_000_000_000


def scenario(
    compute: str,
    duration: str,
    quick: bool,
    mode: str = "fast",
    nccl: tuple[int, int] | None = None,
    tcp: str = "reno",
    bucket: str = "25MiB",
    rate: int = RATE,
) -> Any:
    data = {
        "name": "gpu-bench", "duration": "3s" if quick else duration,
        "measure": {"warmup": "0.5s", "cooldown": "0s"} if quick else
                   {"warmup": "3s", "cooldown": "2s"},
        "topology": {"hosts": 2, "link_rate": rate, "link_mode": mode, "tcp": tcp},
        "tc_profile": "thesis-2band",
        "workloads": {"horovod": {"backend": "torch-ddp", "model_size": "100MB",
                                  "compute_time": compute, "bucket_cap": bucket,
                                  "tc_class": "low", "gpus": 1}},
    }  # fmt: skip
    if nccl is not None:  # NCCL's socket threads and sockets per thread (its defaults: 1, 1)
        job = data["workloads"]["horovod"]
        job["nccl_socket_threads"], job["nccl_sockets_per_thread"] = nccl
    return load_scenario_data(data, "benchmark")


def job(s: Any, compute: str) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="tb-gpu-")) / "run"
    summary = run(s, out=out).summary
    print(f"compute {compute}: run folder {out}")
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="3 s runs: checks in seconds that it runs; the figures mean little",
    )
    ap.add_argument("--short", action="store_true", help="12 s bulk runs, a 15 s timed run")
    ap.add_argument(
        "--nccl",
        metavar="THREADSxSOCKETS",
        help="e.g. 4x4: NCCL's socket threads "
        "and sockets per thread in the bulk runs (default: NCCL's own, 1x1)",
    )
    ap.add_argument(
        "--bulk-only", action="store_true", help="the bulk all-reduce in fast mode only"
    )
    ap.add_argument("--tcp", default="reno", help="the hosts' congestion control (default reno)")
    ap.add_argument("--bucket", default="25MiB", help="DDP's bucket cap in the bulk runs")
    ap.add_argument("--gbit", type=float, default=10.0, help="the link rate of the bulk runs")
    args = ap.parse_args()
    nccl = tuple(int(x) for x in args.nccl.split("x")) if args.nccl else None
    # everything but the runs first, so that a machine without a GPU checks it too
    bulk_len, timed_len = ("12s", "15s") if args.short else ("25s", "30s")
    modes = ("fast",) if args.bulk_only else ("fast", "exact")
    bulk_s = {
        m: scenario(
            "1ms", bulk_len, args.quick, m, nccl, args.tcp, args.bucket, round(args.gbit * 1e9)
        )
        for m in modes
    }  # type: ignore[arg-type]
    s = scenario("50ms", timed_len, args.quick)
    pred = predict.for_scenario(s)["iteration_s"]
    gpus = visible_gpus()
    if not gpus:
        print(
            "benchmarks/gpu.py: this machine shows no NVIDIA GPU (no /proc/driver/nvidia/gpus, "
            "no nvidia-smi); nothing measured"
        )
        return 0
    wire, share = {}, {}
    for mode, bs in bulk_s.items():
        bulk = job(bs, "1ms")
        ups = [x for x in bulk["links"] if x["direction"] == "up" and x["tier"] == "host"]
        h1 = next(x for x in ups if x["node"] == "h1")
        wire[mode] = h1["classes"]["low"]["rate_bps"] / round(args.gbit * 1e9)
        total = sum(c["bytes"] for x in ups for c in x["classes"].values())
        share[mode] = sum(x["classes"]["low"]["bytes"] for x in ups) / total if total else 0.0
        it = bulk["horovod"]["iteration_time_s"]["mean"]
        print(f"bulk all-reduce, link_mode {mode}: h1's uplink carried {wire[mode]:.3f} of the "
              f"cap in the job's class, {share[mode]:.4f} of all uplink bytes in that class; "
              f"mean iteration {it * 1e3:.1f} ms")  # fmt: skip
    if args.bulk_only:
        print(json.dumps({"nccl_wire_ratio": round(wire["fast"], 3), "nccl": args.nccl or "1x1",
                          "tcp": args.tcp, "bucket": args.bucket, "gbit": args.gbit}))  # fmt: skip
        return 0
    timed = job(s, "50ms")
    mean = timed["horovod"]["iteration_time_s"]["mean"]
    print(f"50 ms of compute: mean iteration {mean * 1e3:.1f} ms, predicted {pred * 1e3:.1f} ms")
    print(json.dumps({"nccl_wire_ratio": round(wire["fast"], 3),
                      "nccl_wire_ratio_exact": round(wire["exact"], 3),
                      "nccl_class_share": round(share["fast"], 4),
                      "iteration_error": round(abs(mean - pred) / pred, 3), "gpus": len(gpus)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
