"""torch-ddp's pure parts: DDP's bucketing, GPU assignment, and the scenario's refusals."""

from __future__ import annotations

import pytest

from testbed.core.errors import EnvironmentProblem, ScenarioError
from testbed.network import preflight
from testbed.scenario.resolve import load_scenario_data
from testbed.workloads.training.gpus import gpu_assignment
from testbed.workloads.training.model.models import buckets_for
from tests.needs import need

MiB = 2**20


def test_buckets_follow_ddp_reverse_order_and_caps():
    # layers input → output, in float32 parameters; DDP walks them output → input
    params = [100_000, 200_000, 300_000, 50_000, 25_000]  # 0.4, 0.8, 1.2, 0.2, 0.1 MB
    # first bucket ≤ 1 MiB (1 048 576 B): layer 4 (100 000 B) + 3 (200 000 B) = 300 000;
    # + layer 2 (1 200 000 B) would exceed → closed. Then cap 2 MB: layer 2 (1.2 MB) + layer 1
    # (0.8 MB) = 2.0 MB ≤ 2 000 000 → same bucket; + layer 0 (0.4 MB) exceeds → new bucket.
    assert buckets_for(params, 2_000_000) == [[4, 3], [2, 1], [0]]


def test_a_layer_larger_than_the_cap_gets_its_own_bucket():
    assert buckets_for([10, 1_000_000, 10], 1000) == [[2], [1], [0]]
    # a cap below 1 MiB caps the first bucket too
    assert buckets_for([100, 100, 100], 800) == [[2, 1], [0]]  # 400 + 400 = 800 ≤ 800


def test_gpu_assignment():
    assert gpu_assignment(None, [0, 1], 3) == [[], [], []]
    assert gpu_assignment(1, [], 2) == [[], []]  # no GPU visible: CPU
    assert gpu_assignment(1, [0, 1], 4) == [[0], [1], [0], [1]]  # two workers share each GPU
    assert gpu_assignment(2, [0, 1, 2, 3], 2) == [[0, 1], [2, 3]]
    # a worker computes on its first device: shared lists are rotated so workers spread out
    assert gpu_assignment("all", [0, 1], 2) == [[0, 1], [1, 0]]
    assert gpu_assignment("all", [0, 1], 3) == [[0, 1], [1, 0], [0, 1]]
    assert gpu_assignment([1], [0, 1], 2) == [[1], [1]]
    assert gpu_assignment([2, 3], [0, 1, 2, 3], 2) == [[2, 3], [3, 2]]


def _load(job: dict) -> object:
    return load_scenario_data(
        {"name": "d", "topology": {"hosts": 3}, "workloads": {"horovod": job}}, "t"
    )


def test_backend_and_bucket_cap_defaults():
    s = _load({"backend": "torch-ddp"})
    h = s.workloads.horovod
    assert h.backend == "torch-ddp" and h.bucket_cap == 25 * MiB and h.gpus is None
    assert _load({}).workloads.horovod.backend == "horovod"


@pytest.mark.parametrize(
    ("job", "needle"),
    [
        # schedules a backend cannot run (issue 31): Horovod negotiates its own order and
        # fuses dynamically; a real model steps with its framework's own schedule
        ({"queue": "priority"}, "workloads.horovod.queue"),
        ({"fusion": "static"}, "workloads.horovod.fusion"),
        ({"fusion": "buckets"}, "workloads.horovod.fusion"),
        ({"queue": "lifo"}, "workloads.horovod.queue"),
        ({"backend": "torch-ddp", "fusion": "greedy"}, "workloads.horovod.fusion"),
        ({"backend": "torch-ddp", "mode": "real", "barrier": False}, "workloads.horovod.barrier"),
        ({"mode": "real", "barrier": False}, "workloads.horovod.barrier"),
        ({"backend": "torch-ddp", "mode": "real", "queue": "priority"}, "workloads.horovod.queue"),
        ({"backend": "torch-ddp", "mode": "real", "fusion": "static"}, "workloads.horovod.fusion"),
        ({"backend": "mpi"}, "workloads.horovod.backend"),
        ({"gpus": 0}, "workloads.horovod.gpus"),
        ({"gpus": True}, "workloads.horovod.gpus"),
        ({"gpus": [0, 0]}, "workloads.horovod.gpus"),
        ({"gpus": "some"}, "workloads.horovod.gpus"),
        ({"backend": "torch-ddp", "bucket_cap": 0}, "workloads.horovod.bucket_cap"),
        ({"device": "cuda"}, "workloads.horovod.device"),  # gpus decides the device
        ({"backend": "torch-ddp", "timeline": True}, "workloads.horovod.timeline"),  # Horovod's
        ({"nccl_sockets_per_thread": 4}, "workloads.horovod.nccl_sockets_per_thread"),
        (
            {"nccl_socket_threads": 16, "nccl_sockets_per_thread": 8},
            "workloads.horovod.nccl_sockets_per_thread",
        ),
    ],
)
def test_bad_combinations_name_the_field(job, needle):
    with pytest.raises(ScenarioError, match=needle.replace(".", r"\.")):
        _load(job)


