"""Small helpers the workload controllers share: stopping their node processes and reading
the per-host CSV records those processes write."""

from __future__ import annotations

import csv
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from testbed.network.runtime.base import NodeProcess


def present(markers: Iterable[Path]) -> int:
    """How many of these marker files exist."""
    return sum(1 for m in markers if m.exists())


def stop_all(popens: Iterable[NodeProcess], grace_s: float = 5.0) -> None:
    """SIGTERM every process still running, SIGKILL those that outlast `grace_s`. Idempotent."""
    popens = list(popens)
    for p in popens:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in popens:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def read_csvs(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Rows of every CSV that exists (a process that died early may have written none)."""
    rows: list[dict[str, Any]] = []
    for path in paths:
        if path.is_file():
            with open(path, newline="") as f:
                rows.extend(csv.DictReader(f))
    return rows


def count_rows(path: Path) -> int:
    """Data rows written so far to a CSV that a node process appends to (0 if none yet)."""
    try:
        with open(path, "rb") as f:
            return max(0, sum(1 for _ in f) - 1)
    except OSError:
        return 0
