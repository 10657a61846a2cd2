"""Controller for the web-search load: one generator (server + Poisson client) per host; flows
merged into flows.csv and summarised by pFabric size class."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Any

from testbed.errors import RunFailure
from testbed.metrics import describe, size_class
from testbed.metrics.exporters import WEBSEARCH_PORT
from testbed.runtime.base import NodeProcess, Runtime
from testbed.scenario import Scenario, WebsearchWorkload
from testbed.topology import Host, TopologyPlan
from testbed.workloads.procs import Synchronised, count_rows, present, read_csvs, stop_all
from testbed.workloads.training.horovod import selected_hosts
from testbed.workloads.websearch import flowsizes
from testbed.workloads.websearch.node import FIELDS, arrivals, host_rng

log = logging.getLogger(__name__)
NODE_MODULE = "testbed.workloads.websearch.node"


def fct_stats(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """FCT per pFabric size class over the measured flows, with the flows that have no FCT
    counted beside the statistics: censored (still running when the drain limit ran out) and
    failed (a connection error). They must not vanish from the picture."""
    out = {}
    for cls in ("small", "medium", "large", "all"):
        mine = [r for r in rows if cls == "all" or size_class(int(r["size_bytes"])) == cls]
        d = describe([float(r["fct_s"]) for r in mine if r["completed"] == "True"])
        out[cls] = {
            "count": d["count"],
            "censored": sum(1 for r in mine if r["completed"] != "True" and not r.get("error")),
            "failed": sum(1 for r in mine if r["completed"] != "True" and r.get("error")),
            **{k: d[k] for k in ("mean", "p50", "p99")},
        }
    return out


def _lag(rows: list[dict[str, Any]]) -> dict[str, Any]:
    d = describe([float(r["lag_s"]) for r in rows if r.get("lag_s")])
    return {k: d[k] for k in ("mean", "p99", "max")}


def rate_over_link(row: dict[str, Any], link_bps: float) -> float:
    """size · 8 / FCT over the link rate: above 1.0 the flow beat the wire."""
    return int(row["size_bytes"]) * 8 / float(row["fct_s"]) / link_bps


def planned_flows(s: Scenario) -> list[tuple[str, float, int]]:
    """(host, start offset from t0, size) of every flow the generators will start inside the
    measured window: the same draws the nodes make, so a sweep can be sized before it runs.
    A node places a flow by when it really starts, a few ms after its draw under load, so a
    flow drawn at the very edge of the window may fall on the other side of it."""
    w = s.workloads.websearch
    if w is None:
        return []
    cdf, _ = flowsizes.resolve(w.sizes, None)
    names = w.hosts or [f"h{i}" for i in range(1, s.topology.hosts + 1)]
    win = s.timeline()  # offsets from t0
    out = []
    for h in names:
        peers = sorted(n for n in names if n != h)
        for t, size, _ in arrivals(host_rng(s.seed, h), w.d.arrival_rate, cdf, peers):
            if t >= win.stop:
                break
            if win.contains(t):
                out.append((h, t, size))
    return out


class Websearch(Synchronised):
    name = "websearch"

    def __init__(
        self,
        cfg: WebsearchWorkload,
        s: Scenario,
        topo: TopologyPlan,
        rt: Runtime,
        run_dir: Path,
    ) -> None:
        self.cfg, self.s, self.topo, self.rt = cfg, s, topo, rt
        self.run_dir = run_dir
        self.dir = run_dir / "websearch"
        self.hosts = selected_hosts(topo, cfg.hosts)
        self.dscp = cfg.d.dscp
        self.procs: list[tuple[Host, NodeProcess]] = []

    def launch(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        cdf, _ = flowsizes.resolve(self.cfg.sizes, None)
        d = self.cfg.d
        config = self.dir / "generator-config.json"
        config.write_text(json.dumps({
            "cdf": [list(p) for p in cdf],
            "peers": {h.name: str(h.data_ip) for h in self.hosts},
            "rate_per_host": d.arrival_rate,
            "dscp": self.dscp,
            "port": self.cfg.port,
            "seed": self.s.seed,
            "time_scale": self.time_scale,
        }))  # fmt: skip
        for h in self.hosts:
            argv = [
                "--host",
                h.name,
                "--bind",
                str(h.data_ip),
                "--config",
                str(config),
                "--go",
                str(self.go_file),
                "--out",
                str(self.dir / f"flows-{h.name}.csv"),
            ]
            if self.s.metrics.prometheus != "off":
                argv += ["--metrics", f"{h.mgmt_ip}:{WEBSEARCH_PORT}"]
            self.procs.append(
                (
                    h,
                    self.rt.spawn_python(
                        h.netns, NODE_MODULE, argv, self.dir / f"generator-{h.name}.log"
                    ),
                )
            )
        log.info(
            "websearch: %d hosts, %.3f flows/s per host (%.2f%% of a host link), mean flow %.0f B, "
            "DSCP %d (%s)",
            len(self.hosts),
            d.arrival_rate,
            d.utilization,
            d.mean_flow_size,
            self.dscp,
            d.tc_class,
        )

    def ready(self) -> tuple[int, int]:
        return present(self._marker(h, "ready") for h in self.hosts), len(self.hosts)

    def _marker(self, h: Host, kind: str) -> Path:
        return self.dir / f"flows-{h.name}.{kind}"

    def draining(self) -> bool:
        """True while a generator still waits for flows that started inside the window."""
        return not all(self._marker(h, "done").exists() for h in self.hosts)

    def targets(self) -> list[str]:
        if self.s.metrics.prometheus == "off":
            return []
        return [f"{h.mgmt_ip}:{WEBSEARCH_PORT}" for h in self.hosts]

    def progress(self) -> str:
        return f"{sum(count_rows(self.dir / f'flows-{h.name}.csv') for h in self.hosts)} flows done"

    def finish(self) -> None:
        """Generators end by themselves after the drain (the orchestrator waited for it)."""

    def check(self) -> None:
        for h, p in self.procs:
            rc = p.poll()
            if rc is not None and (rc != 0 or not self._marker(h, "done").exists()):
                raise RunFailure(
                    f"websearch generator on {h.name} exited with code {rc}; "
                    f"see {self.dir / f'generator-{h.name}.log'}"
                )

    def stop(self) -> None:
        stop_all(p for _, p in self.procs)

    def collect(self) -> dict[str, Any]:
        """After finish(): every generator has written its flows."""
        for h, p in self.procs:
            if p.poll() not in (None, 0):
                raise RunFailure(f"websearch generator on {h.name} exited with code {p.returncode}")
        self.stop()
        return self.summarize()

    def records(self) -> list[dict[str, Any]]:
        return read_csvs(self.dir / f"flows-{h.name}.csv" for h in self.hosts)

    def summarize(self) -> dict[str, Any]:
        assert self.window is not None
        rows = sorted(self.records(), key=lambda r: float(r["start"]))
        with open(self.run_dir / "flows.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(rows)
        measured = [r for r in rows if r["measured"] == "True"]
        span = self.window.span
        d = self.cfg.d
        link = self.s.topology.link_rate
        done = [r for r in measured if r["completed"] == "True"]
        over = [rate_over_link(r, link) for r in done]
        offered = sum(int(r["size_bytes"]) for r in measured) * 8
        return {
            "hosts": len(self.hosts),
            "flows_started": len(rows),
            "flows_completed": sum(1 for r in rows if r["completed"] == "True"),
            "flows_measured": len(measured),
            "censored": sum(1 for r in measured if r["completed"] != "True" and not r["error"]),
            "failed": sum(1 for r in measured if r["error"]),
            "arrival_rate_per_host": {
                "configured": d.arrival_rate,
                "achieved": len(measured) / span / len(self.hosts),
            },
            # what the generators asked of one host link on average (flow payload, no headers)
            "utilization_pct": {
                "configured": d.utilization,
                "offered": offered / (span * len(self.hosts) * link) * 100,
            },
            "mean_flow_size": d.mean_flow_size,
            "fct_s": fct_stats(measured),
            # how late flows started after their Poisson arrival time (this machine's clock)
            "start_lag_s": _lag(measured),
            # physics: no completed flow may move its bytes faster than the link
            "max_flow_rate_over_link": max(over, default=None),
            "flows_over_link_rate": sum(1 for x in over if x > 1.0),
            "dscp": self.dscp,
            "class": d.tc_class,
        }
