"""Policy `by-ratio` (policies.py): job-level priority by compute-to-network ratio, as Crux
(Cao et al., SIGCOMM'24) ranks jobs by "GPU intensity", the compute a job does per byte it
sends: a byte that delays a compute-heavy job idles more compute than one that delays a
network-heavy job, so the most compute-intensive job gets the highest class.

Resolved when the scenario is loaded (training/spec.py, once the group's last job is):
each job's class and DSCP in its `derived` block are the policy's, so the job is marked as
any static job is. The runner only reports the rank."""

from __future__ import annotations

from typing import Any

from testbed.workloads.training.policies import group


def ranks(jobs: list[tuple[str, float]]) -> list[str]:
    """Job names from the highest compute-to-network ratio down (ties by name)."""
    return [n for n, _ in sorted(jobs, key=lambda j: (-j[1], j[0]))]


def classes(jobs: list[tuple[str, float]], names: list[str]) -> dict[str, str]:
    """Each job's class: the i-th of `names` for the i-th ranked job, the last for the rest."""
    return {n: names[min(i, len(names) - 1)] for i, n in enumerate(ranks(jobs))}


def rank_in(s: Any, kind: str, name: str) -> tuple[int, int]:
    """Job `name`'s rank (1: the highest ratio) among scenario `s`'s jobs of policy `kind`,
    and how many they are."""
    jobs = [(n, w.d.compute_to_network_ratio) for n, w in group(s, kind).items()]
    return ranks(jobs).index(name) + 1, len(jobs)


class Ranked:
    def __init__(self, rank: int, jobs: int, ratio: float, cls: str) -> None:
        self.rank, self.jobs, self.ratio, self.cls = rank, jobs, ratio, cls

    def worker_config(self) -> dict[str, Any]:
        return {}

    def tick(self, now: float) -> None:
        pass

    def section(self, t0: float, t1: float) -> dict[str, Any]:
        return {
            "kind": "by-ratio",
            "to": self.cls,
            "rank": self.rank,
            "jobs": self.jobs,
            "compute_to_network_ratio": self.ratio,
        }

    def warning(self) -> str | None:
        return None

    def address_classes(self) -> dict[str, str]:
        return {}  # the job's sockets are all in its own class

    def close(self) -> None:
        pass


def start(job: Any) -> Ranked:
    """The runner of training job `job` whose policy is by-ratio (its class is already its
    derived one)."""
    rank, jobs = rank_in(job.s, "by-ratio", job.name)
    return Ranked(rank, jobs, job.cfg.d.compute_to_network_ratio, job.cfg.d.tc_class)
