"""How much CPU this machine had during the measured window. Rates and times measured on a
busy machine, or on a VM whose hypervisor takes time away (steal), come out low; the summary
says so instead of leaving the user to guess. Read from /proc/stat, all CPUs together.

And what the CPUs' receive backlogs dropped (/proc/net/softnet_stat): a veth hands each packet
to a CPU's backlog, which holds at most net.core.netdev_max_backlog packets. A CPU that falls
behind for a few ms while a shaped queue keeps releasing packets to it drops the rest there:
losses outside every queue the scenario shaped, which TCP takes for congestion. At the
kernel's default of 1000 the dilated ensemble test lost 76-1,521 packets in 3 runs of 10 and
its images fell 26 % short in one (2026-11-28, receive steering on); at 10,000, none in 20.
The counter is the machine's, not the run's: other traffic on the machine counts too."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

STAT = Path("/proc/stat")
SOFTNET = Path("/proc/net/softnet_stat")
MAX_BACKLOG = Path("/proc/sys/net/core/netdev_max_backlog")
BACKLOG_MIN = 10_000  # install.sh sets it; Mininet's fixLimits sets 5000 for the same reason
STEAL_WARN = 0.05  # of the machine's CPU time over the window
BUSY_WARN = 0.95


@dataclass(frozen=True)
class CpuTimes:
    busy: int  # jiffies since boot: user, nice, system, irq, softirq (guest time is in user)
    steal: int  # taken by the hypervisor while this machine wanted to run
    total: int  # the above plus idle and iowait
    backlog_drops: int = 0  # packets the CPUs' receive backlogs dropped since boot


def parse(line: str) -> CpuTimes:
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in line.split()[1:9])
    busy = user + nice + system + irq + softirq
    return CpuTimes(busy, steal, busy + steal + idle + iowait)


def softnet_drops(text: str) -> int:
    """The second column of /proc/net/softnet_stat (hex, one line per CPU): packets dropped
    because that CPU's backlog was full."""
    return sum(int(line.split()[1], 16) for line in text.splitlines() if line.strip())


def read(path: Path = STAT, softnet: Path = SOFTNET) -> CpuTimes:
    cpu = parse(path.read_text().split("\n", 1)[0])
    try:
        drops = softnet_drops(softnet.read_text())
    except OSError:  # no /proc/net (a kernel without networking)
        return cpu
    return replace(cpu, backlog_drops=drops)


def backlog_limit() -> int | None:
    try:
        return int(MAX_BACKLOG.read_text())
    except (OSError, ValueError):
        return None


def backlog_warning(limit: int | None) -> str | None:
    """One line when the backlogs are shorter than BACKLOG_MIN (a global setting: a namespace
    cannot change it, so a run does not either)."""
    if limit is None or limit >= BACKLOG_MIN:
        return None
    return (
        f"net.core.netdev_max_backlog is {limit}: a CPU that falls behind drops packets the "
        "scenario did not ask to lose (host_cpu.backlog_drops counts them); raise it with "
        f"`sysctl -w net.core.netdev_max_backlog={BACKLOG_MIN}` (install.sh does)"
    )


def between(a: CpuTimes, b: CpuTimes) -> dict[str, float | int | None]:
    """Shares of the machine's CPU time between two reads (1.0 = every core, all the time),
    and the packets its receive backlogs dropped between them."""
    span = b.total - a.total
    drops = b.backlog_drops - a.backlog_drops
    if span <= 0:
        return {"cores": os.cpu_count(), "busy": None, "steal": None, "backlog_drops": drops}
    return {
        "cores": os.cpu_count(),
        "busy": round((b.busy - a.busy) / span, 3),
        "steal": round((b.steal - a.steal) / span, 3),
        "backlog_drops": drops,
    }


def warnings(cpu: dict[str, float | int | None], backlog: int | None) -> list[str]:
    """One line for each way the window's CPU may have made rates and times come out low;
    `backlog` is net.core.netdev_max_backlog as the run found it (backlog_limit())."""
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
    drops = cpu.get("backlog_drops")
    if isinstance(drops, int) and drops > 0:
        out.append(
            f"the CPUs' receive backlogs dropped {drops} packets during the measured window "
            f"(net.core.netdev_max_backlog = {backlog}): losses the scenario did not ask "
            f"for; raise it to {BACKLOG_MIN} or more, or give the run more CPU"
        )
    return out
