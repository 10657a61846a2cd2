"""What a training worker exports (Horovod and torch-DDP alike): each iteration's duration, in
seconds of scenario time, and the count of iterations."""

from __future__ import annotations

from typing import Any


def registry() -> tuple[Any, dict[str, Any]]:
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from testbed.core.exporters import DURATION_BUCKETS

    reg = CollectorRegistry()
    return reg, {
        "iteration": Histogram("testbed_iteration_duration_seconds", "Wall time of one training iteration",
                               ["worker"], buckets=DURATION_BUCKETS, registry=reg),
        "iterations": Counter("testbed_iterations", "Training iterations completed", ["worker"], registry=reg),
    }  # fmt: skip
