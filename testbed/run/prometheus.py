"""A real Prometheus per run (or targets registered with an existing one), and the PromQL
cross-check of summary.json against what Prometheus recorded.

Embedded: the `prometheus` binary runs in the root namespace with its TSDB in RUN/prometheus
and its web port on 127.0.0.1 only. Targets come from file-based service discovery
(RUN/prometheus/targets.json), the same mechanism an external Prometheus uses: point its
`file_sd_configs` at a folder and name that folder in the scenario (metrics.file_sd_dir).
After the run the data directory stays usable:
    prometheus --storage.tsdb.path=RUN/prometheus --config.file=/dev/null   # then query :9090
(use range functions such as max_over_time(...[1h]): the run's series end when it does)
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from testbed.core.errors import EnvironmentProblem, RunFailure
from testbed.core.state import proc_start_time
from testbed.core.stopping import checkpoint

log = logging.getLogger(__name__)
READY_TIMEOUT_S = 30.0


def targets_doc(
    targets: dict[str, tuple[str, list[str]]], labels: dict[str, str]
) -> list[dict[str, Any]]:
    """file_sd JSON: one group per scraped part of the run, `workload` (the instance's name, or
    orchestrator) and `component` (its kind) on every series it exports."""
    return [
        {"targets": addrs, "labels": {**labels, "workload": name, "component": kind}}
        for name, (kind, addrs) in sorted(targets.items())
        if addrs
    ]


def config(targets_file: Path, scrape_interval: float) -> dict[str, Any]:
    interval = f"{max(1, round(scrape_interval * 1000))}ms"
    return {
        "global": {
            "scrape_interval": interval,
            "evaluation_interval": interval,
            "scrape_timeout": interval,
        },
        "scrape_configs": [
            {
                "job_name": "testbed",
                "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}],
            }
        ],
    }


def _urlopen(url: str, timeout: float) -> Any:
    """urllib.request, imported when a Prometheus is asked something: it brings http.client,
    ssl and email, a few dozen ms of every run without Prometheus."""
    import urllib.request

    return urllib.request.urlopen(url, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """An embedded Prometheus server for one run."""

    def __init__(
        self, run_dir: Path, scrape_interval: float, record: Callable[[dict[str, Any]], None]
    ) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise EnvironmentProblem(
                "the prometheus binary is missing; run install.sh (apt-get install prometheus), "
                "or set metrics.prometheus: off"
            )
        self.dir = run_dir / "prometheus"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.targets_file = self.dir / "targets.json"
        self.targets_file.write_text("[]")
        self.config_file = run_dir / "prometheus.yml"
        self.config_file.write_text(
            yaml.safe_dump(config(self.targets_file, scrape_interval), sort_keys=False)
        )
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(run_dir / "prometheus.log", "ab")  # noqa: SIM115 - closed in stop()
        # setpriv: Prometheus dies with the orchestrator (PDEATHSIG), even by kill -9
        self.proc = subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", "--",
             binary, f"--config.file={self.config_file}", f"--storage.tsdb.path={self.dir}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle",
             "--storage.tsdb.retention.time=10y"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        # recorded at once, not once ready: a failed readiness wait must not orphan it
        record({"kind": "process", "name": "prometheus", "pid": self.proc.pid,
                "start": proc_start_time(self.proc.pid)})  # fmt: skip

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RunFailure(
                    f"prometheus exited with code {self.proc.returncode}; see prometheus.log"
                )
            try:
                with _urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:  # URLError is one
                pass
            checkpoint()
            time.sleep(0.2)
        raise RunFailure(
            f"prometheus did not become ready within {READY_TIMEOUT_S:.0f} s; see prometheus.log"
        )

    def set_targets(
        self, targets: dict[str, tuple[str, list[str]]], labels: dict[str, str]
    ) -> None:
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(targets_doc(targets, labels), indent=1))
        tmp.replace(self.targets_file)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_scraped(self, after: float, timeout: float) -> bool:
        """Until every target has been scraped by a scrape that began after `after` (so the
        TSDB holds the final values); a fixed sleep would need two full intervals."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with _urlopen(f"{self.url}/api/v1/targets?state=active", timeout=2) as r:
                    targets = json.load(r)["data"]["activeTargets"]
            except (OSError, ValueError, KeyError):
                targets = []
            if targets and all(_epoch(t.get("lastScrape", "")) > after for t in targets):
                return True
            checkpoint()
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # Prometheus flushes its head block and WAL on SIGTERM
            try:
                self.proc.wait(timeout=8)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _epoch(rfc3339: str) -> float:
    """Prometheus' RFC 3339 timestamps carry nanoseconds; datetime takes microseconds."""
    from datetime import datetime

    m = re.match(r"^(.*T\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", rfc3339)
    if not m:
        return 0.0
    frac = (m.group(2) or ".0")[:7]
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        return datetime.fromisoformat(f"{m.group(1)}{frac}{tz}").timestamp()
    except ValueError:
        return 0.0


