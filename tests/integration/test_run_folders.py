"""Every way of naming a run folder gives a Prometheus TSDB that agrees with summary.json.

Prometheus resolves the file_sd path in its configuration against the configuration's own
folder: a relative run folder once made it watch RUN/RUN/prometheus and scrape nothing, and
the suite, which used absolute temporary folders only, never saw it. These tests run the CLI
as a user does, from a working folder of their own with relative names, reopen each run's
TSDB with a Prometheus of their own and compare it with the summary (never with the run's
own cross-check)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.run.prometheus import scalar

from .helpers import ROOT, reopened_tsdb, summary_class_bytes, tsdb_class_bytes

SCENARIO = {
    "name": "folders",
    "duration": "3s",
    "measure": {"warmup": "0.5s", "cooldown": "0.5s", "drain": "5s"},
    "topology": {"hosts": 2, "link_rate": "20mbit"},
    "tc_profile": "thesis-2band",
    "workloads": {"linkcheck": {"pattern": "single", "short": False, "bulk_classes": ["low"]}},
    "metrics": {"scrape_interval": "500ms"},
}


def cli(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "160"}
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r


def check_tsdb(run: Path) -> dict:
    """The reopened TSDB holds the final class counters of every link direction, equal to the
    summary's; the run's log shows no file_sd error."""
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "ok", summary.get("error")
    assert "Error adding file watch" not in (run / "prometheus.log").read_text()
    with reopened_tsdb(run / "prometheus") as url:
        got = tsdb_class_bytes(url)
        want = summary_class_bytes(summary)
        assert got == want, (got, want)
        if "linkcheck" in summary:
            assert sum(want.values()) > 1_000_000  # the run did move data
        ws = summary.get("websearch")
        if ws:
            completed = scalar(url, "sum(max_over_time(testbed_flows_completed_total[1h]))")
            assert completed == ws["flows_completed"] > 0
    # the configuration names the targets file by an absolute path, the one in this run folder
    cfg = yaml.safe_load((run / "prometheus.yml").read_text())
    (sd,) = cfg["scrape_configs"][0]["file_sd_configs"][0]["files"]
    assert Path(sd) == (run / "prometheus" / "targets.json").resolve()
    return summary


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "s.yaml").write_text(yaml.safe_dump(SCENARIO))
    (tmp_path / "cwd").mkdir()
    return tmp_path


def test_default_folder_under_the_working_folder(workdir):
    """No --out: runs/NAME-TIME-ID under the working folder, printed relative to it; with
    web-search flows too, whose counts the TSDB must hold."""
    data = {**SCENARIO, "workloads": {"websearch": {"arrival_rate": 4}}}
    (workdir / "scenarios" / "ws.yaml").write_text(yaml.safe_dump(data))
    r = cli(workdir / "cwd", "up", "../scenarios/ws.yaml")
    (run,) = (workdir / "cwd" / "runs").iterdir()
    assert f"run folder: runs/{run.name}" in r.stdout
    assert "prometheus did not scrape" not in r.stderr and "disagree" not in r.stderr
    check_tsdb(run)


def test_relative_and_absolute_out(workdir):
    cwd = workdir / "cwd"
    cli(cwd, "up", "../scenarios/s.yaml", "--out", "nested/rel")
    check_tsdb(cwd / "nested" / "rel")
    cli(cwd, "up", "../scenarios/s.yaml", "--out", str(workdir / "abs"))
    check_tsdb(workdir / "abs")


def test_relative_out_that_leaves_the_working_folder(workdir):
    cwd = workdir / "cwd"
    cli(cwd, "up", "../scenarios/s.yaml", "--out", "../elsewhere/run")
    check_tsdb(workdir / "elsewhere" / "run")


def test_hold_with_a_relative_out(workdir):
    """A workload-free held run: its links count the hold, and the TSDB too."""
    data = {k: v for k, v in SCENARIO.items() if k != "workloads"}
    (workdir / "scenarios" / "empty.yaml").write_text(yaml.safe_dump(data))
    cli(workdir / "cwd", "up", "../scenarios/empty.yaml", "--out", "held", "--hold", "2s")
    s = check_tsdb(workdir / "cwd" / "held")
    assert s["hold"]["ended_by"] == "duration"


def test_sweep_point_folders_with_a_relative_out(workdir):
    sweep = {"name": "sw", "base": "s.yaml", "seeds": [1, 2]}
    (workdir / "scenarios" / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    cli(workdir / "cwd", "sweep", "../scenarios/sweep.yaml", "--out", "grid", timeout=300)
    points = sorted(p for p in (workdir / "cwd" / "grid" / "runs").iterdir() if p.is_dir())
    assert len(points) == 2
    for p in points:
        check_tsdb(p)
