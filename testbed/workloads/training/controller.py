"""The training kinds' controller: Horovod's, or torch-ddp's for `backend: torch-ddp` (and the
`torch-ddp` kind)."""

from __future__ import annotations

from typing import Any

from testbed.workloads.controller import Context, Controller
from testbed.workloads.training.ddp import DdpJob
from testbed.workloads.training.horovod import HorovodJob


def make(name: str, cfg: Any, ctx: Context) -> Controller:
    job = DdpJob if cfg.backend == "torch-ddp" else HorovodJob
    return job(name, cfg, ctx)
