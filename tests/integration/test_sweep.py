"""`testbed sweep` end to end: two points, the second killed mid-run, `down`, then resumed."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from testbed.core.state import STATE_DIR
from tests.needs import need

from .helpers import ROOT, run_cli

need("horovod.torch", "Horovod is installed by install.sh")

BASE = {
    "name": "sw",
    "duration": "8s",
    "measure": {"warmup": "1s", "cooldown": "1s"},
    "topology": {"hosts": 3, "link_rate": "100mbit"},
    "tc_profile": "thesis-2band",
    "workloads": {
        "horovod": {"model_size": "1MB", "compute_time": "200ms"},
        "websearch": {"arrival_rate": 2, "tc_class": "high"},
    },
}
SWEEP = {
    "name": "two",
    "base": "base.yaml",
    "paired": {
        "scheme": {
            "same": {"workloads.horovod.tc_class": "high"},
            "low": {"workloads.horovod.tc_class": "low"},
        }
    },
    "seeds": [4],
    "compare": {"axis": "scheme", "baseline": "same"},
}


def sweep_proc(sweep: Path, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "testbed.cli", "sweep", str(sweep), "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def live_run_of(pid: int) -> dict | None:
    for p in STATE_DIR.glob("*.json") if STATE_DIR.is_dir() else []:
        try:
            st = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if st["pid"] == pid and st["phase"] == "running":
            return st
    return None


def test_a_killed_sweep_resumes_where_it_stopped(tmp_path):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE, sort_keys=False))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump(SWEEP, sort_keys=False))
    out = tmp_path / "out"

    proc = sweep_proc(sweep, out)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait for point 0 done and point 1 running
            done = out / "sweep.json"
            if done.is_file() and json.loads(done.read_text())["ok"] == 1 and live_run_of(proc.pid):
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        else:
            pytest.fail("the second point never started")
        time.sleep(2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    r = run_cli("down")
    assert r.returncode == 0, r.stderr

    proc = sweep_proc(sweep, out)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr
    assert "1 run now (1 finished earlier), 0 failed" in stdout
    with open(out / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["scheme"], r["status"]) for r in rows] == [("same", "ok"), ("low", "ok")]
    for r in rows:
        summary = json.loads((out / r["folder"] / "summary.json").read_text())
        assert summary["status"] == "ok" and summary["seed"] == 4
        assert float(r["iteration_mean_s"]) == summary["horovod"]["iteration_time_s"]["mean"]
    aside = [p.name for p in (out / "runs").iterdir() if ".failed-" in p.name]
    assert aside == ["001-s4_low.failed-1"]  # the killed attempt, kept, out of the way

    r = run_cli("report", str(out), "--json")
    assert r.returncode == 0, r.stderr
    agg = json.loads(r.stdout)
    (cell,) = agg["cells"]
    assert cell["scheme"] == "low" and cell["seeds"] == [4]
    base_it = json.loads((out / rows[0]["folder"] / "summary.json").read_text())["horovod"]
    low_it = json.loads((out / rows[1]["folder"] / "summary.json").read_text())["horovod"]
    by_hand = (low_it["iteration_time_s"]["mean"] / base_it["iteration_time_s"]["mean"] - 1) * 100
    assert cell["change_pct"]["iteration"]["mean"] == pytest.approx(by_hand)
    assert cell["baseline_flows"]["all"] > 0
