"""torch-ddp end to end on namespaces: real torch.distributed workers (gloo) over the shaped
links, their bytes in the scenario's class, physics checked against hand-computed values."""

from __future__ import annotations

import json

from tests.needs import need

from .helpers import present_objects, run_cli, run_scenario

need("torch.distributed", "torch is installed by install.sh")

FRAME = 1514 / 1448  # wire bytes per payload byte of a full TCP segment (HTB counts frames)


def test_synthetic_ddp_moves_the_ring_bytes_in_its_class(tmp_path):
    rate = 100_000_000
    s = run_scenario(tmp_path, {
        "duration": "12s",
        "topology": {"hosts": 3, "link_rate": "100mbit"},
        "tc_profile": "thesis-2band",
        "workloads": {"horovod": {"backend": "torch-ddp", "model_size": "4MB",
                                  "compute_time": "200ms", "bucket_cap": "1MB",
                                  "tc_class": "low", "gpus": "auto"}},
    })  # fmt: skip
    h = s["horovod"]
    assert s["status"] == "ok" and h["iterations"] >= 5
    # ring allreduce: each uplink carries 2(1 - 1/N)·S per iteration = 2·(2/3)·4 MB
    ring = 2 * (1 - 1 / 3) * 4_000_000
    for link in s["links"]:
        if link["node"] in h["iterations_per_worker"]:
            n = h["iterations_per_worker"][link["node"]]
            per_iteration = link["classes"]["low"]["bytes"] / n
            # frames and ACKs on top of the payload; broken: gradients outside the class
            # (≪ 1), or more than one reduction per bucket (≫ 1)
            assert 1.0 <= per_iteration / ring <= 1.15, (link["node"], per_iteration / ring)
            assert link["classes"]["high"]["bytes"] < 0.01 * link["classes"]["low"]["bytes"]
    # no iteration faster than its compute, and none faster than the wire needs for the ring
    assert h["min_iteration_over_compute"] >= 1.0
    assert h["iteration_time_s"]["mean"] >= ring * FRAME * 8 / rate
    env = json.loads((tmp_path / "run" / "horovod" / "backend-env.json").read_text())
    assert env["dist_backend"] == "gloo" and env["env"]["GLOO_SOCKET_IFNAME"] == "eth0"
    assert any("gpus: auto" in w for w in s["warnings"])


def test_real_ddp_trains_over_the_links(tmp_path):
    s = run_scenario(tmp_path, {
        "duration": "10s",
        "topology": {"hosts": 2, "link_rate": "100mbit"},
        "tc_profile": "thesis-2band",
        "workloads": {"horovod": {"backend": "torch-ddp", "mode": "real", "tc_class": "low"}},
    })  # fmt: skip
    h = s["horovod"]
    assert s["status"] == "ok" and h["iterations"] >= 5
    # the CNN of ddp_worker.real: 3·16·9+16 + 16·32·9+32 + 2048·10+10 = 25 578 float32
    # parameters = 102 312 B; 2 workers: each uplink carries 2·(1/2)·102 312 B per iteration
    ring = 102_312
    n = h["iterations_per_worker"]["h1"]
    up = next(x for x in s["links"] if x["node"] == "h1" and x["direction"] == "up")
    per_iteration = up["classes"]["low"]["bytes"] / n
    assert 1.0 <= per_iteration / ring <= 1.4, per_iteration / ring


def test_gpus_on_a_machine_without_them_is_refused(tmp_path):
    p = tmp_path / "gpu.yaml"
    p.write_text(
        "name: g\ntopology: {hosts: 2}\nworkloads: {horovod: {backend: torch-ddp, gpus: 1}}\n"
    )
    before = present_objects()
    r = run_cli("up", str(p), "--out", str(tmp_path / "run"))
    assert r.returncode == 1, r.stderr
    assert "workloads.horovod.gpus" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert present_objects() == before and not (tmp_path / "run").exists()