@pytest.mark.parametrize(
    ("job", "needle"),
    [
        ({"queue": "priority"}, "backend torch-ddp"),
        ({"fusion": "static"}, "backend torch-ddp"),
        ({"backend": "torch-ddp", "mode": "real", "barrier": False}, "mode: synthetic"),
    ],
)
def test_a_refused_schedule_says_which_backend_or_mode_can(job, needle):
    with pytest.raises(ScenarioError, match=needle) as e:
        _load(job)
    assert len(str(e.value).strip().splitlines()) == 1


def test_torch_ddp_accepts_the_thesis_schedule_in_synthetic_mode():
    """queue: priority, barrier: false, fusion: static (or dynamic): run by ddp_schedule."""
    from testbed.workloads.training.model.synthetic import fusion_of

    for fusion in ("static", "dynamic", "buckets"):
        job = {"backend": "torch-ddp", "queue": "priority", "barrier": False, "fusion": fusion}
        h = _load(job).workloads.horovod
        assert (h.queue, h.barrier, fusion_of(h)) == ("priority", False, fusion)
    assert fusion_of(_load({"backend": "torch-ddp"}).workloads.horovod) == "buckets"
    assert fusion_of(_load({}).workloads.horovod) == "dynamic"
    assert _load({"barrier": False}).workloads.horovod.barrier is False  # Horovod's, as before


def _gpu_scenario(job, runtime="netns", image=None):
    data = {"name": "g", "runtime": runtime, "topology": {"hosts": 2},
            "workloads": {"horovod": job}}  # fmt: skip
    if image:
        data["docker"] = {"image": image}
    return load_scenario_data(data, "t")


def test_workers_may_share_a_gpu_with_a_warning(monkeypatch):
    """Two workers on one GPU: allowed (each has its own NCCL_HOSTID), said in a warning."""
    monkeypatch.setattr(preflight, "visible_gpus", lambda: [0])
    monkeypatch.setattr(preflight, "torch_has_cuda", lambda: True)
    w = preflight.check_workloads(_gpu_scenario({"backend": "torch-ddp", "gpus": 1}))
    assert len(w) == 1 and "2 workers share" in w[0]
    monkeypatch.setattr(preflight, "visible_gpus", lambda: [0, 1])
    assert preflight.check_workloads(_gpu_scenario({"backend": "torch-ddp", "gpus": 1})) == []


def test_gpu_refusals_name_the_field_and_the_fix(monkeypatch):
    monkeypatch.setattr(preflight, "visible_gpus", lambda: [0])
    # a CPU-only torch cannot use the GPU, whichever backend
    monkeypatch.setattr(preflight, "torch_has_cuda", lambda: False)
    for job in ({"backend": "torch-ddp", "gpus": 1}, {"gpus": 1}):
        with pytest.raises(EnvironmentProblem, match=r"CPU-only build.*download\.pytorch\.org"):
            preflight.check_workloads(_gpu_scenario(job))
    monkeypatch.setattr(preflight, "torch_has_cuda", lambda: True)
    with pytest.raises(EnvironmentProblem, match="ask for at most 1"):
        preflight.check_workloads(_gpu_scenario({"backend": "torch-ddp", "gpus": 2}))
    with pytest.raises(EnvironmentProblem, match=r"devices \[3\] do not exist"):
        preflight.check_workloads(_gpu_scenario({"backend": "torch-ddp", "gpus": [3]}))
    # Horovod on a GPU needs a wheel with NCCL: the one installed here (install.sh's) has none
    monkeypatch.setattr(preflight, "horovod_has_nccl", lambda python=None: False)
    with pytest.raises(EnvironmentProblem, match=r"scripts/build-horovod\.sh --gpu"):
        preflight.check_workloads(_gpu_scenario({"gpus": 1}))
    monkeypatch.setattr(preflight, "horovod_has_nccl", lambda python=None: True)
    assert preflight.check_workloads(_gpu_scenario({"gpus": 1}))  # only the sharing warning
    monkeypatch.setattr(preflight.shutil, "which", lambda b: "/usr/bin/" + b)  # a toolkit
    with pytest.raises(EnvironmentProblem, match=r"Dockerfile\.gpu"):
        preflight.check_workloads(_gpu_scenario({"gpus": 1}, runtime="docker"))
    assert preflight.check_workloads(_gpu_scenario({"gpus": 1}, runtime="docker", image="mine"))
    # the default node image installs this machine's torch; a user's image is its own business
    monkeypatch.setattr(preflight, "torch_has_cuda", lambda: False)
    ddp = {"backend": "torch-ddp", "gpus": 1}
    with pytest.raises(EnvironmentProblem, match="CPU-only build"):
        preflight.check_workloads(_gpu_scenario(ddp, runtime="docker"))
    assert preflight.check_workloads(_gpu_scenario(ddp, runtime="docker", image="mine"))


