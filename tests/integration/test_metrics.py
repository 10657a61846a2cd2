"""Prometheus end to end: real exporters, a real server, its data directory reopened later."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path

import pytest

from testbed.run.prometheus import scalar
from tests.needs import need, need_binary

from .helpers import reopened_tsdb, run_scenario, summary_class_bytes, tsdb_class_bytes

need("horovod.torch", "Horovod is installed by install.sh")
need_binary("prometheus", "install.sh installs it")


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("metrics")
    s = run_scenario(tmp, {
        "duration": "10s",
        "measure": {"warmup": "1s", "cooldown": "1s"},
        "topology": {"hosts": 3, "link_rate": "100mbit"},
        "tc_profile": "thesis-2band",
        "workloads": {
            "horovod": {"model_size": "1MB", "compute_time": "300ms", "tc_class": "low"},
            "websearch": {"arrival_rate": 0.7, "tc_class": "high"},
        },
        "metrics": {"scrape_interval": "500ms"},
    })  # fmt: skip
    return s, tmp / "run"


def test_config_is_valid_and_names_every_target(finished_run):
    s, run = finished_run
    r = subprocess.run(
        ["promtool", "check", "config", str(run / "prometheus.yml")], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
    m = s["metrics"]
    assert m["prometheus"] == "embedded" and m["targets"] == 1 + 3 + 3


def test_data_directory_reopens_with_the_raw_records_counts(finished_run):
    """The TSDB, reopened as a user would, against the run's raw records (flows.csv,
    iterations.csv) and the class counters in summary.json; not against the run's own
    cross-check, which reads the same Prometheus."""
    s, run = finished_run
    with reopened_tsdb(run / "prometheus") as url:
        flows = rows(run / "flows.csv")
        completed = sum(1 for f in flows if f["completed"] == "True")
        assert scalar(url, "sum(max_over_time(testbed_flows_completed_total[1h]))") == completed
        assert scalar(url, "sum(max_over_time(testbed_flows_started_total[1h]))") == len(flows)
        its = rows(run / "iterations.csv")
        for worker in ("h1", "h2", "h3"):
            n = sum(1 for r in its if r["worker"] == worker)
            assert n > 5
            assert (
                scalar(url, f'max_over_time(testbed_iterations_total{{worker="{worker}"}}[1h])')
                == n
            )
        # histograms and qdisc counters are there too, with the run's labels
        assert scalar(url, 'count(testbed_flow_completion_seconds_bucket{le="+Inf"})') >= 1
        assert (
            scalar(
                url,
                f'count(count by (node, direction) (testbed_qdisc_bytes_total{{run_id="{s["run_id"]}"}}))',
            )
            == 6
        )
        assert tsdb_class_bytes(url) == summary_class_bytes(s)
        # the dashboard's utilisation panel divides by this gauge: 100 Mbit/s in bytes/s
        assert (
            scalar(url, "max(max_over_time(testbed_link_rate_bytes_per_second[1h]))") == 100e6 / 8
        )


def test_metrics_traffic_stays_off_the_shaped_links(tmp_path):
    """Horovod alone, marked low, scraped five times a second. Scrapes are unmarked, so on the
    shaped links they would land in the high (default) class, which otherwise carries only
    ARP: it stays nearly empty because scrapes take the management path."""
    s = run_scenario(tmp_path, {
        "duration": "6s",
        "topology": {"hosts": 3, "link_rate": "100mbit"},
        "tc_profile": "thesis-2band",
        "workloads": {"horovod": {"model_size": "1MB", "compute_time": "200ms", "tc_class": "low"}},
        "metrics": {"scrape_interval": "200ms"},
    })  # fmt: skip
    its = rows(tmp_path / "run" / "iterations.csv")
    with reopened_tsdb(tmp_path / "run" / "prometheus") as url:  # it did scrape every iteration
        assert scalar(url, "sum(max_over_time(testbed_iterations_total[1h]))") == len(its) > 0
    for link in s["links"]:
        assert link["classes"]["low"]["bytes"] > 1_000_000, link
        assert link["classes"]["high"]["bytes"] < 5_000, link
