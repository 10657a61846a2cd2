"""The run's timeline, one for every workload and for the link counters.

    t0 ─ warmup ─┬──────────── measured window ────────────┬─ cooldown ─ end ─ drain ─┤
                start                                      stop

Workload processes initialise first (imports, Horovod's rendezvous), say they are ready, and
only then learn t0 from a small "go" file, so slow starters never put ramp-up into the window.
Times are wall-clock seconds (time.time()) because several processes must agree on them;
durations inside a process (FCT, iteration time) are taken with a monotonic clock.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

GO_POLL_S = 0.01


@dataclass(frozen=True)
class Window:
    t0: float  # wall-clock time at which every workload starts
    duration: float
    warmup: float
    cooldown: float
    drain: float  # longest wait after `end` for flows that started inside the window

    @property
    def start(self) -> float:
        return self.t0 + self.warmup

    @property
    def stop(self) -> float:
        return self.t0 + self.duration - self.cooldown

    @property
    def end(self) -> float:
        return self.t0 + self.duration

    @property
    def span(self) -> float:
        return self.stop - self.start

    def contains(self, t: float) -> bool:
        """A flow or iteration that *starts* at t belongs to the window."""
        return self.start <= t < self.stop

    def shifted(self, start: float = 0.0, stop: float | None = None) -> Window:
        """A workload instance's own timeline: it starts `start` after t0 and stops starting
        work `stop` after t0 (None: at the end), while its measured window stays the run's:
        its records are judged on the same edges as everyone's. (Warm-up and cool-down may
        come out negative: the measured window then opens before, or closes after, the
        instance's own span.)"""
        if start == 0 and stop is None:
            return self
        end = self.duration if stop is None else stop
        return Window(
            self.t0 + start,
            end - start,
            self.warmup - start,
            self.cooldown - (self.duration - end),
            self.drain + (self.duration - end),
        )

    def summary(self) -> dict[str, Any]:
        return {
            "t0": round(self.t0, 6),
            "start": round(self.start, 6),
            "stop": round(self.stop, 6),
            "warmup_s": self.warmup,
            "cooldown_s": self.cooldown,
            "span_s": round(self.span, 6),
            "drain_limit_s": self.drain,
        }

    def write(self, path: Path) -> None:
        """The go file: written once, atomically, when every process is ready."""
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(path)


def wait_for_go(path: Path) -> Window:
    """In a node program: block until the orchestrator says go, then until t0."""
    while not path.exists():
        time.sleep(GO_POLL_S)
    w = Window(**json.loads(path.read_text()))
    delay = w.t0 - time.time()
    if delay > 0:
        time.sleep(delay)
    return w
