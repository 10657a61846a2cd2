"""Prometheus exporters. Every exporter listens on a management address only (a node's mgmt0,
or the management bridge in the root namespace), so scrapes never cross the shaped links.

Names follow Prometheus conventions: `testbed_` prefix, base units, `_total` for counters.
Run-wide labels (run_id, scenario) are attached by the scrape configuration, not here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

# Sub-millisecond to tens of seconds: a 10 KB flow on an idle 10 Gbit/s link up to a large
# flow or a slow iteration on a 100 Mbit/s link.
DURATION_BUCKETS = (
    0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
    20.0, 50.0,
)  # fmt: skip


def serve(registry: Any, address: str, port: int) -> tuple[Any, int]:
    """Start prometheus-client's HTTP server on (address, port); port 0 picks a free one."""
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=address, registry=registry)
    return server, server.server_address[1]


class QdiscCollector:
    """Exposes the latest class-counter snapshot the orchestrator took (it polls every half
    second anyway); reading netlink from the scrape thread would share pyroute2 sockets
    across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: list[tuple[dict[str, str], dict[str, int]]] = []
        self._rates: dict[tuple[str, str], float] = {}
        self._time_scale: float | None = None

    def update(self, rows: list[tuple[dict[str, str], dict[str, int]]]) -> None:
        with self._lock:
            self._rows = rows

    def set_link_rates(self, rates: dict[tuple[str, str], float], time_scale: float = 1.0) -> None:
        """(node, direction) → configured rate in bits/s of the scenario, exported in bytes/s
        (base unit), and the scenario's time dilation: Prometheus stores samples on the real
        clock, so rate() over a dilated run's byte counters is the wall rate, K times lower
        than the scenario's."""
        with self._lock:
            self._rates = dict(rates)
            self._time_scale = time_scale

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = ["node", "direction", "class"]
        fams: dict[str, Any] = {
            "bytes": CounterMetricFamily(
                "testbed_qdisc_bytes", "Bytes sent by the class", labels=labels
            ),
            "packets": CounterMetricFamily(
                "testbed_qdisc_packets", "Packets sent by the class", labels=labels
            ),
            "drops": CounterMetricFamily(
                "testbed_qdisc_drops", "Packets dropped by the class", labels=labels
            ),
            "backlog": GaugeMetricFamily(
                "testbed_qdisc_backlog_bytes", "Bytes queued in the class", labels=labels
            ),
        }
        with self._lock:
            rows = list(self._rows)
            rates = dict(self._rates)
            scale = self._time_scale
        if scale is not None:
            yield GaugeMetricFamily(
                "testbed_time_scale",
                "Time dilation of the run: its durations and rates are in scenario time, its "
                "samples on the real clock (multiply rate() by this for scenario rates)",
                value=scale,
            )
        cap = GaugeMetricFamily("testbed_link_rate_bytes_per_second", "Configured rate cap of the link direction",
                                labels=["node", "direction"])  # fmt: skip
        for (node, direction), bps in sorted(rates.items()):
            cap.add_metric([node, direction], bps / 8)
        yield cap
        for lab, counters in rows:
            values = [lab["node"], lab["direction"], lab["class"]]
            for key, fam in fams.items():
                fam.add_metric(values, counters.get(key, 0))
        yield from fams.values()


def orchestrator_exporter(address: str) -> tuple[QdiscCollector, Any, int]:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    collector = QdiscCollector()
    registry.register(collector)
    server, port = serve(registry, address, 0)
    return collector, server, port


def start_node_exporter(make: Any, listen: str | None) -> dict[str, Any] | None:
    """For node programs: `--metrics ADDR:PORT` → the metric objects of `make()` (a kind's
    `(registry, metrics)`, workloads/registry.Kind.metrics), served there; None when not asked."""
    if not listen:
        return None
    addr, port = listen.rsplit(":", 1)
    reg, metrics = make()
    serve(reg, addr, int(port))
    return metrics
