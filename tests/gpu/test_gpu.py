"""GPU hosts: torch-ddp over NCCL through the shaped links (netns runtime). Skipped, with the
reason, on machines without an NVIDIA GPU."""

from __future__ import annotations

import json

import pytest

from testbed.network.preflight import horovod_has_nccl
from tests.integration.helpers import run_scenario


def test_nccl_bytes_cross_the_shaped_link_in_their_class(tmp_path):
    s = run_scenario(tmp_path, {
        "duration": "15s",
        "topology": {"hosts": 2, "link_rate": "10gbit"},
        "tc_profile": "thesis-2band",
        "workloads": {"horovod": {"backend": "torch-ddp", "model_size": "100MB",
                                  "compute_time": "50ms", "tc_class": "low", "gpus": 1}},
    })  # fmt: skip
    h = s["horovod"]
    assert s["status"] == "ok" and h["iterations"] >= 5
    env = json.loads((tmp_path / "run" / "horovod" / "backend-env.json").read_text())
    assert env["dist_backend"] == "nccl" and env["env"]["NCCL_SOCKET_IFNAME"] == "=eth0"
    ring = 2 * (1 - 1 / 2) * 100_000_000  # per uplink and iteration
    for x in s["links"]:
        if x["direction"] == "up":
            per_iteration = x["classes"]["low"]["bytes"] / h["iterations_per_worker"][x["node"]]
            assert 1.0 <= per_iteration / ring <= 1.15, per_iteration / ring
    assert h["min_iteration_over_compute"] >= 1.0


def test_horovod_reduces_gpu_tensors_with_nccl_in_their_class(tmp_path):
    """Horovod on a GPU: needs the wheel scripts/build-horovod.sh --gpu builds."""
    if not horovod_has_nccl():
        pytest.skip("the installed Horovod has no NCCL: bash scripts/build-horovod.sh --gpu")
    s = run_scenario(tmp_path, {
        "duration": "15s",
        "topology": {"hosts": 2, "link_rate": "10gbit"},
        "tc_profile": "thesis-2band",
        "workloads": {"horovod": {"model_size": "100MB", "compute_time": "50ms",
                                  "fusion_threshold": "25MiB", "tc_class": "low", "gpus": 1}},
    })  # fmt: skip
    h = s["horovod"]
    assert s["status"] == "ok" and h["iterations"] >= 5
    env = json.loads((tmp_path / "run" / "horovod" / "backend-env.json").read_text())
    assert env["dist_backend"] == "nccl" and env["env"]["NCCL_NET"] == "Socket"
    log = (tmp_path / "run" / "horovod" / "worker-h1.log").read_text()
    assert "Traceback" not in log
    ring = 2 * (1 - 1 / 2) * 100_000_000
    for x in s["links"]:
        if x["direction"] == "up":
            per_iteration = x["classes"]["low"]["bytes"] / h["iterations_per_worker"][x["node"]]
            assert 1.0 <= per_iteration / ring <= 1.15, per_iteration / ring


def test_real_mode_trains_on_the_gpu(tmp_path):
    """DDP on the GPU: ResNet-50 where torchvision is installed, else the small CNN."""
    s = run_scenario(tmp_path, {
        "duration": "20s",
        "topology": {"hosts": 2, "link_rate": "10gbit"},
        "workloads": {"horovod": {"backend": "torch-ddp", "mode": "real", "batch_size": 32,
                                  "gpus": 1}},
    })  # fmt: skip
    assert s["status"] == "ok" and s["horovod"]["iterations"] >= 3
    log = (tmp_path / "run" / "horovod" / "worker-h1.log").read_text()
    assert "nccl" in log and "Traceback" not in log
