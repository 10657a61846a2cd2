"""The state file: a write-ahead record of every object a run creates.

An object is recorded *before* it is created, so a run killed at any instant (kill -9, power
cut of the orchestrator) leaves a file naming everything that may exist; `testbed down`
deletes exactly those objects, tolerating ones that never came to be. State lives in
/run/testbed (tmpfs): it vanishes on reboot together with the namespaces it describes.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATE_DIR = Path(os.environ.get("TESTBED_STATE_DIR", "/run/testbed"))


def proc_start_time(pid: int) -> int | None:
    """Kernel start time of a process (clock ticks since boot); guards against PID reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may contain spaces and parentheses; fields resume after the last ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])


@dataclass
class RunState:
    run_id: str
    scenario: str
    out_dir: str
    runtime: str = "netns"
    pid: int = field(default_factory=os.getpid)
    pid_start: int | None = None
    started_at: float = field(default_factory=time.time)
    phase: str = "starting"
    # Each object: {"kind": "netns"|"link"|"qdisc"|"process"|"container", ...}, in creation
    # order. A netns with "attached": true is a container's namespace, bound under /run/netns.
    objects: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.pid_start is None:
            self.pid_start = proc_start_time(self.pid)

    @property
    def path(self) -> Path:
        return STATE_DIR / f"{self.run_id}.json"

    def save(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        os.replace(tmp, self.path)

    def record(self, *objects: dict[str, Any]) -> None:
        """Write-ahead: call before creating the objects."""
        self.objects.extend(objects)
        self.save()

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.save()

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def alive(self) -> bool:
        """Is the orchestrator that owns this run still running?"""
        return self.pid_start is not None and proc_start_time(self.pid) == self.pid_start

    def namespaces(self) -> list[str]:
        return [o["name"] for o in self.objects if o["kind"] == "netns"]

    @classmethod
    def load(cls, path: Path) -> RunState:
        data = json.loads(path.read_text())
        return cls(**data)


def all_states() -> list[RunState]:
    if not STATE_DIR.is_dir():
        return []
    out = []
    for p in sorted(STATE_DIR.glob("*.json")):
        try:
            out.append(RunState.load(p))
        except (ValueError, TypeError, KeyError, OSError):
            continue  # half-written or foreign file: not ours to interpret
    return out
