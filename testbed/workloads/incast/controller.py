"""Controller for an incast instance: one node program (responder + aggregator) per host; the
queries merged into queries.csv (queries-<name>.csv for an instance not named incast) and
summarised: query completion times, their censoring, and the physics check that no query's
responses arrived sooner than the busiest link they cross allows."""

from __future__ import annotations

import csv
import json
import logging
from typing import Any

from testbed.core.paths import link_seconds, path_rate
from testbed.core.stats import describe
from testbed.core.tcpstats import socket_section
from testbed.workloads.controller import Controller
from testbed.workloads.flows import served_counters
from testbed.workloads.incast.node import FIELDS
from testbed.workloads.incast.spec import queries_file
from testbed.workloads.procs import count_rows, read_csvs

log = logging.getLogger(__name__)
NODE_MODULE = "testbed.workloads.incast.node"


def fastest(topology: Any, q: dict[str, str]) -> float:
    """The least time query `q`'s responses need on `topology`: its busiest link's, or one
    response's alone on its path (a flow takes one spine)."""
    responders = q["responders"].split()
    each = int(q["size_bytes"]) / len(responders)
    busy = link_seconds(topology, [(src, q["aggregator"], each) for src in responders])
    alone = max(each * 8 / path_rate(topology, src, q["aggregator"]) for src in responders)
    return max(*busy.values(), alone)


class Incast(Controller):
    kind = "incast"
    exports = True

    def launch(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        d = self.cfg.d
        hosts = self.hosts()
        config = self.dir / "incast-config.json"
        config.write_text(json.dumps({
            "name": self.name, "peers": {h.name: str(h.data_ip) for h in hosts},
            "rate": d.query_rate, "fanout": d.fanout, "size": self.cfg.response_size,
            "dscp": d.dscp, "port": self.cfg.port, "seed": self.s.seed,
            "time_scale": self.time_scale,
        }))  # fmt: skip
        for h in hosts:
            out = self.dir / f"queries-{h.name}.csv"
            argv = ["--host", h.name, "--bind", str(h.data_ip), "--config", str(config),
                    "--go", str(self.go_file), "--out", str(out), *self.metrics_arg(h)]  # fmt: skip
            self.spawn(h, "aggregator", NODE_MODULE, argv, out)
        log.info(
            "%s: %d hosts, %.3f queries/s each to %d responders of %d B (%.2f%% of a downlink), "
            "DSCP %d (%s)",
            self.name, len(hosts), d.query_rate, d.fanout, self.cfg.response_size, d.utilization,
            d.dscp, d.tc_class,
        )  # fmt: skip

    def progress(self) -> str:
        return f"{sum(count_rows(p.out) for p in self.procs)} queries done"

    def summarize(self) -> dict[str, Any]:
        assert self.window is not None
        rows = sorted(read_csvs(p.out for p in self.procs), key=lambda r: float(r["start"]))
        with open(self.run_dir / queries_file(self.name), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(rows)
        measured = [r for r in rows if r["measured"] == "True"]
        done = [r for r in measured if r["completed"] == "True"]
        d = self.cfg.d
        n = len(self.procs)
        win = self.window
        span = max(0.0, min(win.stop, win.end) - max(win.start, win.t0))
        # physics: a query's responses cross the aggregator's downlink together, and each its
        # own path (on a leaf-spine, leaf links they may share): no query finishes sooner than
        # the busiest of those links needs for its bytes; over > 1 would beat it
        over = [fastest(self.s.topology, r) / float(r["qct_s"]) for r in done]
        offered = sum(int(r["size_bytes"]) for r in measured) * 8
        link = self.s.topology.link_rate
        qct = describe([float(r["qct_s"]) for r in done])
        return {
            "hosts": n,
            "fanout": d.fanout,
            "response_size_bytes": self.cfg.response_size,
            "queries_started": len(rows),
            "queries_completed": sum(1 for r in rows if r["completed"] == "True"),
            "queries_measured": len(measured),
            "censored": sum(1 for r in measured if r["completed"] != "True" and not r["error"]),
            "failed": sum(1 for r in measured if r["error"]),
            "query_rate_per_host": {
                "configured": d.query_rate,
                "achieved": len(measured) / span / n if span > 0 else None,
            },
            "utilization_pct": {
                "configured": d.utilization,
                "offered": offered / (span * n * link) * 100 if span > 0 else None,
            },
            "qct_s": {
                **qct,
                "censored": sum(1 for r in measured if r["completed"] != "True" and not r["error"]),
                "failed": sum(1 for r in measured if r["error"]),
            },
            "start_lag_s": {
                k: describe([float(r["lag_s"]) for r in measured if r.get("lag_s")])[k]
                for k in ("mean", "p99", "max")
            },
            "max_query_rate_over_link": max(over, default=None),
            "queries_over_link_rate": sum(1 for x in over if x > 1.0),
            "dscp": d.dscp,
            "class": d.tc_class,
            # the responders' own sockets (flows.Served): the timeouts of incast collapse
            "tcp_by_class": {
                d.tc_class: socket_section(served_counters((p.out for p in self.procs), win))
            },
        }

    def warnings(self, section: dict[str, Any]) -> list[str]:
        out = []
        if section.get("queries_over_link_rate"):
            out.append(
                f"{self.name}: {section['queries_over_link_rate']} incast query(ies) received "
                f"their responses faster than the aggregator's downlink allows (fastest "
                f"{section['max_query_rate_over_link']:.2f}x)"
            )
        lag = (section.get("start_lag_s") or {}).get("p99")
        rate = (section.get("query_rate_per_host") or {}).get("configured")
        if lag is not None and rate and lag > 0.1 / rate:
            out.append(
                f"{self.name}: queries started late: 1 % of them more than {lag * 1e3:.1f} ms "
                f"after their Poisson time ({1e3 / rate:.1f} ms apart on average); the machine "
                "could not keep the load's clock"
            )
        return out

    def metric_queries(self, section: dict[str, Any]) -> list[tuple[str, str, str, Any]]:
        return [
            (self.name, f"{self.name}: queries started",
             "sum(max_over_time(testbed_queries_started_total{{sel}}[{rng}]))", section["queries_started"]),
            (self.name, f"{self.name}: queries completed",
             "sum(max_over_time(testbed_queries_completed_total{{sel}}[{rng}]))", section["queries_completed"]),
        ]  # fmt: skip
