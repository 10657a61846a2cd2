"""Controller for a torch-ddp training job: the same job as training/horovod.py (records,
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
import time
from typing import Any

from testbed.core.errors import RunFailure
from testbed.core.stopping import checkpoint
from testbed.network.runtime.base import Launch, NodeProcess
from testbed.workloads.training.horovod import HorovodJob, nccl_env
from testbed.workloads.training.model.synthetic import fusion_of

log = logging.getLogger(__name__)
WORKER_MODULE = "testbed.workloads.training.workers.ddp_worker"
STORE_MODULE = "testbed.workloads.training.workers.ddp_store"
PRELOAD = ("torch", "torch.distributed", WORKER_MODULE, STORE_MODULE)


class DdpJob(HorovodJob):
    """The same records and summary section as Horovod's: report and sweep treat both alike."""

    kind = "torch-ddp"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.store: NodeProcess | None = None

    def worker_config(self) -> dict[str, Any]:
        return {
            **super().worker_config(),
            "bucket_cap": self.cfg.bucket_cap,
            "queue": self.cfg.queue,
            "fusion": fusion_of(self.cfg),
            "fusion_threshold": self.cfg.fusion_threshold,
            "dist_backend": "nccl" if self.on_gpu else "gloo",
            "device": "cuda" if self.on_gpu else "cpu",
        }

    def _start_store(self) -> str:
        """torch's TCP store, a process of this machine (the runtime's root namespace, where
        the management bridge is), forked from the fork server that imported torch."""
        port_file = self.dir / "store.port"
        port_file.unlink(missing_ok=True)
        addr = str(self.topo.mgmt_bridge_ip)
        argv = [addr, str(len(self.hosts())), str(port_file)]
        launch = Launch(STORE_MODULE, argv, self.dir / "store.log", preload=tuple(PRELOAD))
        self.store = self.rt.spawn_python(None, launch)
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if self.store.poll() is not None:
                raise RunFailure(
                    f"{self.name}: the torch-ddp store exited; see {self.dir / 'store.log'}"
                )
            if time.monotonic() > deadline:
                raise RunFailure(f"{self.name}: the torch-ddp store did not start within 60 s")
            checkpoint()
            time.sleep(0.05)
        return f"{addr}:{port_file.read_text().strip()}"

    def launch(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        hosts = self.hosts()
        self._mark(hosts)  # the policy's runner first: the workers' config carries its part
        config = self.dir / "worker-config.json"
        cfg = self.worker_config()
        config.write_text(json.dumps(cfg))
        store = self._start_store()
        base_env = {
            "GLOO_SOCKET_IFNAME": "eth0",
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
            **(nccl_env(self.cfg) if self.on_gpu else {}),
        }
        self._record_backend(cfg["dist_backend"], base_env)
        for rank, (h, devices) in enumerate(zip(hosts, self.devices, strict=True)):
            env = {**base_env, **self._device_env(h, devices)}
            out = self.records_of(h)
            argv = [
                "--config", str(config), "--out", str(out), "--worker", h.name,
                "--store", store, "--rank", str(rank), "--world", str(len(hosts)),
                "--go", str(self.go_file), *self.metrics_arg(h),
            ]  # fmt: skip
            self.spawn(
                h, "worker", WORKER_MODULE, argv, out, env, preload=PRELOAD, gid=self.owner_gid
            )
        fusion = fusion_of(self.cfg)
        size = self.cfg.bucket_cap if fusion == "buckets" else self.cfg.fusion_threshold
        log.info(
            "%s: %d %s torch-ddp workers (%s), %s fusion ≤ %d B, %s%s, DSCP %d (%s), "
            "compute %.0f ms/iteration",
            self.name, len(hosts), self.cfg.mode, cfg["dist_backend"], fusion, size,
            self.cfg.queue, "" if self.cfg.barrier else ", no barrier", self.cfg.d.dscp,
            self.cfg.d.tc_class, self.cfg.d.compute_time * 1e3,
        )  # fmt: skip

    def stop(self) -> None:
        super().stop()
        if self.store is not None:
            self.store.terminate()
            self.store = None
