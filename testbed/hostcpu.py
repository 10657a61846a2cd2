"""How much CPU this machine had during the measured window. Rates and times measured on a
busy machine, or on a VM whose hypervisor takes time away (steal), come out low; the summary
says so instead of leaving the user to guess. Read from /proc/stat, all CPUs together."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

STAT = Path("/proc/stat")
STEAL_WARN = 0.05  # of the machine's CPU time over the window
BUSY_WARN = 0.95


@dataclass(frozen=True)
class CpuTimes:
    busy: int  # jiffies since boot: user, nice, system, irq, softirq (guest time is in user)
    steal: int  # taken by the hypervisor while this machine wanted to run
    total: int  # the above plus idle and iowait


def parse(line: str) -> CpuTimes:
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in line.split()[1:9])
    busy = user + nice + system + irq + softirq
    return CpuTimes(busy, steal, busy + steal + idle + iowait)


def read(path: Path = STAT) -> CpuTimes:
    return parse(path.read_text().split("\n", 1)[0])


def between(a: CpuTimes, b: CpuTimes) -> dict[str, float | int | None]:
    """Shares of the machine's CPU time between two reads (1.0 = every core, all the time)."""
    span = b.total - a.total
    if span <= 0:
        return {"cores": os.cpu_count(), "busy": None, "steal": None}
    return {
        "cores": os.cpu_count(),
        "busy": round((b.busy - a.busy) / span, 3),
        "steal": round((b.steal - a.steal) / span, 3),
    }


def warnings(cpu: dict[str, float | int | None]) -> list[str]:
    out = []
    steal, busy = cpu.get("steal"), cpu.get("busy")
    if isinstance(steal, float) and steal > STEAL_WARN:
        out.append(
            f"the hypervisor took {steal:.0%} of this machine's CPU during the measured window "
            "(steal time): rates and times may fall short of what the links allow; rerun on a "
            "quieter machine or compare with a run that had none"
        )
    if isinstance(busy, float) and busy > BUSY_WARN:
        out.append(
            f"this machine's CPU was {busy:.0%} busy during the measured window: rates and "
            "times may be limited by the CPU, not the links (fewer hosts, lower rates or "
            "topology.mtu: 9000 need less)"
        )
    return out
