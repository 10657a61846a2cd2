"""GPUs for a training instance: which devices each worker gets, and whether this machine (and
its runtime) can train on them, refused before anything is created."""

from __future__ import annotations

from typing import Any

from testbed.core.errors import EnvironmentProblem
from testbed.network import preflight as machine
from testbed.network.runtime import registry
from testbed.scenario.topology import Host


def gpu_assignment(gpus: Any, visible: list[int], workers: int) -> list[list[int]]:
    """Device ids per worker: a count n gives each worker n devices, round-robin over the
    visible ones; `all` (and `auto`) every visible device, a list those ids. A worker computes
    on the first of its devices, so a shared list is rotated per worker: with `all` on two
    GPUs the two workers start on different ones. (Workers may share a device: each is its
    own host to NCCL, see HorovodJob._device_env.)"""
    if not visible or gpus is None:
        return [[] for _ in range(workers)]
    if isinstance(gpus, int) and not isinstance(gpus, bool):
        return [
            [visible[(k * gpus + j) % len(visible)] for j in range(gpus)] for k in range(workers)
        ]
    ids = list(visible) if gpus in ("all", "auto") else list(gpus)
    return [ids[k % len(ids) :] + ids[: k % len(ids)] for k in range(workers)]


def devices(cfg: Any, hosts: list[Host] | list[str]) -> dict[str, list[int]]:
    """Devices each worker's host gets (empty: none asked for, or none here)."""
    if cfg.gpus is None:
        return {}
    names = [h if isinstance(h, str) else h.name for h in hosts]
    per = gpu_assignment(cfg.gpus, machine.visible_gpus(), len(names))
    return {n: d for n, d in zip(names, per, strict=True) if d}


def preflight(name: str, cfg: Any, s: Any) -> list[str]:
    """Refuse GPU requests this machine cannot meet (exit 1, before anything exists); return
    the warnings of those it meets differently (`gpus: auto` on a machine without GPUs)."""
    if cfg.gpus is None:
        return []
    field = f"workloads.{name}.gpus"
    visible = machine.visible_gpus()
    if not visible:
        if cfg.gpus == "auto":
            return [f"{field}: auto, but this machine shows no GPU; training runs on CPU (gloo)"]
        raise EnvironmentProblem(
            f"{field}: {cfg.gpus!r} asks for GPUs, but this machine shows none "
            "(no /proc/driver/nvidia/gpus, no nvidia-smi); use gpus: auto or leave gpus out"
        )
    if isinstance(cfg.gpus, int) and cfg.gpus > len(visible):
        raise EnvironmentProblem(
            f"{field}: {cfg.gpus} per worker, but this machine shows {len(visible)}; ask for at "
            f"most {len(visible)}"
        )
    wanted = cfg.gpus if isinstance(cfg.gpus, list) else []
    missing = [g for g in wanted if g not in visible]
    if missing:
        raise EnvironmentProblem(
            f"{field}: devices {missing} do not exist here (visible: {visible})"
        )
    workers = len(cfg.hosts) if cfg.hosts else s.topology.hosts
    used = [g for d in gpu_assignment(cfg.gpus, visible, workers) for g in d]
    warnings = []
    if len(used) != len(set(used)):
        # NCCL accepts it because each worker has its own NCCL_HOSTID (HorovodJob._device_env)
        warnings.append(
            f"{field}: {workers} workers share this machine's {len(visible)} GPU(s) (NCCL allows "
            "it: each worker is a host of its own to NCCL); real-mode compute on a shared GPU is "
            "slower than on one of its own"
        )
    runtime = registry.get(s.runtime)
    problem = runtime.gpu_access(s) or stack_problem(
        runtime.node_python(s), horovod=cfg.backend == "horovod"
    )
    if problem:
        raise EnvironmentProblem(f"{field}: {problem}")
    return warnings


def stack_problem(python: str, horovod: bool) -> str | None:
    """Why the hosts' Python cannot train on GPUs, or None. `python` says whose it is (the
    runtime's node_python): this machine's .venv, the default node image (this machine's torch,
    a Horovod built without NCCL), or a user's own image (trusted)."""
    if python == "own image":
        return None
    image = python == "default image"
    if machine.torch_has_cuda() is False:
        if image:
            return (
                "the default node image installs this machine's torch, a CPU-only build (no "
                "libtorch_cuda); install a CUDA build into .venv, or name a GPU image in "
                "docker.image (images/Dockerfile.gpu)"
            )
        return (
            "the installed torch is a CPU-only build (no libtorch_cuda); install a CUDA "
            "build into .venv (.venv/bin/pip install torch --index-url "
            "https://download.pytorch.org/whl/cu130, the CUDA of your driver), or leave gpus out"
        )
    if horovod and image:
        return (
            "the default node image's Horovod is built without NCCL; build "
            "images/Dockerfile.gpu and name it in docker.image, or use backend: torch-ddp"
        )
    if horovod and not machine.horovod_has_nccl():
        return (
            "the installed Horovod is built without NCCL (CPU only); build the GPU wheel with "
            "`bash scripts/build-horovod.sh --gpu` and install it into .venv, or use "
            "backend: torch-ddp"
        )
    return None
