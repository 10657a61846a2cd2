"""The incast node program, one per host of an incast instance: a responder, and an aggregator
that sends queries at Poisson times. The responder, the schedule, the drain and `main` are
workloads/flows.py's, shared with web search.

A query: the aggregator fetches (flows.py) `size` bytes from each of `fanout` responders drawn
from the other hosts, all at once, so the responses meet in the aggregator's downlink. QCT =
query start → last byte of the last response, on the monotonic clock. Every query is appended
to a CSV when it ends: completed only if every response arrived whole. As with web-search
flows: queries that start in the measured window get up to the drain limit after the run; the
rest are written as not completed (censored).

The random stream is seeded from (seed, instance, host): the same seed gives the same queries.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections.abc import Iterator
from typing import Any

from testbed.workloads import flows

FIELDS = flows.csv_fields("aggregator", ["responders", "fanout", "size_bytes"], "qct_s")


def queries(
    rng: random.Random, rate: float, peers: list[str], fanout: int
) -> Iterator[tuple[float, list[str]]]:
    """(offset from t0, responders) of each query, forever; the same draws for the same seed."""
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        yield t, rng.sample(peers, fanout)


def rng_for(seed: int, name: str, host: str) -> random.Random:
    return random.Random(f"{seed}/incast/{name}/{host}")


def registry() -> tuple[Any, dict[str, Any]]:
    """What an aggregator exports: queries started and completed, and a QCT histogram (seconds
    of scenario time)."""
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from testbed.core.exporters import DURATION_BUCKETS

    reg = CollectorRegistry()
    return reg, {
        "started": Counter("testbed_queries_started", "Incast queries started", ["host"], registry=reg),
        "completed": Counter("testbed_queries_completed", "Incast queries completed", ["host"], registry=reg),
        "qct": Histogram("testbed_query_completion_seconds", "Incast query completion time",
                         ["host"], buckets=DURATION_BUCKETS, registry=reg),
    }  # fmt: skip


class Aggregator(flows.OpenLoop):
    """One host's queries: Poisson times, `fanout` responders drawn from the other hosts."""

    fields = FIELDS
    greeting = (
        "incast {host}: responding on {bind}:{port}, {rate:.3f} queries/s to {fanout} of {peers}"
    )

    def __init__(
        self, args: argparse.Namespace, cfg: dict[str, Any], metrics: dict[str, Any] | None
    ) -> None:
        super().__init__(args, cfg, metrics)
        self.rng = rng_for(cfg["seed"], cfg["name"], args.host)
        self.size: int = cfg["size"]

    def schedule(self) -> Iterator[tuple[float, dict[str, Any]]]:
        for t, responders in queries(
            self.rng, self.cfg["rate"], sorted(self.peers), self.cfg["fanout"]
        ):
            yield t, {"responders": responders}

    async def transfer(self, q: dict[str, Any]) -> None:
        got = await asyncio.gather(*(self.fetch(d, self.size, q) for d in q["responders"]))
        q["duration"] = time.monotonic() - q["mono"]  # QCT
        q["end"] = time.time()
        q["completed"] = all(n == self.size for n, _, _ in got)

    def observe(self, metrics: dict[str, Any], q: dict[str, Any]) -> None:
        metrics["qct"].labels(self.args.host).observe(q["duration"] / self.time_scale)

    def columns(self, q: dict[str, Any]) -> list[Any]:
        fanout = len(q["responders"])
        return [" ".join(q["responders"]), fanout, self.size * fanout]


def main(argv: list[str] | None = None) -> int:
    return flows.main(argv, "incast_node", Aggregator, registry)


if __name__ == "__main__":
    sys.exit(main())