class ExternalTargets:
    """Register the run's targets with a Prometheus that already runs (file_sd)."""

    def __init__(self, file_sd_dir: Path, run_id: str, url: str | None) -> None:
        if not file_sd_dir.is_dir():
            raise EnvironmentProblem(f"metrics.file_sd_dir {file_sd_dir} is not a folder")
        self.path = file_sd_dir / f"testbed-{run_id}.json"
        self.url = url

    def set_targets(
        self, targets: dict[str, tuple[str, list[str]]], labels: dict[str, str]
    ) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(targets_doc(targets, labels), indent=1))
        tmp.replace(self.path)

    def alive(self) -> bool:
        return True

    def stop(self) -> None:
        self.path.unlink(missing_ok=True)


def query(url: str, promql: str, at: float | None = None) -> list[dict[str, Any]]:
    """An instant PromQL query over the HTTP API; the result vector."""
    params = {"query": promql}
    if at is not None:
        params["time"] = f"{at:.3f}"
    from urllib.parse import urlencode

    with _urlopen(f"{url}/api/v1/query?{urlencode(params)}", timeout=10) as r:
        body = json.loads(r.read())
    if body.get("status") != "success":
        raise RunFailure(f"PromQL {promql!r} failed: {body.get('error')}")
    return body["data"]["result"]


def scalar(url: str, promql: str) -> float | None:
    result = query(url, promql)
    return float(result[0]["value"][1]) if result else None


def cross_check(
    url: str,
    run_id: str,
    summary: dict[str, Any],
    queries: Sequence[tuple[str, str, str, float | None]] = (),
) -> dict[str, Any]:
    """Compare counts in summary.json with what Prometheus scraped during the run: the link
    directions here, and each workload instance's `queries`: (instance, what, PromQL, the
    summary's value), where {sel} stands for the run's and the instance's labels and {rng}
    for the range.

    Every query is a range function over the whole run (`*_over_time[R]`), never an instant
    selector: once an exporter stops, Prometheus marks its series stale and an instant query
    finds nothing, although every sample is stored. R reaches back past the run's start."""
    sel = f'run_id="{run_id}"'
    started = summary.get("started_at")
    span = time.time() - started if isinstance(started, (int, float)) else 3600.0
    rng = f"{max(60, int(span) + 300)}s"  # setup before t0 included, with room to spare
    checks: list[dict[str, Any]] = []

    def compare(what: str, promql: str, expected: float | None) -> None:
        if expected is None:
            return
        got = scalar(url, promql)
        checks.append(
            {
                "what": what,
                "promql": promql,
                "summary": expected,
                "prometheus": got,
                "agree": got is not None and abs(got - expected) < 0.5,
            }
        )

    for name, what, promql, expected in queries:
        mine = f'{sel},workload="{name}"'
        compare(what, promql.replace("{sel}", mine).replace("{rng}", rng), expected)
    links = summary.get("links") or []
    if links:
        compare(
            "link directions exported",
            "count(count by (node, direction) "
            f"(max_over_time(testbed_qdisc_bytes_total{{{sel}}}[{rng}])))",
            len(links),
        )
    bad = [c for c in checks if not c["agree"]]
    for c in bad:
        log.warning(
            "summary and Prometheus disagree on %s: %s vs %s",
            c["what"],
            c["summary"],
            c["prometheus"],
        )
    return {"agree": not bad, "checks": checks}
