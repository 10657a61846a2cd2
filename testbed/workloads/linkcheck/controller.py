"""Controller for the linkcheck workload: starts its servers and clients in the nodes, then
turns their raw records into goodput per pair and class and short-transfer completion times.
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
from typing import Any

from testbed.core.errors import RunFailure
from testbed.core.stats import describe
from testbed.scenario.topology import Host, TopologyPlan
from testbed.workloads.controller import Context, Controller
from testbed.workloads.linkcheck.spec import LinkcheckWorkload

log = logging.getLogger(__name__)
NODE_MODULE = "testbed.workloads.linkcheck.node"


def pairs(topo: TopologyPlan, pattern: str) -> list[tuple[Host, Host]]:
    hs = topo.hosts
    if pattern == "single":
        return [(hs[0], hs[1])]
    if pattern == "incast":
        return [(h, hs[0]) for h in hs[1:]]
    if pattern == "outcast":
        return [(hs[0], h) for h in hs[1:]]
    if pattern == "across":
        # leaf-spine: every flow leaves its leaf and crosses the fabric
        shift = topo.hosts_per_switch if topo.hosts_per_switch < len(hs) else len(hs) // 2
        return [(hs[i], hs[(i + shift) % len(hs)]) for i in range(len(hs))]
    return [(hs[i], hs[(i + 1) % len(hs)]) for i in range(len(hs))]


def _interp(samples: list[list[float]], t: float) -> float:
    """Cumulative bytes at time t from [time, cumulative] samples (linear between samples)."""
    if not samples or t <= samples[0][0]:
        return 0.0 if not samples or t < samples[0][0] else samples[0][1]
    for (t0, b0), (t1, b1) in itertools.pairwise(samples):
        if t0 <= t <= t1:
            return b0 + (b1 - b0) * ((t - t0) / (t1 - t0) if t1 > t0 else 1.0)
    return samples[-1][1]


def goodput_bps(samples: list[list[float]], t_from: float, t_to: float) -> float:
    if t_to <= t_from:
        return 0.0
    return (_interp(samples, t_to) - _interp(samples, t_from)) * 8 / (t_to - t_from)


class Linkcheck(Controller):
    kind = "linkcheck"

    def __init__(self, name: str, cfg: LinkcheckWorkload, ctx: Context) -> None:
        super().__init__(name, cfg, ctx)
        self.pairs = pairs(self.topo, cfg.pattern)
        prof = self.s.tc_profile
        if cfg.bulk_dscp is not None:
            self.bulk_dscp = list(cfg.bulk_dscp)
        else:
            classes = cfg.bulk_classes if cfg.bulk_classes is not None else prof.class_names
            self.bulk_dscp = [prof.cls(c).mark for c in classes]
        self.short_class = cfg.short_class or prof.class_names[0]

    def launch(self) -> None:
        """Servers listen at once and run until stopped; clients wait for the go file, start
        together at the instance's start and stop by themselves at its end."""
        self.dir.mkdir(parents=True, exist_ok=True)
        port = str(self.cfg.port)
        for h in sorted({dst for _, dst in self.pairs}, key=lambda h: h.index):
            out = self.dir / f"server-{h.name}.json"
            argv = ["server", "--bind", str(h.data_ip), "--port", port, "--out", str(out)]
            self.spawn(h, "server", NODE_MODULE, argv, out, waits=False, finite=False)
        prof = self.s.tc_profile
        by_src: dict[str, list[Host]] = {}
        for src, dst in self.pairs:
            by_src.setdefault(src.name, []).append(dst)
        for src_name, dsts in by_src.items():
            src = self.topo.host(src_name)
            out = self.dir / f"client-{src.name}.json"
            argv = ["client", "--bind", str(src.data_ip), "--port", port,
                    "--go", str(self.go_file), "--out", str(out)]  # fmt: skip
            for dst in dsts:
                for d in self.bulk_dscp:
                    argv += ["--bulk", f"{dst.data_ip}:{d}"]
            if self.cfg.short:
                argv += [
                    "--short",
                    f"{dsts[0].data_ip}:{prof.cls(self.short_class).mark}:"
                    f"{self.cfg.short_size}:{self.cfg.short_interval}",
                ]
            self.spawn(src, "client", NODE_MODULE, argv, out)
        log.info(
            "%s: %d bulk flow(s) per pair over %d pair(s), short transfers in %r",
            self.name,
            len(self.bulk_dscp),
            len(self.pairs),
            self.short_class if self.cfg.short else None,
        )

    def _load(self, role: str, h: Host) -> dict[str, Any]:
        path = self.dir / f"{role}-{h.name}.json"
        if not path.is_file():
            raise RunFailure(f"linkcheck {role} on {h.name} wrote no results ({path})")
        return json.loads(path.read_text())

    def summarize(self) -> dict[str, Any]:
        prof = self.s.tc_profile
        ip_to_host = {str(h.data_ip): h for h in self.topo.hosts}
        assert self.window is not None
        t_from, t_to = self.window.start, self.window.stop
        t0 = (self.run_window or self.window).t0
        flows: list[dict[str, Any]] = []
        for dst in sorted({d for _, d in self.pairs}, key=lambda h: h.index):
            for rec in self._load("server", dst)["bulk"]:
                src = ip_to_host.get(rec["src"])
                flows.append(
                    {
                        "src": src.name if src else rec["src"],
                        "dst": dst.name,
                        "class": prof.class_of(rec["dscp"]),
                        "dscp": rec["dscp"],
                        "bytes": rec["bytes"],
                        "goodput_bps": goodput_bps(rec["samples"], t_from, t_to),
                    }
                )
        flows.sort(
            key=lambda f: (f["src"], f["dst"], prof.class_names.index(f["class"]), -f["dscp"])
        )
        short: list[dict[str, Any]] = []
        for src in sorted({s for s, _ in self.pairs}, key=lambda h: h.index):
            for rec in self._load("client", src)["short"]:
                dst = ip_to_host.get(rec["dst"])
                short.append({"src": src.name, "dst": dst.name if dst else rec["dst"], **rec})
        self._write_short_csv(short)
        measured = [r["fct_s"] for r in short if r.get("completed") and t_from <= r["start"] < t_to]
        expected = len(self.bulk_dscp) * len(self.pairs)
        if len(flows) < expected:
            log.warning("linkcheck: %d of %d bulk flows reached their server", len(flows), expected)
        return {
            "pattern": self.cfg.pattern,
            "window_s": [round(t_from - t0, 3), round(t_to - t0, 3)],
            "link_rate_bps": self.s.topology.link_rate,
            "bulk": flows,
            "short": {
                "class": self.short_class if self.cfg.short else None,
                "size_bytes": self.cfg.short_size,
                "started": len(short),
                "completed": sum(1 for r in short if r.get("completed")),
                "fct_s": describe(measured),
            },
        }

    def _write_short_csv(self, short: list[dict[str, Any]]) -> None:
        with open(self.dir / "short.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["src", "dst", "dscp", "size_bytes", "start", "end", "fct_s", "completed"])
            for r in short:
                w.writerow(
                    [
                        r["src"],
                        r["dst"],
                        r["dscp"],
                        r["size"],
                        f"{r['start']:.6f}",
                        f"{r['end']:.6f}" if "end" in r else "",
                        f"{r['fct_s']:.6f}" if "fct_s" in r else "",
                        r.get("completed", False),
                    ]
                )
