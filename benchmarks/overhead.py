"""What metrics cost: exporters + Prometheus during a thesis-mini run. Ends with one JSON line:

  scrape_targets       exporters Prometheus scrapes (orchestrator, 4 workers, 4 generators)
  exporter_cpu_share   CPU (share of one core) of exporters + Prometheus: Prometheus' own CPU over
                       the running phase (from its /proc entry) plus the exporters' cost, which
                       is CPU per scrape (measured server-side against registries shaped like
                       the run's, the scraping client in another process) × targets ÷ interval.
                       Exporter requests run in short-lived threads inside the workload
                       processes, so they cannot be isolated from outside, and an A/B run with
                       metrics off (printed as a sanity check) is noisier than the effect.
  prometheus_cpu_share Prometheus' own CPU over the same window
  prometheus_rss_mb    Prometheus' peak resident memory
  series               testbed_ series Prometheus holds at the end of the run

Run as root: `.venv/bin/python benchmarks/overhead.py [--duration 60s] [--quick]`. Target: < 5%
of one core. --quick: 3 s runs (0.5 s warm-up) and 20 scrapes per exporter, to check in seconds
that it runs; its figures mean little.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from testbed.core.state import STATE_DIR
from testbed.run.orchestrator import run
from testbed.run.prometheus import scalar
from testbed.scenario.resolve import load_scenario, with_overrides

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def machine_cpu_s() -> float:
    """CPU seconds spent by everything on the machine (all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    busy = sum(fields) - fields[3] - fields[4]
    return busy / TICK


class Sampler(threading.Thread):
    """Watches the run from outside: CPU over its running phase, and the Prometheus process."""

    def __init__(self, out_dir: Path, series_after: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.out_dir = str(out_dir)
        self.series_after = series_after  # s into the running phase: Prometheus has scraped
        self.cpu0 = self.cpu1 = self.t0 = self.t1 = 0.0
        self.prom_cpu0 = self.prom_cpu1 = 0.0
        self.rss_kb = 0
        self.series: float | None = None
        self.done = threading.Event()

    def phase(self) -> str | None:
        for p in STATE_DIR.glob("*.json"):
            data = json.loads(p.read_text())
            if data.get("out_dir") == self.out_dir:
                return data.get("phase")
        return None

    def prometheus(self) -> tuple[int, str] | None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (
                cmd
                and cmd[0].endswith(b"prometheus")
                and any(self.out_dir.encode() in c for c in cmd)
            ):
                m = re.search(rb"--web.listen-address=([\d.]+:\d+)", b" ".join(cmd))
                return int(pid), f"http://{m.group(1).decode()}" if m else ""
        return None

    @staticmethod
    def proc_cpu(pid: int) -> float:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / TICK

    def run(self) -> None:
        while self.phase() != "running":
            if self.done.is_set():
                return
            time.sleep(0.05)
        self.t0, self.cpu0 = time.monotonic(), machine_cpu_s()
        prom = self.prometheus()
        if prom:
            self.prom_cpu0 = self.proc_cpu(prom[0])
        while self.phase() == "running":
            if prom and prom[1] and time.monotonic() - self.t0 > self.series_after:
                with contextlib.suppress(OSError):
                    self.series = scalar(prom[1], 'count({__name__=~"testbed_.+"})')
            if prom:
                try:
                    rss = int(
                        re.search(
                            r"VmRSS:\s+(\d+)", Path(f"/proc/{prom[0]}/status").read_text()
                        ).group(1)
                    )
                    self.rss_kb = max(self.rss_kb, rss)
                    self.prom_cpu1 = self.proc_cpu(prom[0])
                except (OSError, AttributeError):
                    pass
            time.sleep(0.5)
        self.t1, self.cpu1 = time.monotonic(), machine_cpu_s()


SCRAPER = """
import sys, urllib.request
for _ in range(int(sys.argv[2])):
    urllib.request.urlopen(sys.argv[1]).read()
"""


def cpu_per_scrape(kind: str, n: int = 400) -> float:
    """Server-side CPU seconds per scrape of a node exporter with a run's label sets."""
    from testbed.core.exporters import QdiscCollector, serve
    from testbed.workloads import kinds
    from testbed.workloads.registry import load

    if kind == "orchestrator":  # 4 hosts × 2 directions × 2 classes, as in thesis-mini
        from prometheus_client import CollectorRegistry

        reg = CollectorRegistry()
        c = QdiscCollector()
        reg.register(c)
        c.set_link_rates({(f"h{i}", d): 10**8 for i in range(1, 5) for d in ("up", "down")})
        c.update([({"node": f"h{i}", "direction": d, "class": k}, {"bytes": 1, "packets": 1, "drops": 0, "backlog": 0})
                  for i in range(1, 5) for d in ("up", "down") for k in ("high", "low")])  # fmt: skip
        m: dict[str, Any] = {}
    else:
        ref = kinds.get(kind).metrics
        assert ref is not None, kind
        reg, m = load(ref)()
    if kind == "horovod":
        m["iteration"].labels("h1").observe(0.5)
        m["iterations"].labels("h1").inc()
    elif kind == "websearch":
        for cls in ("small", "medium", "large"):
            m["fct"].labels("h1", cls).observe(0.01)
        m["started"].labels("h1").inc()
        m["completed"].labels("h1").inc()
    server, port = serve(reg, "127.0.0.1", 0)
    t0 = time.process_time()
    subprocess.run(
        [sys.executable, "-c", SCRAPER, f"http://127.0.0.1:{port}/metrics", str(n)], check=True
    )
    cost = (time.process_time() - t0) / n
    server.shutdown()
    return cost


def measure(
    prometheus: str, duration: float, extra: dict[str, Any] | None = None, series_after: float = 5
) -> tuple[Sampler, dict[str, Any]]:
    s = load_scenario(ROOT / "examples" / "thesis-mini.yaml")
    s = with_overrides(s, {"duration": duration, "metrics.prometheus": prometheus, **(extra or {})})
    with tempfile.TemporaryDirectory(prefix="tb-overhead-") as d:
        out = Path(d) / "run"
        sampler = Sampler(out.resolve(), series_after)
        sampler.start()
        try:
            summary = run(s, out=out).summary
        finally:
            sampler.done.set()
            sampler.join(10)
    span = sampler.t1 - sampler.t0
    print(
        f"metrics {prometheus:>8}: {span:.1f} s running, machine CPU {(sampler.cpu1 - sampler.cpu0) / span:.3f} "
        f"cores; iterations {summary['horovod']['iterations']}, flows {summary['websearch']['flows_started']}"
    )
    return sampler, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", default="60s")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="3 s runs, 20 scrapes: checks in seconds that it runs; the figures mean little",
    )
    args = ap.parse_args()
    from testbed.core.units import parse_duration

    d = 3.0 if args.quick else parse_duration(args.duration)
    extra = {"measure.warmup": "0.5s", "measure.cooldown": "0s"} if args.quick else None
    off, _ = measure("off", d, extra)
    on, summary = measure("embedded", d, extra, 1.5 if args.quick else 5)
    share = lambda s: (s.cpu1 - s.cpu0) / (s.t1 - s.t0)  # noqa: E731
    prom_share = (on.prom_cpu1 - on.prom_cpu0) / (on.t1 - on.t0)
    hosts = summary["horovod"]["workers"]
    n = 20 if args.quick else 400
    per_scrape = {k: cpu_per_scrape(k, n) for k in ("horovod", "websearch", "orchestrator")}
    interval = summary["metrics"]["scrape_interval_s"]
    exporters = (
        hosts * (per_scrape["horovod"] + per_scrape["websearch"]) + per_scrape["orchestrator"]
    ) / interval
    print(
        f"CPU per scrape: worker exporter {per_scrape['horovod'] * 1e3:.2f} ms, generator exporter "
        f"{per_scrape['websearch'] * 1e3:.2f} ms, qdisc exporter {per_scrape['orchestrator'] * 1e3:.2f} ms"
        f" → exporters {exporters:.4f} of a core at {interval:g} s; "
        f"Prometheus {prom_share:.4f}; peak RSS {on.rss_kb / 1024:.1f} MB, {on.series} testbed series"
    )
    print(
        f"(A/B sanity check, noisy: machine CPU with metrics minus without = {share(on) - share(off):+.4f} cores)"
    )
    print(json.dumps({
        "scrape_targets": summary["metrics"]["targets"],
        "exporter_cpu_share": round(exporters + prom_share, 4),
        "prometheus_cpu_share": round(prom_share, 4),
        "prometheus_rss_mb": round(on.rss_kb / 1024, 1),
        "series": on.series,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
