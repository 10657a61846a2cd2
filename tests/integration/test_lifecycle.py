"""The run life cycle through the real CLI: nothing is ever left behind."""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from testbed.core.state import STATE_DIR
from testbed.network.runtime.netns import pids_in
from tests.bounds import time_at_most

from .helpers import present_objects, run_cli, run_scenario, spawn_up, up_to_kill, wait_running

QUICK = """\
name: quick
duration: {duration}
measure: {{warmup: 1s, cooldown: 0s}}
topology: {{hosts: 3, link_rate: 20mbit{mgmt}}}
tc_profile: thesis-2band
workloads:
  linkcheck: {{pattern: ring, short_interval: 200ms}}
"""


def scenario(
    tmp_path: Path, duration: str = "3s", mgmt: str | None = None, name: str = "s.yaml"
) -> Path:
    p = tmp_path / name
    p.write_text(
        QUICK.format(duration=duration, mgmt=f", management_prefix: {mgmt}" if mgmt else "")
    )
    return p


def test_up_writes_the_run_folder_and_leaves_nothing(tmp_path):
    out = tmp_path / "run"
    r = run_cli("up", str(scenario(tmp_path)), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert (out / "testbed.log").stat().st_size > 0
    assert "thesis-2band" in (out / "scenario.yaml").read_text()
    s = json.loads((out / "summary.json").read_text())
    assert {"scenario", "run_id", "runtime", "duration_s", "links"} <= set(s)
    assert s["status"] == "ok" and s["runtime"] == "netns" and s["duration_s"] == 3
    assert len(s["links"]) == 6  # 3 hosts × up/down
    for entry in s["links"]:
        assert {"node", "direction", "rate_bps", "classes"} <= set(entry)
        assert set(entry["classes"]) == {"high", "low"}
        assert {"bytes", "packets", "drops"} <= set(entry["classes"]["high"])
        assert entry["classes"]["high"]["bytes"] > 0
    lc = s["linkcheck"]
    assert len(lc["bulk"]) == 6 and lc["short"]["completed"] > 0
    assert (out / "linkcheck" / "short.csv").read_text().count("\n") > lc["short"]["completed"]
    assert "goodput" in r.stdout and "run folder" in r.stdout


def test_live_run_holds_its_names_and_kill9_leaves_nothing(tmp_path):
    run_id = "c0ffee"
    with up_to_kill(run_id, str(scenario(tmp_path, "120s")), "--out", str(tmp_path / "run")) as up:
        st = up.running()
        namespaces = st.namespaces()
        assert len(namespaces) == 4 and all(Path("/run/netns", n).exists() for n in namespaces)
        assert pids_in(namespaces), "the workloads run inside the namespaces"

        # while it is live: status shows it, the same names and the same prefix are refused,
        # a run on default prefixes steps aside and completes, and a plain `down` leaves it alone
        assert "live" in run_cli("status").stdout
        before = present_objects()
        r = run_cli(
            "up",
            str(scenario(tmp_path, name="b.yaml")),
            "--run-id",
            run_id,
            "--out",
            str(tmp_path / "b"),
        )
        assert r.returncode == 2 and "held by another run" in r.stderr
        live_mgmt = yaml.safe_load((tmp_path / "run" / "scenario.yaml").read_text())["topology"][
            "management_prefix"
        ]
        r = run_cli(
            "up",
            str(scenario(tmp_path, mgmt=live_mgmt, name="c.yaml")),
            "--out",
            str(tmp_path / "c"),
        )
        assert r.returncode == 2 and "management_prefix" in r.stderr and run_id in r.stderr, (
            r.stderr
        )
        assert present_objects() == before and not (tmp_path / "c").exists()
        r = run_cli("up", str(scenario(tmp_path, name="d.yaml")), "--out", str(tmp_path / "d"))
        assert r.returncode == 0, r.stderr
        moved = yaml.safe_load((tmp_path / "d" / "scenario.yaml").read_text())["topology"]
        assert moved["management_prefix"] != live_mgmt
        assert json.loads((tmp_path / "d" / "summary.json").read_text())["status"] == "ok"
        assert present_objects() == before
        r = run_cli("down")
        assert r.returncode == 0 and "left alone" in r.stdout
        assert all(Path("/run/netns", n).exists() for n in namespaces)

        up.kill9()
        # its guardian removes what the killed run had made (test_reliability covers `down`)
        up.guardian_finished()
    assert not any(Path("/run/netns", n).exists() for n in namespaces)
    assert not Path(f"/sys/class/net/tb{run_id}").exists()
    assert not (STATE_DIR / f"{run_id}.json").exists()
    r = run_cli("down")
    assert r.returncode == 0 and "nothing to remove" in r.stdout


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_tears_down(tmp_path, sig):
    run_id = "5161" + ("02" if sig == signal.SIGINT else "15")
    out = tmp_path / "run"
    proc = spawn_up(str(scenario(tmp_path, "120s")), "--out", str(out), "--run-id", run_id)
    try:
        st = wait_running(run_id, proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert not any(Path("/run/netns", n).exists() for n in st.namespaces())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and signal.Signals(sig).name in summary["error"]


def test_dead_workload_fails_the_run_cleanly(tmp_path):
    run_id = "dead01"
    out = tmp_path / "run"
    proc = spawn_up(str(scenario(tmp_path, "120s")), "--out", str(out), "--run-id", run_id)
    try:
        st = wait_running(run_id, proc)
        time.sleep(1)
        victims = pids_in([f"tb-{run_id}-h2"])
        assert victims
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert "linkcheck" in err and "h2" in err and "Traceback" not in err
    assert not any(Path("/run/netns", n).exists() for n in st.namespaces())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and "h2" in summary["error"]
    assert (out / "linkcheck").is_dir()  # records written so far stay


BAD = {
    "hosts.yaml": ("name: b\ntopology: {hosts: -3}\n", "topology.hosts: must be ≥ 2, got -3"),
    "rate.yaml": ("name: b\ntopology: {hosts: 2, link_rate: 100mbps}\n", "topology.link_rate"),
    "profile.yaml": (
        "name: b\ntopology: {hosts: 2}\ntc_profile: nope\n",
        "tc_profile: no tc profile 'nope'",
    ),
    "class.yaml": (
        "name: b\ntopology: {hosts: 2}\nworkloads: {linkcheck: {short_class: gold}}\n",
        "workloads.linkcheck.short_class",
    ),
    "docker.yaml": (
        "name: b\nruntime: docker\ntopology: {hosts: 2}\ndocker: {cpus: 0}\n",
        "docker.cpus",
    ),
    "syntax.yaml": ("name: b\ntopology: {hosts: 2\n", "not valid YAML"),
}


@pytest.mark.parametrize("fname", sorted(BAD))
def test_bad_scenario_exits_2_and_creates_nothing(tmp_path, fname):
    text, expected = BAD[fname]
    (tmp_path / fname).write_text(text)
    before = present_objects()
    r = run_cli("up", str(tmp_path / fname), "--out", str(tmp_path / "run"))
    assert r.returncode == 2
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and expected in lines[0], r.stderr
    assert present_objects() == before
    assert not (tmp_path / "run").exists()


def test_bad_command_line_values(tmp_path):
    r = run_cli("up", str(scenario(tmp_path)), "--duration", "soon")
    assert r.returncode == 2 and "--duration" in r.stderr
    r = run_cli("up", str(scenario(tmp_path)), "--run-id", "NOTHEX")
    assert r.returncode == 2 and "--run-id" in r.stderr


def test_not_root_is_refused_plainly(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from testbed.cli import main

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    before = present_objects()
    r = CliRunner().invoke(main, ["up", str(scenario(tmp_path)), "--out", str(tmp_path / "run")])
    assert r.exit_code == 1
    assert "needs root" in r.output and "sudo" in r.output
    assert present_objects() == before and not (tmp_path / "run").exists()


def test_docker_engine_that_does_not_answer_is_one_line(tmp_path):
    p = tmp_path / "d.yaml"
    p.write_text("name: d\nruntime: docker\nduration: 10s\ntopology: {hosts: 2}\n")
    before = present_objects()
    r = run_cli(
        "up", str(p), "--out", str(tmp_path / "run"),
        env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no.sock"},
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    # (an INFO record may come first: the management prefix moved past another live run's)
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith(("INFO", " "))]
    assert len(lines) == 1 and "no Docker engine answers" in lines[0], r.stderr
    assert "install.sh" in lines[0]
    assert present_objects() == before and not (tmp_path / "run").exists()


def test_every_phase_ticks_the_workloads(tmp_path, monkeypatch):
    """A workload controller's `tick(now)` (the seam policies act through) is called at
    every poll from launch to collection: while the processes start, through the whole
    window at least every half second, and while flows drain; never after collection."""
    from testbed.run.live import POLL_S
    from testbed.workloads.linkcheck.controller import Linkcheck

    ticks: list[float] = []
    collected: list[float] = []
    monkeypatch.setattr(Linkcheck, "tick", lambda self, now: ticks.append(now))
    collect = Linkcheck.collect

    def recorded(self):
        out = collect(self)
        collected.append(time.time())
        return out

    monkeypatch.setattr(Linkcheck, "collect", recorded)
    s = run_scenario(
        tmp_path,
        {"duration": "3s", "topology": {"hosts": 2}, "workloads": {"linkcheck": {}}},
    )
    w = s["window"]
    assert ticks == sorted(ticks)
    assert ticks[0] < w["t0"], "no tick while the workload started"
    inside = [t for t in ticks if w["t0"] <= t <= w["t0"] + s["duration_s"]]
    assert len(inside) >= 3, f"{len(inside)} ticks in the window"
    gap = max(b - a for a, b in itertools.pairwise(inside))
    time_at_most(gap, POLL_S + 0.25, s, "the longest gap between ticks in the window")
    assert ticks[-1] <= collected[0], "ticked after the workload was collected"