def test_the_cpu_torch_installed_here_is_seen_as_cpu_only():
    """install.sh installs torch's CPU build; found without importing torch."""
    import importlib.metadata

    need("torch", "torch is installed by install.sh")
    if "+cpu" not in importlib.metadata.version("torch"):
        pytest.skip("this machine's torch is not the CPU build")
    assert preflight.torch_has_cuda() is False


def test_the_cpu_horovod_wheel_has_no_nccl():
    """install.sh's wheel, asked in a child process as preflight does."""
    need("horovod.torch", "Horovod is installed by install.sh")
    assert preflight.horovod_has_nccl() is False


def test_a_horovod_that_does_not_import_is_an_error_not_no_nccl(tmp_path):
    """A Python whose horovod.torch raises on import (here: a stand-in interpreter that exits
    1 with an ImportError) is refused with the reason, not taken for a CPU build."""
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\necho 'ImportError: libc10.so: cannot open shared object' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    with pytest.raises(EnvironmentProblem, match=r"does not import.*libc10\.so"):
        preflight.horovod_has_nccl(str(fake))


def test_each_gpu_worker_is_its_own_nccl_host(monkeypatch, tmp_path):
    from testbed.scenario.topology import single_tor
    from testbed.workloads.controller import Context
    from testbed.workloads.training.ddp import DdpJob

    monkeypatch.setattr(preflight, "visible_gpus", lambda: [0])
    s = _gpu_scenario({"backend": "torch-ddp", "gpus": 1})
    job = DdpJob(
        "horovod", s.workloads.horovod, Context(s, single_tor(s, "abc123"), None, tmp_path)
    )
    assert job.devices == [[0], [0]] and job.on_gpu
    envs = [job._device_env(h, d) for h, d in zip(job.hosts(), job.devices, strict=True)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "0"]
    assert len({e["NCCL_HOSTID"] for e in envs}) == 2


def test_a_container_counts_its_gpus_from_zero(monkeypatch, tmp_path):
    """Docker passes through only the requested devices, which the container numbers 0, 1,
    ...: CUDA_VISIBLE_DEVICES=2 there would name a device it does not have."""
    from types import SimpleNamespace

    from testbed.scenario.topology import single_tor
    from testbed.workloads.controller import Context
    from testbed.workloads.training.ddp import DdpJob

    monkeypatch.setattr(preflight, "visible_gpus", lambda: [0, 1, 2, 3])
    s = _gpu_scenario({"backend": "torch-ddp", "gpus": 2})
    for renumbers, want in ((False, ["0,1", "2,3"]), (True, ["0,1", "0,1"])):
        rt = SimpleNamespace(renumbers_gpus=renumbers)
        job = DdpJob(
            "horovod", s.workloads.horovod, Context(s, single_tor(s, "abc123"), rt, tmp_path)
        )
        assert job.devices == [[0, 1], [2, 3]]  # what the container is given
        envs = [job._device_env(h, d) for h, d in zip(job.hosts(), job.devices, strict=True)]
        assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == want
        assert {e["CUDA_DEVICE_ORDER"] for e in envs} == {"PCI_BUS_ID"}  # nvidia-smi's order
    # `all`: the second container is given [1, 0] and starts on host GPU 1, its device 1
    s = _gpu_scenario({"backend": "torch-ddp", "gpus": "all"})
    monkeypatch.setattr(preflight, "visible_gpus", lambda: [0, 1])
    job = DdpJob("horovod", s.workloads.horovod,
                 Context(s, single_tor(s, "abc123"), SimpleNamespace(renumbers_gpus=True), tmp_path))  # fmt: skip
    envs = [job._device_env(h, d) for h, d in zip(job.hosts(), job.devices, strict=True)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1", "1,0"]


def test_training_without_iptables_is_refused_before_anything_exists(monkeypatch):
    """The DSCP rule for Gloo and NCCL traffic is an iptables rule: no iptables, no run."""
    real_which = preflight.shutil.which
    monkeypatch.setattr(
        preflight.shutil, "which", lambda b: None if b == "iptables" else real_which(b)
    )
    with pytest.raises(
        EnvironmentProblem, match=r"iptables binary is missing.*apt-get install iptables"
    ):
        preflight.require_binaries(_gpu_scenario({"backend": "torch-ddp"}))
    no_training = load_scenario_data({"name": "n", "topology": {"hosts": 2}}, "t")
    if real_which("nsenter") and real_which("setpriv"):
        preflight.require_binaries(no_training)  # iptables is only needed for training
