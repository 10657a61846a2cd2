"""Controller for a torch-ddp training job: the same job as workloads/horovod.py (records,
markers, start/stop, DSCP by the workers' group, exporters), launched as torch.distributed
workers reducing DDP's gradient buckets (ddp_worker.py).

- Rendezvous: torch's TCP store, served in the root namespace on the management bridge's
  address (ddp_store.py, forked from the host's fork server, which imported torch once), so
  ranks meet over the unshaped management path. No SSH, no torchrun.
- Data path: gloo pairs on the data interface (GLOO_SOCKET_IFNAME=eth0); with GPUs, NCCL forced
  onto its socket transport on that interface (horovod.NCCL_SETTINGS), so every gradient byte crosses
  the shaped, classified links. NCCL never sets IP_TOS: its packets get their DSCP from the
  same owner-group rule as Gloo's.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from testbed.errors import RunFailure
from testbed.metrics.exporters import HOROVOD_PORT
from testbed.runtime import forkserver
from testbed.runtime.base import NodeProcess
from testbed.stopping import checkpoint
from testbed.workloads.training.horovod import (
    WORKER_GID,
    HorovodJob,
    mark_group,
    nccl_env,
)

log = logging.getLogger(__name__)
WORKER_MODULE = "testbed.workloads.training.ddp_worker"
STORE_MODULE = "testbed.workloads.training.ddp_store"
PRELOAD = ("torch", "torch.distributed", WORKER_MODULE, STORE_MODULE)


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


class DdpJob(HorovodJob):
    name = "horovod"  # the same records and summary section: report and sweep treat both alike

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.store: NodeProcess | None = None

    def _config(self) -> dict[str, Any]:
        return {
            **super()._config(),
            "bucket_cap": self.cfg.bucket_cap,
            "dist_backend": "nccl" if self.on_gpu else "gloo",
            "device": "cuda" if self.on_gpu else "cpu",
        }

    def _start_store(self) -> str:
        fs = forkserver.shared(PRELOAD, self.dir / "forkserver.log")
        port_file = self.dir / "store.port"
        port_file.unlink(missing_ok=True)
        addr = str(self.topo.mgmt_bridge_ip)
        self.store = fs.spawn(
            Path(f"/proc/{os.getpid()}/ns/net"),  # this process' own (root) namespace
            STORE_MODULE,
            [addr, str(len(self.hosts)), str(port_file)],
            self.dir / "store.log",
            {},
        )
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if self.store.poll() is not None:
                raise RunFailure(f"the torch-ddp store exited; see {self.dir / 'store.log'}")
            if time.monotonic() > deadline:
                raise RunFailure("the torch-ddp store did not start within 60 s")
            checkpoint()
            time.sleep(0.05)
        return f"{addr}:{port_file.read_text().strip()}"

    def launch(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "worker-config.json"
        cfg = self._config()
        config.write_text(json.dumps(cfg))
        for h in self.hosts:
            mark_group(self.rt, h.netns, h.data_if, WORKER_GID, self.dscp)
        store = self._start_store()
        base_env = {
            "GLOO_SOCKET_IFNAME": "eth0",
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
            **(nccl_env(self.cfg) if self.on_gpu else {}),
        }
        self._record_backend(cfg["dist_backend"], base_env)
        for rank, (h, devices) in enumerate(zip(self.hosts, self.devices, strict=True)):
            env = {**base_env, **self._device_env(h, devices)}
            argv = [
                "--config", str(config),
                "--out", str(self.dir / f"iterations-{h.name}.csv"),
                "--worker", h.name,
                "--store", store,
                "--rank", str(rank),
                "--world", str(len(self.hosts)),
                "--go", str(self.go_file),
            ]  # fmt: skip
            if self.s.metrics.prometheus != "off":
                argv += ["--metrics", f"{h.mgmt_ip}:{HOROVOD_PORT}"]
            proc = self.rt.spawn_python(
                h.netns,
                WORKER_MODULE,
                argv,
                self.dir / f"worker-{h.name}.log",
                env,
                preload=PRELOAD,
                gid=WORKER_GID,
            )
            self.procs.append((h, proc))
        log.info(
            "torch-ddp: %d %s workers (%s), buckets of %d B, DSCP %d (%s), compute %.0f ms/iteration",
            len(self.hosts), self.cfg.mode, cfg["dist_backend"], self.cfg.bucket_cap, self.dscp,
            self.cfg.d.tc_class, self.cfg.d.compute_time * 1e3,
        )  # fmt: skip

    def stop(self) -> None:
        super().stop()
        if self.store is not None:
            self.store.terminate()
            self.store = None
