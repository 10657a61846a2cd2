"""The adaptive policy's runner (policies.py says what the policy does). It acts from the run's
tick (live.py: every poll, at least every 0.5 s of this machine's clock), on the job's whole
traffic: rank 0's iteration records, flushed as each iteration ends, say when an iteration
started; once one has run for `after_s` (its compute time plus the budget's share of the
predicted iteration time), the job's mark on every host goes to the escalation class, and
back to the job's own class when the iteration ends. Each switch is a line of
`RUN/<job>/policy.csv` (wall clock, iteration, class, DSCP, why).

Resolution: a switch lands within one poll of its moment, 0.5 s of this machine's clock, 5 ms
of scenario time at time_scale 100; undilated, an iteration shorter than a few polls escalates
late or not at all (the run warns: `warning`)."""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.workloads.training.policies import AdaptivePolicy

POLL_S = 0.5  # live.POLL_S: the longest gap between two ticks inside the window


@dataclass(frozen=True)
class Mark:
    cls: str
    dscp: int


class Adaptive:
    def __init__(
        self,
        cfg: AdaptivePolicy,
        *,
        records: Path,
        compute_s: float,
        predicted_s: float,
        own: Mark,
        to: Mark,
        switch: Callable[[int], None],
        out: Path,
    ) -> None:
        """`records`: rank 0's iteration CSV; `compute_s`, `predicted_s`: the job's compute
        and the model's iteration time alone, on this machine's clock; `switch(dscp)`: mark
        the job's traffic on every host."""
        self.cfg, self.records, self.own, self.to, self.switch = cfg, records, own, to, switch
        self.after_s = compute_s + cfg.budget / 100 * predicted_s
        self.predicted_s = predicted_s
        self.escalated = False
        self.started: float | None = None  # the current iteration's start (wall clock)
        self.iteration = 0
        self.switches: list[tuple[float, bool]] = []  # (when, escalated after it)
        self._offset = 0
        self._file = open(out, "w", newline="")  # noqa: SIM115 - closed by close()
        self._log = csv.writer(self._file)
        self._log.writerow(["time", "iteration", "class", "dscp", "why"])

    def tick(self, now: float) -> None:
        ended = self._ended()
        if ended:
            self.iteration, self.started = ended[-1][0] + 1, ended[-1][1]
            if self.escalated:
                self._set(now, False, f"iteration {self.iteration} starts")
        ran = None if self.started is None else now - self.started
        if not self.escalated and ran is not None and ran >= self.after_s:
            self._set(now, True, f"iteration {self.iteration} has run {ran:.3f} s")

    def _set(self, now: float, escalated: bool, why: str) -> None:
        mark = self.to if escalated else self.own
        self.switch(mark.dscp)
        self.escalated = escalated
        self.switches.append((now, escalated))
        self._log.writerow([f"{now:.6f}", self.iteration, mark.cls, mark.dscp, why])
        self._file.flush()

    def _ended(self) -> list[tuple[int, float]]:
        """(iteration, end) of each row rank 0 completed since the last call."""
        try:
            with open(self.records, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        out = []
        for line in complete.decode().splitlines():
            parts = line.split(",")  # horovod_worker.FIELDS: worker, rank, iteration, start, end
            if len(parts) >= 5 and parts[2].isdigit():
                out.append((int(parts[2]), float(parts[4])))
        return out

    def section(self, t0: float, t1: float) -> dict[str, Any]:
        """What it did inside the window [t0, t1] (wall clock; dilation converts the s)."""
        up_s, count, state, since = 0.0, 0, False, t0
        for when, escalated in self.switches:  # they alternate: up, down, up, ...
            if when > t1:
                break
            if when >= t0:
                if state:
                    up_s += when - since
                count += escalated
                since = when
            state = escalated
        if state:
            up_s += t1 - since
        span = t1 - t0
        return {
            "kind": "adaptive",
            "to": self.to.cls,
            "budget_pct": self.cfg.budget,
            "escalate_after_s": self.after_s,
            "escalations": count,
            "escalated_s": up_s,
            "escalated_share": up_s / span if span > 0 else None,
        }

    def warning(self) -> str | None:
        """Where the job's iterations are too short for switches that land one poll late."""
        if self.predicted_s >= 4 * POLL_S:
            return None
        return (
            f"policy adaptive switches at the run's polls, {POLL_S:g} s apart on this machine's "
            f"clock, and an iteration takes about {self.predicted_s:.2g} s here: its switches "
            "land late in the iteration (a larger time_scale gives them room)"
        )

    def worker_config(self) -> dict[str, Any]:
        return {}  # the workers know nothing of it: their marks switch under them

    def address_classes(self) -> dict[str, str]:
        return {}  # the job's sockets are all in its own class

    def close(self) -> None:
        self._file.close()


def start(job: Any) -> Adaptive:
    """The runner of training job `job` (horovod.HorovodJob) whose policy is adaptive."""
    from testbed.workloads.marking import set_mark
    from testbed.workloads.training.model.predict import for_instance

    cfg: AdaptivePolicy = job.cfg.policy
    hosts = job.hosts()

    def switch(dscp: int) -> None:
        for h in hosts:
            set_mark(job.rt, h.netns, job.owner_gid, dscp, job.name)

    return Adaptive(
        cfg,
        records=job.records_of(hosts[0]),
        compute_s=job.cfg.d.compute_time,
        predicted_s=for_instance(job.name, job.s)["iteration_s"],
        own=Mark(job.cfg.d.tc_class, job.cfg.d.dscp),
        to=Mark(cfg.to, job.s.tc_profile.cls(cfg.to).mark),
        switch=switch,
        out=job.dir / "policy.csv",
    )
