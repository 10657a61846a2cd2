"""The monitoring stack's configuration: Prometheus config, Grafana provisioning, dashboard."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from testbed.core.exporters import QdiscCollector
from testbed.workloads import kinds
from testbed.workloads.registry import load

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose"
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool comes with install.sh"
)


def exported_names() -> set[str]:
    """Every sample name the exporters can produce (histograms: _bucket/_sum/_count)."""
    names: set[str] = set()
    for kind in kinds.names():
        ref = kinds.get(kind).metrics
        if ref is None:
            continue
        reg, metrics = load(ref)()
        for m in metrics.values():  # touch each metric once so it has a sample
            labels = ["x"] * len(m._labelnames)
            child = m.labels(*labels)
            child.observe(1.0) if hasattr(child, "observe") else child.inc()
        names |= {s.name for fam in reg.collect() for s in fam.samples}
    c = QdiscCollector()
    c.update(
        [
            (
                {"node": "h1", "direction": "up", "class": "be"},
                {"bytes": 1, "packets": 1, "drops": 0, "backlog": 0},
            )
        ]
    )
    c.set_link_rates({("h1", "up"): 8})
    names |= {s.name for fam in c.collect() for s in fam.samples}
    return names


def test_metric_names_follow_prometheus_conventions():
    names = exported_names()
    assert all(n.startswith("testbed_") for n in names)
    counters = {n for n in names if n.endswith("_total")}
    assert {"testbed_iterations_total", "testbed_flows_started_total", "testbed_flows_completed_total",
            "testbed_qdisc_bytes_total", "testbed_qdisc_drops_total"} <= counters  # fmt: skip
    assert (
        "testbed_flow_completion_seconds_bucket" in names
        and "testbed_iteration_duration_seconds_sum" in names
    )


@needs_promtool
def test_prometheus_config_is_valid():
    r = subprocess.run(["promtool", "check", "config", str(COMPOSE / "prometheus" / "prometheus.yml")],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr


def test_compose_file_and_provisioning_fit_together():
    dc = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    assert set(dc["services"]) == {"prometheus", "grafana"}
    for svc in dc["services"].values():
        assert svc["network_mode"] == "host"  # exporters live on the host's management bridge
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("./"):
                assert (COMPOSE / src).exists(), src
    ds = yaml.safe_load((COMPOSE / "grafana/provisioning/datasources/prometheus.yml").read_text())
    uid = ds["datasources"][0]["uid"]
    dash = json.loads((COMPOSE / "grafana/dashboards/testbed.json").read_text())
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == uid
    prov = yaml.safe_load((COMPOSE / "grafana/provisioning/dashboards/testbed.yml").read_text())
    assert prov["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def dashboard_exprs() -> list[tuple[str, str]]:
    dash = json.loads((COMPOSE / "grafana/dashboards/testbed.json").read_text())
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]


def test_dashboard_covers_the_issue_and_uses_only_exported_metrics():
    titles = {t for t, _ in dashboard_exprs()}
    assert {"Iteration time per worker", "Flow completion time quantiles per size class",
            "Link utilisation per class and direction"} <= titles  # fmt: skip
    names = exported_names()
    for title, expr in dashboard_exprs():
        for metric in re.findall(r"testbed_[a-z_]+", expr):
            assert metric in names, f"{title}: {metric} is not exported"


@needs_promtool
def test_dashboard_queries_are_valid_promql(tmp_path):
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:panel{i}", "expr": expr.replace("$__rate_interval", "1m").replace("$run_id", ".*")}
        for i, (_, expr) in enumerate(dashboard_exprs())
    ]}]}  # fmt: skip
    f = tmp_path / "rules.yml"
    f.write_text(yaml.safe_dump(rules))
    r = subprocess.run(["promtool", "check", "rules", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
