"""Metrics for one run: the orchestrator's qdisc exporter, the Prometheus server (embedded,
external or off), the link-counter time series (links.csv, for plots), and the post-run
cross-check. The orchestrator drives it: start → update (every poll) → finish → stop."""

from __future__ import annotations

import csv
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from testbed.core.exporters import QdiscCollector, orchestrator_exporter
from testbed.network.shaping.plan import InterfacePlan
from testbed.network.shaping.stats import frames_queued
from testbed.run.prometheus import ExternalTargets, Prometheus, cross_check
from testbed.scenario.schema import Scenario
from testbed.scenario.topology import TopologyPlan

log = logging.getLogger(__name__)
# backlog: bytes queued at the sample; queued: frames queued, i.e. packets, or on fast links the
# backlog over the frame size (a port's bands together against a shared limit, as the thesis'
# ns-3 port has: docs/network.md)
LINK_FIELDS = [
    "time", "node", "direction", "class", "bytes", "packets", "drops", "backlog", "queued",
]  # fmt: skip


def _close(server: Any) -> None:
    server.shutdown()
    server.server_close()


class MetricsSession:
    def __init__(
        self, s: Scenario, topo: TopologyPlan, run_dir: Path, run_id: str, time_scale: float = 1.0
    ) -> None:
        """`s` in wall-clock units; `time_scale` turns its link rates back into the scenario's
        (the exported rate gauge, beside a testbed_time_scale gauge)."""
        self.s, self.topo, self.run_dir, self.run_id = s, topo, run_dir, run_id
        self.time_scale = time_scale
        self.cfg = s.metrics
        self.collector: QdiscCollector | None = None
        self.server: Any = None
        self.sink: Prometheus | ExternalTargets | None = None
        self.targets: dict[str, tuple[str, list[str]]] = {}  # name → (kind, ADDR:PORT...)
        self._rates_set = False
        self._links = open(run_dir / "links.csv", "w", newline="")  # noqa: SIM115 - closed in stop()
        self._csv = csv.writer(self._links)
        self._csv.writerow(LINK_FIELDS)
        # (time, plan index, packets in all its classes) at every update
        self._queued: list[tuple[float, int, int]] = []

    @property
    def enabled(self) -> bool:
        return self.cfg.prometheus != "off"

    @property
    def _labels(self) -> dict[str, str]:
        return {"run_id": self.run_id, "scenario": self.s.name}

    def begin(self, record: Callable[[dict[str, Any]], None]) -> None:
        """Before the network is built: an embedded Prometheus starts now, scraping only the
        orchestrator's exporter (on 127.0.0.1). Prometheus 2.42 applies discovered targets on
        a 5 s tick counted from its start, so the tick runs while the network is built rather
        than after. The nodes' targets are added by `start`, once their addresses exist: a
        scrape of a management address with no route yet would leave the machine.
        `record` writes an object to the state file; it is called before each object this
        session creates outside the run folder exists (the Prometheus process, the file_sd
        file), so a run killed at any moment leaves neither behind."""
        if self.cfg.prometheus != "embedded":
            return
        self.collector, self.server, port = orchestrator_exporter("127.0.0.1")
        self.targets = {"orchestrator": ("orchestrator", [f"127.0.0.1:{port}"])}
        self.sink = Prometheus(self.run_dir, self.cfg.scrape_interval, record)
        self.sink.set_targets(self.targets, self._labels)

    def start(
        self,
        workload_targets: dict[str, tuple[str, list[str]]],
        record: Callable[[dict[str, Any]], None],
    ) -> None:
        """Once the network exists: the nodes' targets join the embedded server's file, or
        every target is registered with an external Prometheus (the orchestrator's exporter
        on the management bridge, an address the host's containers can reach too)."""
        if not self.enabled:
            return
        if self.cfg.prometheus == "embedded":
            if self.sink is None:
                self.begin(record)
            assert isinstance(self.sink, Prometheus)
            self.targets = {**self.targets, **workload_targets}
            self.sink.set_targets(self.targets, self._labels)
            self.sink.wait_ready()
        else:
            address = str(self.topo.mgmt_bridge_ip)
            self.collector, self.server, port = orchestrator_exporter(address)
            self.targets = {
                "orchestrator": ("orchestrator", [f"{address}:{port}"]),
                **workload_targets,
            }
            self.sink = ExternalTargets(Path(self.cfg.file_sd_dir or ""), self.run_id, self.cfg.url)
            record({"kind": "file", "path": str(self.sink.path)})
            self.sink.set_targets(self.targets, self._labels)
        n = sum(len(v) for _, v in self.targets.values())
        where = self.sink.url if isinstance(self.sink, Prometheus) else self.sink.path
        log.info("metrics: %d scrape targets every %.1f s → %s", n, self.cfg.scrape_interval, where)

    def update(
        self, plans: list[InterfacePlan], snap: tuple[float, list[dict[str, dict[str, int]]]]
    ) -> None:
        t, counters = snap
        if self.collector is not None and not self._rates_set:
            self.collector.set_link_rates(
                {(p.end.node, p.end.direction): p.rate_bps * self.time_scale for p in plans},
                self.time_scale,
            )
            self._rates_set = True
        rows = []
        for i, (p, per_class) in enumerate(zip(plans, counters, strict=True)):
            self._queued.append((t, i, sum(frames_queued(p, c) for c in per_class.values())))
            for name, c in per_class.items():
                lab = {"node": p.end.node, "direction": p.end.direction, "class": name}
                rows.append((lab, c))
                self._csv.writerow([f"{t:.3f}", p.end.node, p.end.direction, name, c["bytes"], c["packets"],
                                    c["drops"], c["backlog"], frames_queued(p, c)])  # fmt: skip
        if self.collector is not None:
            self.collector.update(rows)

    def queues(
        self, plans: list[InterfacePlan], t0: float, t1: float, limit: int
    ) -> dict[str, Any]:
        """How full each port's queues were together, sampled every poll in [t0, t1]: the most
        packets a link direction's classes held at once, and how many samples found some
        direction holding more than `limit` (its largest class's), where a port whose bands
        share one limit (ns-3's PfifoFastQueueDisc, the thesis' port) would have dropped and
        testbed's per-class limits did not. A sample, not every packet: a lower bound."""
        inside = [(t, i, n) for t, i, n in self._queued if t0 <= t <= t1]
        times = {t for t, _, _ in inside}
        over = {t for t, _, n in inside if n > limit}
        _, i_max, n_max = max(inside, key=lambda x: x[2], default=(0.0, -1, 0))
        end = plans[i_max].end if i_max >= 0 else None
        return {
            "limit_packets": limit,
            "samples": len(times),
            "samples_over_limit": len(over),
            "max_packets": n_max,
            "link": f"{end.node} {end.direction}" if end is not None else None,
        }

    def final_scrape(self) -> None:
        """Give Prometheus time to scrape the final values of every counter: until each
        target has been scraped since now (embedded), or two intervals (external)."""
        if not self.enabled:
            return
        limit = 2 * self.cfg.scrape_interval + 0.5
        if isinstance(self.sink, Prometheus):
            if not self.sink.wait_scraped(time.time(), timeout=limit + 2):
                log.warning("prometheus did not scrape every target within %.1f s", limit + 2)
        else:
            time.sleep(limit)

    def check(self) -> None:
        if isinstance(self.sink, Prometheus) and not self.sink.alive():
            from testbed.core.errors import RunFailure

            raise RunFailure("prometheus exited during the run; see prometheus.log")

    def section(
        self, summary: dict[str, Any], queries: Sequence[tuple[str, str, str, float | None]] = ()
    ) -> dict[str, Any]:
        """The summary's `metrics` section; `queries`: the workload instances' own checks of
        Prometheus against the summary (metrics/prometheus.cross_check)."""
        out: dict[str, Any] = {"prometheus": self.cfg.prometheus}
        if not self.enabled:
            return out
        out["scrape_interval_s"] = self.cfg.scrape_interval
        out["targets"] = sum(len(v) for _, v in self.targets.values())
        url = self.sink.url if self.sink is not None else None
        if isinstance(self.sink, Prometheus):
            out["data_dir"] = "prometheus"
            # an empty configuration: the run's targets are gone, only its data is wanted
            out["reopen"] = (
                f"prometheus --storage.tsdb.path={self.run_dir / 'prometheus'} --config.file=/dev/null"
            )
        if url:
            try:
                out["cross_check"] = cross_check(url, self.run_id, summary, list(queries))
            except OSError as e:
                out["cross_check"] = {"agree": None, "error": f"Prometheus unreachable: {e}"}
        return out

    def stop(self) -> None:
        """Idempotent; each part is stopped even when another fails."""
        try:
            if self.sink is not None:
                sink, self.sink = self.sink, None
                sink.stop()
        finally:
            try:
                if self.server is not None:
                    server, self.server = self.server, None
                    # shutdown() waits out serve_forever's 0.5 s poll: let a thread do that
                    threading.Thread(target=_close, args=(server,), daemon=True).start()
            finally:
                if not self._links.closed:
                    self._links.close()
