"""The web-search load generator that runs *inside* a node: a server, and a client that opens a
new TCP connection per flow to a uniformly random other host at Poisson arrival times. The
server, the schedule, the drain and `main` are workloads/flows.py's, shared with incast.

A flow is one fetch (flows.py): FCT = connect start → last byte received at the client, on the
monotonic clock. Every flow is appended to a CSV when it ends, with how late it started after
its Poisson arrival time (`lag_s`: a machine that cannot keep the load's clock shows here), and
the client's port, by which the server's record of the same connection (flows.Served: the
sending socket's retransmissions and timeouts) is found.

The random streams are seeded from (seed, host), so the same seed gives the same flows (ids,
sizes, destinations, arrival times) on every run: runs can be compared flow by flow.

With `--metrics` the node exports flow counters and an FCT histogram on its management
address.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Iterator
from typing import Any

from testbed.core.stats import size_class
from testbed.workloads import flows
from testbed.workloads.websearch.flowsizes import sample

FIELDS = flows.csv_fields("src", ["dst", "size_bytes", "port"], "fct_s")


def arrivals(
    rng: random.Random, rate: float, cdf: list[tuple[float, float]], peers: list[str]
) -> Iterator[tuple[float, int, str]]:
    """(offset from t0, size, destination) of each flow a host starts, forever. One fixed
    order of draws per flow keeps the streams identical across runs with the same seed (and
    lets `testbed sweep --dry-run` count a run's flows without running it)."""
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        size = sample(cdf, rng)
        yield t, size, peers[rng.randrange(len(peers))]


def host_rng(seed: int, host: str, stream: str = "websearch") -> random.Random:
    """A host's own random stream: its arrivals, sizes and destinations. The instance named
    websearch keeps the stream of the scenarios before named instances (the same flows);
    another instance draws its own."""
    key = f"{seed}/{host}" if stream == "websearch" else f"{seed}/{stream}/{host}"
    return random.Random(key)


def registry() -> tuple[Any, dict[str, Any]]:
    """What a generator exports: flows started and completed, and an FCT histogram per size
    class (seconds of scenario time)."""
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from testbed.core.exporters import DURATION_BUCKETS

    reg = CollectorRegistry()
    return reg, {
        "fct": Histogram("testbed_flow_completion_seconds", "Flow completion time (connect to last byte)",
                         ["host", "size_class"], buckets=DURATION_BUCKETS, registry=reg),
        "started": Counter("testbed_flows_started", "Flows started", ["host"], registry=reg),
        "completed": Counter("testbed_flows_completed", "Flows completed", ["host"], registry=reg),
    }  # fmt: skip


class Generator(flows.OpenLoop):
    """One host's flows: Poisson arrivals, sizes from the CDF, uniformly random peers."""

    fields = FIELDS
    greeting = "websearch {host}: serving on {bind}:{port}, {rate_per_host:.3f} flows/s out"

    def __init__(
        self, args: argparse.Namespace, cfg: dict[str, Any], metrics: dict[str, Any] | None
    ) -> None:
        super().__init__(args, cfg, metrics)
        self.cdf = [(float(x), float(p)) for x, p in cfg["cdf"]]
        self.rate: float = cfg["rate_per_host"]
        self.rng = host_rng(cfg["seed"], args.host, cfg.get("stream", "websearch"))

    def schedule(self) -> Iterator[tuple[float, dict[str, Any]]]:
        for t, size, dst in arrivals(self.rng, self.rate, self.cdf, sorted(self.peers)):
            yield t, {"dst": dst, "size": size}

    async def transfer(self, ev: dict[str, Any]) -> None:
        got, mono, wall = await self.fetch(ev["dst"], ev["size"], ev)
        ev["duration"] = mono - ev["mono"]  # FCT
        ev["end"] = wall
        ev["completed"] = got == ev["size"]

    def observe(self, metrics: dict[str, Any], ev: dict[str, Any]) -> None:
        cls = size_class(ev["size"])
        metrics["fct"].labels(self.args.host, cls).observe(ev["duration"] / self.time_scale)

    def columns(self, ev: dict[str, Any]) -> list[Any]:
        return [ev["dst"], ev["size"], ev.get("port", "")]


def main(argv: list[str] | None = None) -> int:
    return flows.main(argv, "websearch_node", Generator, registry)


if __name__ == "__main__":
    sys.exit(main())
