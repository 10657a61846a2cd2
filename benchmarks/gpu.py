"""GPU hosts: NCCL through a shaped 10 Gbit/s link, and a GPU job's iteration time against the
prediction. torch-ddp, 2 workers, netns runtime, one GPU each (both on one GPU where the
machine has one: each worker has its own NCCL_HOSTID, so NCCL accepts that, and the compute
is emulated, so sharing does not change it; the two ranks' NCCL kernels time-slice the
GPU, light work at 1.25 GB/s, so a ratio well below 1 on one GPU is the first thing to doubt).

  nccl_goodput_ratio  allreduce payload per iteration / (iteration − compute) over the cap:
                      2(1 − 1/N)·S·8 / (t_iteration − t_compute) / 10 Gbit/s
  iteration_error     |mean iteration − predicted| / predicted (testbed.workloads.predict)
  gpus                GPUs this machine shows

On a machine without an NVIDIA GPU it prints why, and no JSON line.

Run as root: `.venv/bin/python benchmarks/gpu.py`; the JSON line is the last line.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from testbed.orchestrator import run
from testbed.preflight import visible_gpus
from testbed.scenario import load_scenario_data
from testbed.workloads import predict


def main() -> int:
    gpus = visible_gpus()
    if not gpus:
        print(
            "benchmarks/gpu.py: this machine shows no NVIDIA GPU (no /proc/driver/nvidia/gpus, "
            "no nvidia-smi); nothing measured"
        )
        return 0
    data = {
        "name": "gpu-bench", "duration": "30s",
        "topology": {"hosts": 2, "link_rate": "10gbit"}, "tc_profile": "thesis-2band",
        "workloads": {"horovod": {"backend": "torch-ddp", "model_size": "100MB",
                                  "compute_time": "50ms", "bucket_cap": "25MiB",
                                  "fusion_threshold": "25MiB", "tc_class": "low", "gpus": 1}},
    }  # fmt: skip
    s = load_scenario_data(data, "benchmark")
    out = Path(tempfile.mkdtemp(prefix="tb-gpu-")) / "run"
    summary = run(s, out=out).summary
    h = summary["horovod"]
    mean = h["iteration_time_s"]["mean"]
    payload = 2 * (1 - 1 / 2) * 100_000_000 * 8
    ratio = payload / (mean - 0.05) / 10e9
    pred = predict.for_scenario(s)["iteration_s"]
    print(f"mean iteration {mean * 1e3:.1f} ms, predicted {pred * 1e3:.1f} ms; run folder {out}")
    print(json.dumps({"nccl_goodput_ratio": round(ratio, 3),
                      "iteration_error": round(abs(mean - pred) / pred, 3), "gpus": len(gpus)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
