"""torch-ddp end to end on namespaces: real torch.distributed workers (gloo) over the shaped
links, their bytes in the scenario's class, physics checked against hand-computed values."""

from __future__ import annotations

import json

import pytest

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


def _scheduled(queue: str, barrier: bool) -> dict:
    """2 workers at 100 Mbit/s, a 4 MB ResNet-50 shape, 300 ms of compute, the thesis' static
    buffers of ≤ 1 MB: predict puts fifo + barrier at 463 ms and priority without a barrier
    at 390 ms (the job alone)."""
    job = {"backend": "torch-ddp", "model_size": "4MB", "compute_time": "300ms",
           "fusion": "static", "fusion_threshold": "1MB", "queue": queue, "barrier": barrier,
           "tc_class": "low"}  # fmt: skip
    return {"duration": "8s", "topology": {"hosts": 2, "link_rate": "100mbit"},
            "tc_profile": "thesis-2band", "workloads": {"horovod": job}}  # fmt: skip


def test_the_thesis_schedule_lands_on_predict_and_beats_fifo_with_a_barrier(tmp_path):
    """queue: priority, barrier: false, fusion: static (ddp_schedule.py) against fifo with a
    barrier over the same buffers. By hand: each uplink carries 2 (1 − 1/2) · 4 MB = 4 MB per
    iteration, 4e6 · 8 · 1514/1448 / 1e8 = 334.6 ms of frames, so no iteration is faster than
    that nor than its 300 ms of compute; every buffer is reduced once (the bytes), every rank
    does the same iterations, each schedule's steady state (the window's median iteration:
    predict gives the steady state) lands within 10 % of `testbed predict`, and priority
    without a barrier is the faster, as predicted (16 % apart).

    What the worker adds to the model, measured per reduction (2026-12-05, priority): ~14 ms
    of agreement rounds and ~8 ms of TCP over the model's 4 transfers on the critical path,
    417 ms against predict's 389.6 (quiet runs: means 1.053-1.076 × predict in 7, medians
    1.06 in 3 more). The mean is not the steady state: in one CI run 3 of 14 iterations took
    454-510 ms at 0 % steal (the link idle part of that time; cause not found), a mean 1.103 ×
    predict, median 1.075."""
    from testbed.scenario.resolve import load_scenario_data
    from testbed.workloads.training.model.predict import for_scenario
    from tests.bounds import time_at_most

    wire = 4e6 * 8 * FRAME / 100e6
    median, runs = {}, {}
    for queue, barrier in (("priority", False), ("fifo", True)):
        data = _scheduled(queue, barrier)
        s = run_scenario(tmp_path / queue, data)
        pred = for_scenario(load_scenario_data({"name": "itest", **data}, "test"))["iteration_s"]
        h = s["horovod"]
        # a count of iterations in the window is a time in disguise (50 % steal in a CI run
        # left 5 of the 16 a quiet machine fits): enough for a mean; time_at_most bounds the time
        assert s["status"] == "ok" and h["iterations_measured"] >= 3, h
        assert len(set(h["iterations_per_worker"].values())) == 1, h["iterations_per_worker"]
        assert h["min_iteration_over_compute"] >= 1.0
        it = h["iteration_time_s"]["mean"]
        assert it >= max(0.3, wire), (queue, it)
        steady = h["iteration_time_s"]["p50"]
        assert steady >= 0.9 * pred, (queue, steady, pred)
        time_at_most(steady, 1.1 * pred, s, f"{queue}: the median iteration against predict's")
        for link in s["links"]:
            if link["direction"] == "up" and link["node"] in h["iterations_per_worker"]:
                n = h["iterations_per_worker"][link["node"]]
                ratio = link["classes"]["low"]["bytes"] / n / 4e6
                assert 1.0 <= ratio <= 1.15, (queue, link["node"], ratio)
        for host in h["iterations_per_worker"]:  # what the agreement between ranks cost
            log = (tmp_path / queue / "run" / "horovod" / f"worker-{host}.log").read_text()
            line = next((x for x in log.splitlines() if x.startswith("agreement:")), log[-300:])
            print(f"{queue} ({steady * 1e3:.1f} ms, predicted {pred * 1e3:.1f} ms) {host}: {line}")
        median[queue] = steady
        runs[queue] = s
    time_at_most(
        median["priority"], 0.95 * median["fifo"], runs["priority"], f"priority vs fifo {median}"
    )


@pytest.mark.parametrize(
    ("job", "field"),
    [
        ({"mode": "real", "barrier": False}, "workloads.horovod.barrier"),
        ({"backend": "horovod", "queue": "priority"}, "workloads.horovod.queue"),
        ({"backend": "horovod", "fusion": "static"}, "workloads.horovod.fusion"),
    ],
)
def test_a_schedule_the_backend_cannot_run_is_refused_before_anything_exists(tmp_path, job, field):
    p = tmp_path / "s.yaml"
    p.write_text(json.dumps({"name": "s", "topology": {"hosts": 2},
                             "workloads": {"horovod": {"backend": "torch-ddp", **job}}}))  # fmt: skip
    before = present_objects()
    r = run_cli("up", str(p), "--out", str(tmp_path / "run"))
    assert r.returncode == 2, r.stderr
    assert field in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert present_objects() == before and not (tmp_path / "run").exists()
