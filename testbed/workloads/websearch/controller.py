"""Controller for a web-search instance: one generator (server + Poisson client) per host; flows
merged into flows.csv (flows-<name>.csv for an instance not named websearch) and summarised by
pFabric size class."""

from __future__ import annotations

import csv
import json
import logging
from typing import Any

from testbed.core.paths import path_rate
from testbed.core.stats import describe, size_class
from testbed.core.tcpstats import SWITCHED, socket_section
from testbed.scenario.schema import Scenario
from testbed.workloads.controller import Controller
from testbed.workloads.flows import JOINED, join_served, served_counters
from testbed.workloads.marking import demote_after
from testbed.workloads.procs import count_rows, read_csvs
from testbed.workloads.websearch import flowsizes
from testbed.workloads.websearch.node import FIELDS, arrivals, host_rng
from testbed.workloads.websearch.spec import flows_file

log = logging.getLogger(__name__)
NODE_MODULE = "testbed.workloads.websearch.node"


def fct_stats(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """FCT per pFabric size class over the measured flows, with the flows that have no FCT
    counted beside the statistics: censored (still running when the drain limit ran out) and
    failed (a connection error). They must not vanish from the picture. `timed_out`: of the
    completed flows, those whose sending socket had a retransmission timeout (None unless
    every one carries the count: a kernel before 6.7, records without the join, a server
    that died first) — a few such flows can set a class's mean."""
    out = {}
    for cls in ("small", "medium", "large", "all"):
        mine = [r for r in rows if cls == "all" or size_class(int(r["size_bytes"])) == cls]
        done = [r for r in mine if r["completed"] == "True"]
        d = describe([float(r["fct_s"]) for r in done])
        known = [int(r["timeouts"]) for r in done if r.get("timeouts") not in (None, "")]
        out[cls] = {
            "count": d["count"],
            "censored": sum(1 for r in mine if r["completed"] != "True" and not r.get("error")),
            "failed": sum(1 for r in mine if r["completed"] != "True" and r.get("error")),
            **{k: d[k] for k in ("mean", "p50", "p99")},
            "timed_out": sum(c > 0 for c in known) if len(known) == len(done) else None,
        }
    return out


def _lag(rows: list[dict[str, Any]]) -> dict[str, Any]:
    d = describe([float(r["lag_s"]) for r in rows if r.get("lag_s")])
    return {k: d[k] for k in ("mean", "p99", "max")}


def rate_over_link(row: dict[str, Any], link_bps: float) -> float:
    """size · 8 / FCT over the link rate: above 1.0 the flow beat the wire."""
    return int(row["size_bytes"]) * 8 / float(row["fct_s"]) / link_bps


def planned_flows(s: Scenario, name: str | None = None) -> list[tuple[str, float, int]]:
    """(host, start offset from t0, size) of every flow the generators of web-search instance
    `name` (default: every one) will start inside the measured window: the same draws the
    nodes make, so a sweep can be sized before it runs. A node places a flow by when it really
    starts, a few ms after its draw under load, so a flow drawn at the very edge of the window
    may fall on the other side of it."""
    out = []
    for n, w in s.workloads.of_kind("websearch"):
        if name is not None and n != name:
            continue
        cdf, _ = flowsizes.resolve(w.sizes, None)
        names = w.hosts or [f"h{i}" for i in range(1, s.topology.hosts + 1)]
        run = s.timeline()  # offsets from t0
        win = run.shifted(w.start, w.stop)
        for h in names:
            peers = sorted(x for x in names if x != h)
            for t, size, _ in arrivals(host_rng(s.seed, h, n), w.d.arrival_rate, cdf, peers):
                if win.t0 + t >= win.end:
                    break
                if win.contains(win.t0 + t):
                    out.append((h, win.t0 + t, size))
    return out


class Websearch(Controller):
    kind = "websearch"
    exports = True

    def launch(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        cdf, _ = flowsizes.resolve(self.cfg.sizes, None)
        d = self.cfg.d
        hosts = self.hosts()
        config = self.dir / "generator-config.json"
        config.write_text(json.dumps({
            "cdf": [list(p) for p in cdf],
            "peers": {h.name: str(h.data_ip) for h in hosts},
            "rate_per_host": d.arrival_rate,
            "dscp": d.dscp,
            "ack_dscp": d.ack_dscp,
            "port": self.cfg.port,
            "seed": self.s.seed,
            "stream": self.name,
            "time_scale": self.time_scale,
        }))  # fmt: skip
        if self.cfg.demote is not None:
            assert d.demote_dscp is not None and self.cfg.port is not None
            for h in hosts:
                demote_after(self.rt, h.netns, h.data_if, self.cfg.port, self.cfg.demote.after,
                             d.demote_dscp, self.name)  # fmt: skip
        for h in hosts:
            out = self.dir / f"flows-{h.name}.csv"
            argv = ["--host", h.name, "--bind", str(h.data_ip), "--config", str(config),
                    "--go", str(self.go_file), "--out", str(out), *self.metrics_arg(h)]  # fmt: skip
            self.spawn(h, "generator", NODE_MODULE, argv, out)
        log.info(
            "%s: %d hosts, %.3f flows/s per host (%.2f%% of a host link), mean flow %.0f B, "
            "DSCP %d (%s)%s",
            self.name, len(hosts), d.arrival_rate, d.utilization, d.mean_flow_size, d.dscp,
            d.tc_class, "" if self.cfg.demote is None else
            f", after {self.cfg.demote.after} B DSCP {d.demote_dscp} ({self.cfg.demote.to})",
        )  # fmt: skip

    def progress(self) -> str:
        return f"{sum(count_rows(p.out) for p in self.procs)} flows done"

    def records(self) -> list[dict[str, Any]]:
        return read_csvs(p.out for p in self.procs)

    def summarize(self) -> dict[str, Any]:
        assert self.window is not None
        rows = sorted(self.records(), key=lambda r: float(r["start"]))
        ip_of = {h.name: str(h.data_ip) for h in self.hosts()}
        join_served(rows, {p.host.name: p.out for p in self.procs}, ip_of)
        with open(self.run_dir / self.flows_file, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=[*FIELDS, *JOINED])
            w.writeheader()
            w.writerows(rows)
        measured = [r for r in rows if r["measured"] == "True"]
        span = self.active_span()
        d = self.cfg.d
        link = self.s.topology.link_rate
        done = [r for r in measured if r["completed"] == "True"]
        # physics: no flow faster than the slowest link of its path (the fabric, across leaves)
        over = [rate_over_link(r, path_rate(self.s.topology, r["src"], r["dst"])) for r in done]
        offered = sum(int(r["size_bytes"]) for r in measured) * 8
        n = len(self.procs)
        return {
            "hosts": n,
            "flows_started": len(rows),
            "flows_completed": sum(1 for r in rows if r["completed"] == "True"),
            "flows_measured": len(measured),
            "censored": sum(1 for r in measured if r["completed"] != "True" and not r["error"]),
            "failed": sum(1 for r in measured if r["error"]),
            "arrival_rate_per_host": {
                "configured": d.arrival_rate,
                "achieved": len(measured) / span / n if span > 0 else None,
            },
            # what the generators asked of one host link on average (flow payload, no headers)
            "utilization_pct": {
                "configured": d.utilization,
                "offered": offered / (span * n * link) * 100 if span > 0 else None,
            },
            "mean_flow_size": d.mean_flow_size,
            "fct_s": fct_stats(measured),
            # how late flows started after their Poisson arrival time (this machine's clock)
            "start_lag_s": _lag(measured),
            # physics: no completed flow may move its bytes faster than the link
            "max_flow_rate_over_link": max(over, default=None),
            "flows_over_link_rate": sum(1 for x in over if x > 1.0),
            "dscp": d.dscp,
            "class": d.tc_class,
            # the senders' own sockets (flows.Served): the class's retransmissions and
            # timeouts, which a host's counters mix with the other classes'
            "tcp_by_class": {
                SWITCHED if self.cfg.demote is not None else d.tc_class: socket_section(
                    served_counters((p.out for p in self.procs), self.window)
                )
            },
        }

    def warnings(self, section: dict[str, Any]) -> list[str]:
        """Flows that beat the slowest link of their path, and a load whose clock fell
        behind its Poisson schedule."""
        out = []
        if section.get("flows_over_link_rate"):
            out.append(
                f"{self.name}: {section['flows_over_link_rate']} web-search flow(s) moved their "
                f"bytes faster than their path's slowest link (fastest "
                f"{section['max_flow_rate_over_link']:.2f}x its rate): their FCTs are shorter than "
                "the link allows (a large topology.mtu on a slow link does this)"
            )
        lag = (section.get("start_lag_s") or {}).get("p99")
        rate = (section.get("arrival_rate_per_host") or {}).get("configured")
        if lag is not None and rate and lag > 0.1 / rate:
            out.append(
                f"{self.name}: web-search flows started late: 1 % of them more than "
                f"{lag * 1e3:.1f} ms after their Poisson arrival time, over a tenth of the mean "
                f"gap between arrivals ({1e3 / rate:.1f} ms, this machine's clock); the machine "
                "could not keep the load's clock"
            )
        return out

    def metric_queries(self, section: dict[str, Any]) -> list[tuple[str, str, str, Any]]:
        prefix = "" if self.name == self.kind else f"{self.name}: "
        return [
            (self.name, f"{prefix}flows started",
             "sum(max_over_time(testbed_flows_started_total{{sel}}[{rng}]))", section["flows_started"]),
            (self.name, f"{prefix}flows completed",
             "sum(max_over_time(testbed_flows_completed_total{{sel}}[{rng}]))", section["flows_completed"]),
        ]  # fmt: skip

    @property
    def flows_file(self) -> str:
        return flows_file(self.name)

    def active_span(self) -> float:
        """The part of the measured window in which the instance starts flows."""
        assert self.window is not None
        return max(
            0.0, min(self.window.stop, self.window.end) - max(self.window.start, self.window.t0)
        )
