"""Controller for the web-search load: one generator (server + Poisson client) per host; flows
merged into flows.csv and summarised by pFabric size class."""

from __future__ import annotations

import csv
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from testbed.errors import RunFailure
from testbed.metrics import describe, size_class
from testbed.metrics.exporters import WEBSEARCH_PORT
from testbed.runtime.netns import NetnsRuntime
from testbed.scenario import Scenario, WebsearchWorkload
from testbed.topology import Host, TopologyPlan
from testbed.workloads import flowsizes
from testbed.workloads.horovod import selected_hosts
from testbed.workloads.procs import count_rows, read_csvs, stop_all
from testbed.workloads.websearch_node import FIELDS

log = logging.getLogger(__name__)


def fct_stats(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    done = [r for r in rows if r["completed"] == "True"]
    out = {}
    for cls in ("small", "medium", "large", "all"):
        xs = [
            float(r["fct_s"])
            for r in done
            if cls == "all" or size_class(int(r["size_bytes"])) == cls
        ]
        d = describe(xs)
        out[cls] = {k: d[k] for k in ("count", "mean", "p50", "p99")}
    return out


class Websearch:
    name = "websearch"

    def __init__(
        self,
        cfg: WebsearchWorkload,
        s: Scenario,
        topo: TopologyPlan,
        rt: NetnsRuntime,
        run_dir: Path,
    ) -> None:
        self.cfg, self.s, self.topo, self.rt = cfg, s, topo, rt
        self.run_dir = run_dir
        self.dir = run_dir / "websearch"
        self.hosts = selected_hosts(topo, cfg.hosts)
        self.dscp = s.dscp_of(cfg)
        self.procs: list[tuple[Host, subprocess.Popen[bytes]]] = []
        self.start_at = 0.0
        self.duration = 0.0

    def start(self, start_at: float, duration: float) -> None:
        self.start_at, self.duration = start_at, duration
        self.dir.mkdir(parents=True, exist_ok=True)
        cdf, _ = flowsizes.resolve(self.cfg.sizes, None)
        rate = self.cfg.arrival_rate or 0.0
        config = self.dir / "generator-config.json"
        config.write_text(json.dumps({
            "cdf": [list(p) for p in cdf],
            "peers": {h.name: str(h.data_ip) for h in self.hosts},
            "rate_per_host": rate / len(self.hosts),
            "dscp": self.dscp,
            "port": self.cfg.port,
            "seed": self.s.seed,
        }))  # fmt: skip
        for h in self.hosts:
            argv = [
                sys.executable,
                "-m",
                "testbed.workloads.websearch_node",
                "--host",
                h.name,
                "--bind",
                str(h.data_ip),
                "--config",
                str(config),
                "--start-at",
                f"{start_at:.6f}",
                "--duration",
                f"{duration:.3f}",
                "--out",
                str(self.dir / f"flows-{h.name}.csv"),
            ]
            if self.s.metrics.prometheus != "off":
                argv += ["--metrics", f"{h.mgmt_ip}:{WEBSEARCH_PORT}"]
            self.procs.append(
                (h, self.rt.spawn(h.netns, argv, self.dir / f"generator-{h.name}.log"))
            )
        log.info(
            "websearch: %d hosts, %.2f flows/s in total (utilisation %.1f%%), mean flow %.0f B, DSCP %d (%s)",
            len(self.hosts),
            rate,
            self.cfg.utilization or 0,
            self.cfg.mean_flow_size or 0,
            self.dscp,
            self.s.tc_profile.class_of(self.dscp),
        )

    def targets(self) -> list[str]:
        if self.s.metrics.prometheus == "off":
            return []
        return [f"{h.mgmt_ip}:{WEBSEARCH_PORT}" for h in self.hosts]

    def progress(self) -> str:
        return f"{sum(count_rows(self.dir / f'flows-{h.name}.csv') for h in self.hosts)} flows done"

    def finish(self) -> None:
        """Generators end by themselves at the end of the run; wait for their markers."""
        deadline = time.monotonic() + 15
        done = [self.dir / f"flows-{h.name}.done" for h in self.hosts]
        while not all(d.exists() for d in done) and time.monotonic() < deadline:
            if any(p.poll() not in (None, 0) for _, p in self.procs):
                break
            time.sleep(0.1)

    def check(self) -> None:
        for h, p in self.procs:
            rc = p.poll()
            if rc is not None and (rc != 0 or time.time() < self.start_at + self.duration - 0.5):
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
        rows = sorted(self.records(), key=lambda r: float(r["start"]))
        with open(self.run_dir / "flows.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(rows)
        lo = self.start_at + self.cfg.warmup
        hi = self.start_at + self.duration - self.cfg.cooldown
        window = [r for r in rows if lo <= float(r["start"]) < hi]
        span = max(1e-9, hi - lo)
        return {
            "hosts": len(self.hosts),
            "flows_started": len(rows),
            "flows_completed": sum(1 for r in rows if r["completed"] == "True"),
            "flows_measured": len(window),
            "incomplete_in_window": sum(1 for r in window if r["completed"] != "True"),
            "arrival_rate": {"configured": self.cfg.arrival_rate, "achieved": len(window) / span},
            "utilization_pct": self.cfg.utilization,
            "mean_flow_size": self.cfg.mean_flow_size,
            "fct_s": fct_stats(window),
            "dscp": self.dscp,
            "class": self.s.tc_profile.class_of(self.dscp),
        }
